"""The pure core: matrix -> targets -> rendered text, tags, labels and fingerprints.

Nothing in this package touches the world (no subprocess, network, clock or file reads): callers pass
in parsed data and get values back, so it is tested fast and behaves the same everywhere.

Its rooms hold one concern each (matrix, compat, targets, render, release, supply_chain, host, and the two closed
subsystems porting and upstream). Beside them stay the basics every room reads (grammar, vendors, shell,
reference, labels) and three modules that belong with targets: bases, install_plan and trim. Every image's
Dockerfile (templates/) or installer (image/install.py) names those three by their path, and those texts are part
of every image's fingerprint: they move into targets/ with the next change that alters fingerprints anyway.
"""
