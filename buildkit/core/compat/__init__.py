"""The compatibility data: which torch release ships wheels for which backend and Python.

Which torch release ships wheels for which CUDA, ROCm and Python, with what arch lists, and AMD's gfx targets and
their packaging hierarchy. Loading buildkit/data/compat.toml is the caller's job.

- facts: the data (plus a team's [compat] overrides) as frozen lookups;
- amd_targets: AMD's gfx targets, sub-families and families, as AMD's rocm-bootstrap defines them.
"""
