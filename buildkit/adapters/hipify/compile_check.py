"""The compile check: every hipified translation unit compiled for one GPU arch, each result read.

Each unit is compiled as torch's own ROCm extension build would compile it, and each result read as a defect of the
code (at the user's own line), a header missing here (and how to get it), a failure outside the user's code, or a
toolchain limit.

.hip and .cu files go to hipcc, .cpp and .cc files to the C++ compiler beside it, each with the flags and
include folders torch.utils.cpp_extension uses (buildkit.adapters.hipify.torch_extension), the ROCm-only torch
headers (a ROCm torch's own, or made from this torch's CUDA headers) and Python's headers. hipcc runs on
this machine or in a toolchain image (buildkit.adapters.hipify.hipcc).
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from buildkit.adapters.hipify import hipcc as toolchain
from buildkit.adapters.hipify import torch_extension
from buildkit.adapters.hipify.convert import torch_hipify
from buildkit.core.porting import analysis
from buildkit.core.porting.preprocessor import parse_define, parse_dump
from buildkit.core.porting.report import Compiled, HipifyReport
from buildkit.core.porting.setup_py import ProjectFlags, UnitFlags

if TYPE_CHECKING:
    from collections.abc import Sequence

_COMPILE_SECONDS = 600
_HIPCC_UNITS = (".hip", ".cu")
_CXX_UNITS = (".cpp", ".cc")
_OUTPUT_KEPT = 4000  # characters of compiler output kept per file in the report


def compile_check(
    report: HipifyReport,
    offload_arch: str,
    known: Sequence[str],
    hipcc: toolchain.Hipcc | None,
    build: torch_extension.ExtensionBuild | None = None,
    project: ProjectFlags | None = None,
    include_dirs: Sequence[str] = (),
    keep_objects: Path | None = None,
) -> HipifyReport:
    """Compile each hipified unit for one arch. A missing header is this machine's gap, an arch hipcc does
    not know is its toolchain's limit, and an error in torch's or ROCm's headers is not the user's: none of
    them is blamed on the code. A finding that blocks stops blocking when every unit that includes its file compiled."""
    report.checked = True
    report.offload_arch = offload_arch
    project = project or ProjectFlags()
    report.build_flags = project.described()
    if hipcc is None:
        report.compile_skipped = (
            "hipcc not found (Debian/Ubuntu: apt-get install hipcc libamdhip64-dev), or check in a ROCm toolchain image: --toolchain-image IMAGE"
        )
        return report
    report.toolchain = hipcc.described
    if not toolchain.supports(hipcc, offload_arch):
        report.toolchain_limit = toolchain.toolchain_limit_message(hipcc, offload_arch, known)
        return report
    started = time.perf_counter()
    out = Path(report.output)
    build = build or torch_extension.read_extension_build(offload_arch, extension_name(report.source))
    units = [name for name in report.converted + report.unchanged if name.endswith(_HIPCC_UNITS + _CXX_UNITS)]
    with tempfile.TemporaryDirectory(prefix="buildkit-compile-check-") as scratch:
        headers = torch_extension.rocm_headers(build, torch_hipify(), Path(scratch))
        report.headers = headers.origin
        objects = keep_objects or Path(scratch) / "objects"
        objects.mkdir(parents=True, exist_ok=True)
        report.objects = str(keep_objects or "")
        shared = [*headers.include_dirs, *build.include_dirs, *build.python_include_dirs, *_rocm_include(hipcc)]
        check = _Check(
            report,
            hipcc,
            offload_arch,
            known,
            [out, *headers.include_dirs, *build.include_dirs, *build.python_include_dirs],
            objects,
            _UsersCode(report, out),
            _CompilerName(hipcc),
        )
        for name in units:
            hip = name.endswith(_HIPCC_UNITS)
            flags = project.for_unit(report.origins.get(name, name))
            argv = _command(hipcc, build, flags, offload_arch, hip, [out, *(out / d for d in (*include_dirs, *flags.include_dirs)), *shared])
            report.compiled.append(check.unit(name, argv, hip))
            if report.compiled[-1].status == analysis.TOOLCHAIN:
                break  # every other unit would fail the same way
    _settle_findings(report)
    report.compile_seconds = round(time.perf_counter() - started, 3)
    return report


def _command(hipcc: toolchain.Hipcc, build: torch_extension.ExtensionBuild, flags: UnitFlags, arch: str, hip: bool, includes: Sequence[Path]) -> list[str]:
    """The compiler and flags torch's ROCm build uses for one unit (unix_wrap_single_compile): torch's own, the
    project's, -std only when the project names none, then the include folders."""
    own = [*flags.defines, *(flags.hipcc if hip else flags.cxx)]
    torch_flags = [flag for flag in build.every_file_flags if not (flag.startswith("-std=") and any(f.startswith("-std=") for f in own))]
    argv = [hipcc.path if hip else hipcc.runner.cxx(), *torch_flags]
    if hip:
        argv += [*build.hipcc_flags, f"--offload-arch={arch}", *build.arch_flags]
    argv += own
    argv += [f"-I{folder}" for folder in dict.fromkeys(includes)]
    return [*argv, *(["-x", "hip"] if hip else [])]


