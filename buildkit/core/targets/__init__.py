"""Targets: the matrix expanded into one image each, with tags, pair keys and twins.

One image per (vendor, backend version, torch, python, flavor).

- plan: the Target record and the expansion, selection and narrowing of a plan;
- source: facts for compiling PyTorch from source (the `source` flavor).
"""
