"""The compile check: every hipified translation unit compiled for one GPU arch, as torch's own ROCm
extension build would compile it, and each result read as a defect of the code (at the user's own line),
a header missing here (and how to get it), a failure outside the user's code, or a toolchain limit.

.hip and .cu files go to hipcc, .cpp and .cc files to the C++ compiler beside it, each with the flags and
include folders torch.utils.cpp_extension uses (buildkit.adapters.hipify.torch_extension), the ROCm-only torch
headers (a ROCm torch's own, or made from this torch's CUDA headers) and Python's headers. hipcc runs on
this machine or in a toolchain image (buildkit.adapters.hipify.hipcc).
"""

from __future__ import annotations

import os
import re
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from buildkit.adapters.hipify import hipcc as toolchain
from buildkit.adapters.hipify import torch_extension
from buildkit.adapters.hipify.convert import torch_hipify
from buildkit.core import porting
from buildkit.core.hipify_report import Compiled, HipifyReport

_COMPILE_SECONDS = 600
_HIPCC_UNITS = (".hip", ".cu")
_CXX_UNITS = (".cpp", ".cc")
_OUTPUT_KEPT = 4000  # characters of compiler output kept per file in the report


def compile_check(
    report: HipifyReport, offload_arch: str, known: Sequence[str], hipcc: toolchain.Hipcc | None,
    include_dirs: Sequence[str] = (),
) -> HipifyReport:
    """Compile each hipified unit for one arch. A missing header is this machine's gap, an arch hipcc does
    not know is its toolchain's limit, and an error in torch's or ROCm's headers is not the user's: none of
    them is blamed on the code."""
    report.offload_arch = offload_arch
    if hipcc is None:
        report.compile_skipped = ("hipcc not found (Debian/Ubuntu: apt-get install hipcc libamdhip64-dev), "
                                  "or check in a ROCm toolchain image: --toolchain-image IMAGE")
        return report
    report.toolchain = hipcc.described
    if not toolchain.supports(hipcc, offload_arch):
        report.toolchain_limit = toolchain.toolchain_limit_message(hipcc, offload_arch, known)
        return report
    started = time.perf_counter()
    out = Path(report.output)
    build = torch_extension.read_extension_build(offload_arch, _extension_name(report.source))
    units = [name for name in report.converted + report.unchanged if name.endswith(_HIPCC_UNITS + _CXX_UNITS)]
    with tempfile.TemporaryDirectory(prefix="buildkit-compile-check-") as scratch:
        headers = torch_extension.rocm_headers(build, torch_hipify(), Path(scratch))
        report.headers = headers.origin
        objects = Path(scratch) / "objects"
        objects.mkdir()
        includes = [out, *(out / folder for folder in include_dirs), *headers.include_dirs, *build.include_dirs,
                    *build.python_include_dirs, *_rocm_include(hipcc)]
        mounts = [out, *headers.include_dirs, *build.include_dirs, *build.python_include_dirs]
        user = _UsersCode(report, out)
        for index, name in enumerate(units):
            hip = name.endswith(_HIPCC_UNITS)
            compiler = hipcc.path if hip else hipcc.runner.cxx()
            argv = [compiler, *build.every_file_flags]
            if hip:
                argv += [*build.hipcc_flags, f"--offload-arch={offload_arch}", *build.arch_flags]
            argv += [f"-I{folder}" for folder in includes]
            argv += [*(["-x", "hip"] if hip else []), "-c", str(out / name), "-o", str(objects / f"{index}.o")]
            ran = hipcc.run(argv, _COMPILE_SECONDS, read_only=mounts, writable=[objects])
            source = report.origins.get(name, name)
            shown = "hipcc" if hip else "c++"
            if ran.returncode is None:
                report.compiled.append(Compiled(name, source, shown, porting.ELSEWHERE, f"did not finish within {_COMPILE_SECONDS} s", ""))
                continue
            output = ran.output.strip()
            if hip and ran.returncode != 0 and toolchain.is_toolchain_limit(output, offload_arch):
                report.compiled.append(Compiled(name, source, shown, porting.TOOLCHAIN, "", output[-_OUTPUT_KEPT:]))
                report.toolchain_limit = toolchain.toolchain_limit_message(hipcc, offload_arch, known)
                break  # every other unit would fail the same way
            if ran.returncode == 127 and not hip:
                report.compiled.append(Compiled(name, source, shown, porting.MISSING, f"the C++ compiler {compiler} is not installed "
                                                f"{hipcc.runner.where} (Debian/Ubuntu: apt-get install g++)", output))
                continue
            verdict = porting.judge_compile(output, ran.returncode, user.location)
            summary = verdict.summary
            if verdict.status == porting.MISSING and hipcc.runner.on_host:
                summary += "; or check in a ROCm toolchain image that has it (--toolchain-image IMAGE)"
            elif verdict.status == porting.ELSEWHERE:
                summary += f" (torch {build.torch}'s headers with {hipcc.name}: not a defect of your code)"
            report.compiled.append(Compiled(name, source, shown, verdict.status, summary, output[-_OUTPUT_KEPT:],
                                            str(verdict.location) if verdict.status == porting.DEFECT else ""))
    report.compile_seconds = round(time.perf_counter() - started, 3)
    return report


def _extension_name(source: str) -> str:
    # TORCH_EXTENSION_NAME is the extension module's name (its setup.py's, which the check cannot know):
    # the tree's folder name, made a C identifier, stands in for it.
    name = re.sub(r"\W", "_", Path(source).name)
    return name if name and not name[0].isdigit() else f"_{name}"


def _rocm_include(hipcc: toolchain.Hipcc) -> list[Path]:
    # include_paths("cuda") of a ROCm torch adds ROCm's include folder; Debian's ROCm lives in /usr, whose
    # include folder the compilers search anyway (and GCC's #include_next breaks when it is named again).
    folder = Path(hipcc.rocm_home) / "include" if hipcc.rocm_home else None
    return [folder] if folder and folder != Path("/usr/include") else []


class _UsersCode:
    """Which diagnostics point into the user's tree, at the user's own file and line."""

    def __init__(self, report: HipifyReport, out: Path):
        self.report = report
        self.out = out
        self.maps: dict[str, porting.LineMap] = {}

    def location(self, path: str, line: int) -> porting.Location | None:
        resolved = Path(os.path.normpath(path))
        if not resolved.is_absolute() or (resolved != self.out and self.out not in resolved.parents):
            return None
        name = resolved.relative_to(self.out).as_posix()
        source = self.report.origins.get(name)
        if source is None:
            return porting.Location(name, line)
        if name not in self.maps:
            self.maps[name] = porting.LineMap((self.out / source).read_text(encoding="utf-8", errors="replace"),
                                              resolved.read_text(encoding="utf-8", errors="replace"))
        return porting.Location(source, self.maps[name].original(line), f"{name}:{line}")