@dataclass
class _Check:
    """One compile check's context: where it runs, what it mounts, where objects go, how output is read."""

    report: HipifyReport
    hipcc: toolchain.Hipcc
    arch: str
    known: Sequence[str]
    mounts: list[Path]
    objects: Path
    user: _UsersCode
    cxx: _CompilerName

    def unit(self, name: str, argv: list[str], hip: bool) -> Compiled:
        source, shown = self.report.origins.get(name, name), "hipcc" if hip else "c++"
        target = self.objects / f"{name}.o"
        target.parent.mkdir(parents=True, exist_ok=True)
        command = (*argv, "-c", str(Path(self.report.output) / name), "-o", str(target), "-MD", "-MF", f"{target}.d")
        ran = self.hipcc.run(command, _COMPILE_SECONDS, read_only=self.mounts, writable=[self.objects])
        if ran.returncode is None:
            return Compiled(name, source, shown, analysis.ELSEWHERE, f"did not finish within {_COMPILE_SECONDS} s", "", command=command)
        output = ran.output.strip()
        if hip and ran.returncode != 0 and toolchain.is_toolchain_limit(output, self.arch):
            self.report.toolchain_limit = toolchain.toolchain_limit_message(self.hipcc, self.arch, self.known)
            return Compiled(name, source, shown, analysis.TOOLCHAIN, "", output[-_OUTPUT_KEPT:], command=command)
        if ran.returncode == 127 and not hip:
            return Compiled(
                name,
                source,
                shown,
                analysis.MISSING,
                f"the C++ compiler {command[0]} is not installed {self.hipcc.runner.where} (Debian/Ubuntu: apt-get install g++)",
                output,
                command=command,
            )
        verdict = analysis.judge_compile(output, ran.returncode, self.user.location, self.hipcc.name if hip else self.cxx.name(), self.hipcc.version)
        summary = verdict.summary
        if verdict.status == analysis.MISSING and self.hipcc.runner.on_host:
            summary += "; or check in a ROCm toolchain image that has it (--toolchain-image IMAGE)"
        out = Path(self.report.output)
        includes = _dependencies(Path(f"{target}.d"), out) if verdict.status == analysis.COMPILED else self._preprocessed(argv, target)
        return Compiled(
            name,
            source,
            shown,
            verdict.status,
            summary,
            output[-_OUTPUT_KEPT:],
            str(verdict.location) if verdict.status == analysis.DEFECT else "",
            verdict.errors,
            command,
            includes,
        )

    def _preprocessed(self, argv: list[str], target: Path) -> tuple[str, ...] | None:
        """What a unit that did not compile includes: its preprocessor's dependency list (-M -MG: a missing header
        is listed, not fatal); None when even that fails."""
        source = str(Path(self.report.output) / target.relative_to(self.objects).as_posix().removesuffix(".o"))
        ran = self.hipcc.run([*argv, source, "-M", "-MG", "-MF", f"{target}.d"], _COMPILE_SECONDS, read_only=self.mounts, writable=[self.objects])
        return _dependencies(Path(f"{target}.d"), Path(self.report.output)) if ran.returncode == 0 else None


def _dependencies(depfile: Path, out: Path) -> tuple[str, ...] | None:
    """The files of --out a Makefile-style dependency list names (hipcc writes one rule per pass)."""
    try:
        text = depfile.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    paths = shlex.split(text.replace("\\\n", " ").replace(":", " ")) if text else []
    names = []
    for path in paths:
        resolved = Path(os.path.normpath(path))
        if resolved.is_absolute() and out in resolved.parents:
            names.append(resolved.relative_to(out).as_posix())
    return tuple(dict.fromkeys(names))


