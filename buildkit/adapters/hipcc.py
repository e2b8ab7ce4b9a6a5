"""The installed hipcc: its HIP version and the gfx targets its clang can compile for.

hipcc is a driver around a clang (ROCm's /opt/rocm/llvm, or Debian's clang++-17); which GPU archs it can
target is that clang's list, and an older ROCm simply does not know the newer chips (HIP 5.7's clang 17
rejects gfx950 and gfx1200 with "invalid target ID"). Knowing the list lets the compile check pick an arch
this hipcc can build for, and tell a toolchain limit from a defect in the code it compiles.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

_VERSION_RE = re.compile(r"HIP version:\s*(\d+)\.(\d+)")
_COMMAND_RE = re.compile(r"^hipcc-cmd:\s*(\S+)", re.MULTILINE)  # HIPCC_VERBOSE=1: the clang command hipcc runs
_GFX_RE = re.compile(r"\bgfx[0-9a-f]{3,4}\b")
# What clang and hipcc say when they do not know an arch (clang 15-20 wordings) or lack its device library.
_TOOLCHAIN_LIMIT_RE = re.compile(
    r"invalid target ID|unsupported (?:CUDA|HIP) (?:gpu |offload )?arch|(?:unsupported|invalid) offload arch"
    r"|unknown target CPU|cannot find ROCm device librar|No valid AMD GPU target",
    re.IGNORECASE,
)
_QUERY_SECONDS = 60


@dataclass(frozen=True)
class Hipcc:
    path: str
    version: str  # HIP major.minor, e.g. "5.7"; "" when hipcc did not say
    archs: frozenset[str] | None  # gfx targets its clang compiles for; None when it could not be asked

    @property
    def name(self) -> str:
        return f"hipcc {self.version}" if self.version else "this hipcc"


def amd_environment() -> dict[str, str]:
    # Without HIP_PLATFORM=amd, hipcc picks a machine's nvcc when one is installed.
    return {**os.environ, "HIP_PLATFORM": "amd"}


def find_hipcc(path: str | None = None) -> Hipcc | None:
    hipcc = path or shutil.which("hipcc")
    if hipcc is None:
        return None
    output = _run([hipcc, "--version"], {**amd_environment(), "HIPCC_VERBOSE": "1"})
    version = _VERSION_RE.search(output)
    clang = _COMMAND_RE.search(output)
    compiler = clang.group(1) if clang else _clang_beside(hipcc)
    archs = None
    if compiler:
        listed = frozenset(_GFX_RE.findall(_run([compiler, "--target=amdgcn-amd-amdhsa", "--print-supported-cpus"], os.environ)))
        archs = listed or None
    return Hipcc(hipcc, f"{version.group(1)}.{version.group(2)}" if version else "", archs)


def _clang_beside(hipcc: str) -> str | None:
    """Where hipcc's verbose mode said nothing: hipconfig names the folder of hipcc's clang."""
    hipconfig = Path(hipcc).with_name("hipconfig")
    folder = _run([str(hipconfig), "--hipclangpath"], amd_environment()).strip() if hipconfig.exists() else ""
    for name in ("clang++", "clang"):
        if folder and (Path(folder) / name).exists():
            return str(Path(folder) / name)
    return None


def _run(command: list[str], environment: dict[str, str]) -> str:
    try:
        result = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=_QUERY_SECONDS, errors="replace")
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout + result.stderr


def _arch_number(arch: str) -> int:
    # gfx names end in a hex-like number that grows with each generation of a family: gfx90a > gfx908.
    return int(arch[3:], 16)


def is_data_center(arch: str) -> bool:
    # gfx9 is the GCN5/CDNA line: Vega and every Instinct accelerator (MI25 .. MI355X); RDNA parts are gfx10-gfx12.
    return arch.startswith("gfx9")


def default_offload_arch(hipcc: Hipcc | None, known: Sequence[str]) -> str:
    """The newest data-center target among buildkit's known ones that this hipcc can compile for (newest of
    any family when it knows no data-center one); the newest known one when hipcc cannot be asked."""
    newest_first = sorted(known, key=lambda arch: (is_data_center(arch), _arch_number(arch)), reverse=True)
    for arch in newest_first:
        if hipcc is None or hipcc.archs is None or arch in hipcc.archs:
            return arch
    return newest_first[0]


def supports(hipcc: Hipcc, arch: str) -> bool:
    return hipcc.archs is None or arch.split(":")[0] in hipcc.archs


def is_toolchain_limit(output: str, arch: str) -> bool:
    """Whether compiler output says the arch is beyond this toolchain (a line that names the arch and one of
    the driver's unknown-target errors), rather than that the code is wrong."""
    base = arch.split(":")[0]
    return any(_TOOLCHAIN_LIMIT_RE.search(line) and base in line for line in output.splitlines())


def toolchain_limit_message(hipcc: Hipcc, arch: str, known: Sequence[str]) -> str:
    choices = [a for a in known if hipcc.archs is None or a in hipcc.archs]
    pick = f"pick --offload-arch from: {', '.join(choices)}" if hipcc.archs is not None else "pick another --offload-arch"
    return f"{hipcc.name} cannot compile for {arch} (a toolchain limit, not your code): install a newer ROCm or {pick}"
