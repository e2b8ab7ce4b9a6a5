"""Smoke tests: a probe that runs inside an image, and the host-side judgment of what it reports."""
