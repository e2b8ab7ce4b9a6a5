"""Benchmarks: run from the repository root as `python -m bench.NAME`; figures go to docs/benchmarks.md."""
