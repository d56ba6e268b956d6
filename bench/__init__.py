"""Benchmarks for the fence lock and the fenced writes (``make bench``, ``make bench-quick``).

``plan`` says what runs, ``runner`` runs each case in a fresh ``worker`` process, ``cases/``
measure, ``report`` and ``chart`` show the results; method and caveats: docs/benchmarks.md.
"""
