"""The hipify preflight: torch's hipify over a CUDA tree, out of place, and what it could not map.

Minutes here instead of hours into a source build: which files hipify converts, which CUDA identifiers
and headers it has no HIP mapping for (file:line), and, with hipcc present, whether the result compiles
for a given GPU arch. torch.utils.hipify ships in every torch wheel; torch is an optional dependency.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from buildkit.errors import Problem, UserError

MARKER = ".buildkit-hipify"
# What is CUDA-only once hipify has run: runtime/driver/library identifiers and CUDA-only headers.
_IDENTIFIER_RE = re.compile(r"\b(?:(?:cuda|cublas(?:Lt)?|cufft|curand|cusparse(?:Lt)?|cusolver(?:Dn|Sp)?|cudnn|nvrtc|nvtx|nccl)[A-Z]\w*|cu[A-Z][a-z]\w*|CU(?:DA|BLAS)_[A-Z0-9_]+)\b")
_HEADER_RE = re.compile(r'#\s*include\s*[<"]((?:cuda|cub|thrust|cublas|cufft|curand|cusparse|cusolver|cudnn|nvtx)[^>"]*)[>"]')
_MISSING_HEADER_RE = re.compile(r"fatal error: '([^']+)' file not found")


@dataclass(frozen=True)
class Unmapped:
    file: str
    line: int
    identifier: str


@dataclass(frozen=True)
class Compiled:
    file: str
    status: str  # ok | error | environment (a header or tool missing here, not a hipify problem)
    output: str

    @property
    def summary(self) -> str:
        missing = _MISSING_HEADER_RE.search(self.output)
        if missing:
            return f"{missing.group(1)} is not installed here (an environment problem, not a hipify error)"
        errors = [line for line in self.output.splitlines() if "error:" in line]
        return errors[0] if errors else (self.output.splitlines() or [""])[-1]


@dataclass
class HipifyReport:
    source: str
    output: str
    converted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    unmapped: list[Unmapped] = field(default_factory=list)
    seconds: float = 0.0
    compiled: list[Compiled] = field(default_factory=list)
    compile_seconds: float | None = None
    compile_skipped: str = ""

    @property
    def passed(self) -> bool:
        return not self.unmapped and not any(c.status == "error" for c in self.compiled)


def _torch_hipify():
    try:
        from torch.utils.hipify import hipify_python
    except ImportError:
        raise UserError(Problem(
            "hipify", "needs torch's hipify (torch.utils.hipify, in every torch wheel): pip install 'buildkit[hipify]'",
        )) from None
    return hipify_python


def _code_lines(text: str):
    """(line number, code) with // and /* */ comments removed, so prose never counts as a use."""
    in_block = False
    for number, line in enumerate(text.splitlines(), start=1):
        code = ""
        rest = line
        while rest:
            if in_block:
                end = rest.find("*/")
                if end < 0:
                    rest = ""
                    break
                rest, in_block = rest[end + 2:], False
            else:
                start_block, start_line = rest.find("/*"), rest.find("//")
                if start_line >= 0 and (start_block < 0 or start_line < start_block):
                    code += rest[:start_line]
                    rest = ""
                elif start_block >= 0:
                    code += rest[:start_block]
                    rest, in_block = rest[start_block + 2:], True
                else:
                    code += rest
                    rest = ""
        yield number, code


def unmapped_uses(path: Path, shown: str) -> list[Unmapped]:
    found = []
    for number, code in _code_lines(path.read_text(encoding="utf-8", errors="replace")):
        found += [Unmapped(shown, number, f"#include <{m}>") for m in _HEADER_RE.findall(code)]
        if "#include" not in code:
            found += [Unmapped(shown, number, m) for m in _IDENTIFIER_RE.findall(code)]
    return found


def run_hipify(source: Path, out: Path) -> HipifyReport:
    hipify_python = _torch_hipify()
    source, out = source.resolve(), out.resolve()
    if not source.is_dir():
        raise UserError(Problem(str(source), "is not a folder of CUDA sources"))
    if out == source or source in out.parents:
        raise UserError(Problem("--out", f"{out} is inside the source tree; hipify runs out of place, pick a folder elsewhere"))
    if out.exists() and any(out.iterdir()):
        if not (out / MARKER).exists():
            raise UserError(Problem("--out", f"{out} is not empty and not an earlier hipify output; pick an empty folder"))
    if out.exists():
        shutil.rmtree(out)  # hipify copies the tree only into a folder that does not exist yet
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # hipify prints a banner of its own
        results = hipify_python.hipify(
            project_directory=str(source), output_directory=str(out), includes=["*"], show_progress=False,
            is_pytorch_extension=True,
        )
    (out / MARKER).write_text("written by buildkit hipify; the folder is replaced on the next run\n")
    report = HipifyReport(str(source), str(out), seconds=round(time.perf_counter() - started, 3))
    for original, result in sorted(results.items()):
        produced = Path(result.hipified_path or original)
        relative = str(produced.relative_to(out)) if out in produced.parents else str(produced)
        before = source / Path(original).relative_to(out) if out in Path(original).parents else Path(original)
        changed = produced.exists() and before.exists() and produced.read_bytes() != before.read_bytes()
        (report.converted if changed else report.unchanged).append(relative)
        if produced.exists():
            report.unmapped += unmapped_uses(produced, relative)
    return report


def compile_check(report: HipifyReport, offload_arch: str, hipcc: str | None = None) -> HipifyReport:
    """Compile each hipified translation unit for one arch with hipcc (HIP_PLATFORM=amd: without it
    hipcc picks a machine's nvcc). A missing header is this machine's problem, not hipify's."""
    hipcc = hipcc or shutil.which("hipcc")
    if hipcc is None:
        report.compile_skipped = "hipcc not found (Debian/Ubuntu: apt-get install hipcc libamdhip64-dev)"
        return report
    started = time.perf_counter()
    out = Path(report.output)
    units = [name for name in report.converted + report.unchanged if name.endswith((".hip", ".cpp", ".cc", ".cu"))]
    environment = {**os.environ, "HIP_PLATFORM": "amd"}
    with tempfile.TemporaryDirectory() as scratch:
        for name in units:
            result = subprocess.run(
                [hipcc, f"--offload-arch={offload_arch}", "-x", "hip", "-c", str(out / name), "-o", f"{scratch}/unit.o",
                 "-I", str(out)],
                capture_output=True, text=True, env=environment, timeout=600,
            )
            output = (result.stdout + result.stderr).strip()
            if result.returncode == 0:
                status = "ok"
            elif _MISSING_HEADER_RE.search(output):
                status = "environment"
            else:
                status = "error"
            report.compiled.append(Compiled(name, status, output[-2000:]))
    report.compile_seconds = round(time.perf_counter() - started, 3)
    return report
