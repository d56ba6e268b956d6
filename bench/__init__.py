"""Benchmarks for the fence lock and the fenced writes (``make bench``, ``make bench-quick``).

``plan`` says what runs, ``runner`` runs each case in a fresh process, ``cases/`` measure,
``report`` shows the results (tables, JSON, chart); method and caveats: docs/benchmarks.md.
"""
