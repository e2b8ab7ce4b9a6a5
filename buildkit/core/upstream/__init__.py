"""The upstream check (`buildkit compat check`): the compatibility data against what is published.

Against what the indexes publish and what the released wheels themselves say, and the change to compat.toml and
the default matrix that makes them agree. A closed subsystem: only its use case, buildkit.app.compat_check,
imports it (tests/unit/test_layout.py).

- check: the data against the indexes' facts (differences, pending facts, the rewritten compat.toml);
- releases: facts of published releases, read from their files (names, upload dates, METADATA, version module);
- pypi: what PyPI's torch, torchvision and torchaudio artifacts say, against the data;
- code_objects: which GPU archs a shared library carries code for, read from its bytes;
- arch_lists: which GPU archs each build of a release carries, read from the wheel's own tables and strings;
- arch_check: those readings against the data's arch lists;
- matrix_proposal: the default matrix kept in step with the data (a new release's stack).
"""
