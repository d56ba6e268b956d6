"""Benchmarks of the fence lock and the fenced writes: ``plan`` says what runs, ``runner``
runs each case in a fresh process, ``cases/`` measure, ``report`` shows (docs/benchmarks.md)."""
