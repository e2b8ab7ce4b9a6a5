"""Facts for compiling PyTorch from source for ROCm (the `source` flavor). Pure."""

from __future__ import annotations

# About one compiler job per 7 GB: PyTorch's heaviest translation units (flash attention, the ROCm
# kernels for several archs) take 4-8 GB each, and an out-of-memory kill hours into a build costs the build.
GB_PER_JOB = 7
SOURCE_FLAVOR = "source"


def max_jobs(memory_bytes: int, cores: int, gb_per_job: int = GB_PER_JOB) -> int:
    """Parallel compile jobs for a builder with this much available memory and these cores."""
    by_memory = memory_bytes // (gb_per_job * 1024**3)
    return max(1, min(cores, by_memory))