def _settle_findings(report: HipifyReport) -> None:
    """A blocking finding whose file every including unit compiled did not stop the build: it stops blocking,
    and says which units compiled it. Only where every unit's includes are known (one that did not compile and
    whose includes could not be read might include the file)."""
    if any(unit.includes is None for unit in report.compiled):
        return
    settled = []
    for finding in report.findings:
        produced = finding.hipified.rsplit(":", 1)[0] if finding.hipified else finding.file
        including = [unit for unit in report.compiled if unit.file == produced or produced in (unit.includes or ())]
        if finding.blocks and including and all(unit.status == analysis.COMPILED for unit in including):
            finding = dataclasses.replace(finding, blocks=False, compiled_by=tuple(unit.file for unit in including))
        settled.append(finding)
    report.findings = settled


class _CompilerName:
    """The C++ compiler as a report names it (its --version line), asked once."""

    def __init__(self, hipcc: toolchain.Hipcc) -> None:
        self.hipcc = hipcc
        self.found: str | None = None

    def name(self) -> str:
        if self.found is None:
            ran = self.hipcc.runner.run([self.hipcc.runner.cxx(), "--version"], {}, 60)
            first = ran.output.strip().splitlines()[0] if ran.returncode == 0 and ran.output.strip() else ""
            self.found = first or self.hipcc.runner.cxx()  # "c++ (Debian 16.2.0-4) 16.2.0"
        return self.found


def build_macros(hipcc: toolchain.Hipcc | None, build: torch_extension.ExtensionBuild, project: ProjectFlags, arch: str) -> analysis.BuildMacros:
    """The macros each compilation of the ROCm build starts with: asked of the compilers (`-dM -E` with the
    build's flags) where hipcc can compile for the arch, else torch's and the project's -D flags and what
    HIP's clang defines itself."""
    flags = project.for_unit("")
    hipcc_defines = _defines([*build.every_file_flags, *build.hipcc_flags, *flags.defines, *flags.hipcc])
    cxx_defines = _defines([*build.every_file_flags, *flags.defines, *flags.cxx])
    assumed = "torch's ROCm extension flags and the project's -D flags"
    if hipcc is None or not toolchain.supports(hipcc, arch):
        return analysis.BuildMacros.assumed(hipcc_defines, cxx_defines, assumed + " (no hipcc to ask for its own)")
    base = [flag for flag in _command(hipcc, build, flags, arch, True, []) if flag not in ("-x", "hip")]
    dumps = []
    for argv in (
        [*base, "-x", "hip", "--cuda-host-only", "-dM", "-E", "/dev/null"],
        [*base, "-x", "hip", "--cuda-device-only", "-dM", "-E", "/dev/null"],
        [*_command(hipcc, build, flags, arch, False, []), "-x", "c++", "-dM", "-E", "/dev/null"],
    ):
        ran = hipcc.run(argv, _COMPILE_SECONDS)
        if ran.returncode != 0:
            return analysis.BuildMacros.assumed(
                hipcc_defines, cxx_defines, f"{assumed} ({argv[0]} -dM -E failed: {(ran.output.strip().splitlines() or ['no output'])[-1]})"
            )
        dumps.append(parse_dump(ran.output))
    origin = f"{hipcc.name}'s and {hipcc.runner.cxx()}'s own macros (-dM -E) with torch's and the project's flags"
    return analysis.BuildMacros.dumped(dumps[0], dumps[1], dumps[2], origin)


def _defines(flags: Sequence[str]) -> dict[str, str | None]:
    return dict(parse_define(flag[2:]) for flag in flags if flag.startswith("-D") and len(flag) > 2)


def extension_name(source: str) -> str:
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

    def __init__(self, report: HipifyReport, out: Path) -> None:
        self.report = report
        self.out = out
        self.maps: dict[str, analysis.LineMap] = {}

    def location(self, path: str, line: int) -> analysis.Location | None:
        resolved = Path(os.path.normpath(path))
        if not resolved.is_absolute() or (resolved != self.out and self.out not in resolved.parents):
            return None
        name = resolved.relative_to(self.out).as_posix()
        source = self.report.origins.get(name)
        if source is None:
            return analysis.Location(name, line)
        if name not in self.maps:
            self.maps[name] = analysis.LineMap(
                (self.out / source).read_text(encoding="utf-8", errors="replace"), resolved.read_text(encoding="utf-8", errors="replace")
            )
        return analysis.Location(source, self.maps[name].original(line), f"{name}:{line}")
