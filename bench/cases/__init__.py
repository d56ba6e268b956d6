"""The measured cases. Each module's functions run inside a fresh worker process
(``bench.worker``) and return ``{"samples_us": [...], "metrics": {...}, "counts": {...},
"invariants": [{"name", "ok", "detail"}]}``; ``bench.plan`` says which to run and how often.
"""
