"""`buildkit hipify`: options checked before the minutes of work, the run, the compile check, the JSON report."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath

from buildkit.adapters.bundled import shipped_compat
from buildkit.adapters.hipify.compile_check import compile_check
from buildkit.adapters.hipify.convert import run_hipify
from buildkit.adapters.hipify.hipcc import HOST, ImageRunner, default_offload_arch, find_hipcc
from buildkit.adapters.safe_files import check_writable_file, write_atomic
from buildkit.core import grammar
from buildkit.core.hipify_report import HipifyReport
from buildkit.errors import Problem, UserError


@dataclass(frozen=True)
class PreflightOptions:
    source: Path
    out: Path | None = None  # default: SOURCE-hip next to SOURCE
    compile_check: bool = False
    offload_arch: str | None = None  # default: the newest data-center arch the hipcc supports
    json: Path | None = None
    toolchain_image: str | None = None  # run hipcc in a container of this image instead of on this machine
    include_dirs: tuple[str, ...] = ()  # the tree's own include folders (relative to it), as its setup.py passes them


def preflight(options: PreflightOptions) -> HipifyReport:
    known = shipped_compat().known_archs["rocm"]
    arch = options.offload_arch
    if arch is not None:
        if options.compile_check and arch not in known:
            raise UserError(f"--offload-arch: unknown gfx target {arch!r}; known: {', '.join(known)}")
        if grammar.rocm_arch(arch):
            raise UserError(f"--offload-arch: expected a gfx target such as gfx942, got {arch!r}")
    if (options.toolchain_image or options.include_dirs) and not options.compile_check:
        raise UserError(Problem("--toolchain-image" if options.toolchain_image else "--include-dir", "only applies to --compile-check"))
    _check_include_dirs(options.source, options.include_dirs)
    if options.toolchain_image and grammar.image_reference(options.toolchain_image):
        raise UserError(Problem("--toolchain-image", f"expected {grammar.image_reference(options.toolchain_image)}, got {options.toolchain_image!r}"))
    if options.json:
        check_writable_file(options.json, "--json")
    hipcc = None
    if options.compile_check:  # before the hipify run: an image without hipcc is said at once
        runner = ImageRunner.of(options.toolchain_image) if options.toolchain_image else HOST
        hipcc = find_hipcc(runner)
        if hipcc is None and options.toolchain_image:
            raise UserError(Problem("--toolchain-image", f"{options.toolchain_image} has no hipcc (looked on its PATH and in /opt/rocm/bin)"))
    source = options.source
    report = run_hipify(source, options.out or source.resolve().parent / f"{source.resolve().name}-hip")
    if options.compile_check:
        report = compile_check(report, arch or default_offload_arch(hipcc, known), known, hipcc, options.include_dirs)
    if options.json:
        document = asdict(report) | {"passed": report.passed}
        write_atomic(options.json, (json.dumps(document, indent=2) + "\n").encode("utf-8"), "--json")
    return report


def _check_include_dirs(source: Path, include_dirs: tuple[str, ...]) -> None:
    for folder in include_dirs:
        relative = PurePosixPath(folder)
        if relative.is_absolute() or ".." in relative.parts or not (source / relative).is_dir():
            raise UserError(Problem("--include-dir", f"{folder!r} is not a folder inside {source}: give the tree's own include "
                                    "folders relative to it (their hipified copies are what compiles)"))
