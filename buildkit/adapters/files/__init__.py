"""Files buildkit reads and writes, bounded and confined.

Input files read as regular files only, within a size (inputs), output folders written file by file, confined and
atomic (outputs), a matrix with its `extends` chain, lock and templates (matrix), and where the shipped matrix,
templates and data live (bundled), and the JSON documents `report` reads (documents).
"""
