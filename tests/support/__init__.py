"""Test support: wheel doubles, a local wheel index server, engine fixtures' helpers."""
