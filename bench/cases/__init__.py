"""The measured cases: functions run in a fresh ``bench.runner`` process that return
``bench.measure.result(...)``; ``bench.plan`` says which to run and how often."""
