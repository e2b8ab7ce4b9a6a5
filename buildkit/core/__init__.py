"""The pure core: matrix -> targets -> rendered text, tags, labels and fingerprints.

Nothing in this package touches the world (no subprocess, network, clock or file reads): callers pass
in parsed data and get values back, so it is tested fast and behaves the same everywhere.
"""
