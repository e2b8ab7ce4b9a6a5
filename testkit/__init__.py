"""Helpers that tests and benchmarks share: torch wheel doubles, a local wheel index, a test registry,
fixture host trees, and running the buildkit CLI as a user would."""
