"""Benchmarks of the fence lock and the fenced writes (docs/benchmarks.md)."""
