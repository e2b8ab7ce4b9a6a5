"""Targets: the matrix expanded into one image each (vendor, backend version, torch, python, flavor), with
tags, pair keys and twins.

- plan: the Target record and the expansion, selection and narrowing of a plan;
- source: facts for compiling PyTorch from source (the `source` flavor).
"""
