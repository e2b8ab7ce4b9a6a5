"""`buildkit hipify`: the ROCm preflight of a CUDA tree (hipify out of place, unmapped identifiers, compile check)."""

from __future__ import annotations

from pathlib import Path

from buildkit.adapters.bundled import compat_data
from buildkit.adapters.hipify import HipifyReport, compile_check, run_hipify
from buildkit.core import grammar
from buildkit.errors import Problem, UserError


def default_output(source: Path) -> Path:
    return source.resolve().parent / f"{source.resolve().name}-hip"


def hipify(source: Path, out: Path | None, check: bool, offload_arch: str) -> HipifyReport:
    if not grammar.ROCM_ARCH_RE.match(offload_arch):
        raise UserError(Problem("--offload-arch", f"expected a gfx target such as gfx942, got {offload_arch!r}"))
    known = compat_data()["archs"]["rocm"]
    if check and offload_arch not in known:
        raise UserError(Problem("--offload-arch", f"unknown gfx target {offload_arch!r}; known: {', '.join(known)}"))
    report = run_hipify(source, out or default_output(source))
    return compile_check(report, offload_arch) if check else report
