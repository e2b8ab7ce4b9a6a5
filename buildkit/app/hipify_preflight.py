"""`buildkit hipify`: options checked before the minutes of work, the run, the compile check, the JSON report."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from buildkit.adapters.bundled import shipped_compat
from buildkit.adapters.hipcc import default_offload_arch, find_hipcc
from buildkit.adapters.hipify import HipifyReport, compile_check, run_hipify
from buildkit.adapters.safe_files import check_writable_file, write_atomic
from buildkit.core import grammar
from buildkit.errors import UserError


@dataclass(frozen=True)
class PreflightOptions:
    source: Path
    out: Path | None = None  # default: SOURCE-hip next to SOURCE
    compile_check: bool = False
    offload_arch: str | None = None  # default: the newest data-center arch the installed hipcc supports
    json: Path | None = None


def preflight(options: PreflightOptions) -> HipifyReport:
    known = shipped_compat().known_archs["rocm"]
    arch = options.offload_arch
    if arch is not None:
        if options.compile_check and arch not in known:
            raise UserError(f"--offload-arch: unknown gfx target {arch!r}; known: {', '.join(known)}")
        if grammar.rocm_arch(arch):
            raise UserError(f"--offload-arch: expected a gfx target such as gfx942, got {arch!r}")
    if options.json:
        check_writable_file(options.json, "--json")
    source = options.source
    report = run_hipify(source, options.out or source.resolve().parent / f"{source.resolve().name}-hip")
    if options.compile_check:
        hipcc = find_hipcc()
        report = compile_check(report, arch or default_offload_arch(hipcc, known), known, hipcc)
    if options.json:
        document = asdict(report) | {"passed": report.passed}
        write_atomic(options.json, (json.dumps(document, indent=2) + "\n").encode("utf-8"), "--json")
    return report
