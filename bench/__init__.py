"""Benchmarks for the fence lock and the fenced writes (``make bench``, ``make bench-quick``).

Layout: ``__main__`` (the command), ``plan`` (groups, profiles, targets), ``runner``
(round-robin repeats in fresh processes), ``worker`` (one measurement per process),
``cases/`` (what is measured), ``measure`` (statistics and counting), ``environment``
(private Redis, the bench database, versions), ``report`` and ``chart`` (output).
Method and caveats: docs/benchmarks.md. The fault-injection suite (``make faults``) is a
test and lives in ``tests/faults``.
"""
