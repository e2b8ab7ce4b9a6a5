"""Which GPU archs each build of a torch release carries, read from the release's own artifacts.

Two artifacts say it, both in every torch wheel:
- the table `PYTORCH_RELEASES_CODE_CC` in torch/cuda/__init__.py, the release's own list of its CUDA builds and
  the compute capabilities of each. From torch 2.13 on it is per machine ({"12.9": {"x86_64": {75, ...},
  "aarch64": {80, ...}}}); torch 2.11 and 2.12 have one set per CUDA version for both machines, which is not a
  per-platform list (2.12's 13.0 set holds aarch64's 110) and was left stale in 2.11 (its 12.8 set keeps the
  Volta that 2.11's cu128 build dropped: pytorch/pytorch #182250), so only the builds it names are taken
  from it. Releases before 2.11 have no table.
- the arch flags the build was compiled with, the string `torch.cuda.get_arch_list()` splits
  ("sm_75 sm_80 sm_86 sm_90 sm_100 sm_120", "gfx900 gfx906 ..."), a NUL-terminated constant in
  torch/lib/libtorch_python.so's .rodata: what that one build carries, on that one platform.

Both are parsed as data, never imported or run: the table's literal is cut out of the module by core/upstream/literals.py
(the one reader of Python modules as data), its length and nesting bounded before `ast.literal_eval` sees it, and
its shape, its size and every number are checked here. Pure: text and bytes in, arch lists in the data's notation (7.5, 12.0+PTX, gfx942) out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from buildkit.core.compat.facts import AMD64, ARM64
from buildkit.core.upstream.literals import ABSENT, LiteralError, assigned_literal

if TYPE_CHECKING:
    from collections.abc import Mapping

TABLE_NAME = "PYTORCH_RELEASES_CODE_CC"
MAX_MODULE_CHARS = 1 << 20  # torch/cuda/__init__.py is about 80 KB
MAX_TABLE_CHARS = 16 << 10  # the real table is under 1 KB
MAX_TABLE_DEPTH = 3  # dict of dicts of sets
MAX_BUILDS = 64
MAX_ARCHS = 64
MAX_RODATA_BYTES = 64 << 20  # libtorch_python.so's .rodata is about 1 MB
_MACHINES = {"x86_64": AMD64, "aarch64": ARM64}
_CUDA_VERSION = re.compile(r"[0-9]{1,2}\.[0-9]")
# One build's flags: arch names separated by single spaces, ending the C string. The start is not anchored:
# the linker may place a string without its own terminator before it (seen in torch 2.9.1's library).
_FLAGS = {
    "cuda": re.compile(rb"((?:sm|compute)_[0-9]{2,3}(?: (?:sm|compute)_[0-9]{2,3})*)\x00"),
    "rocm": re.compile(rb"(gfx[0-9a-f]{3,4}(?::[a-z]+[+-])*(?: gfx[0-9a-f]{3,4}(?::[a-z]+[+-])*)*)\x00"),
}


class ArchTableError(ValueError):
    """A torch wheel's arch table or arch flags are not what a torch release writes."""


@dataclass(frozen=True)
class ArchTable:
    """A release's own table: the CUDA versions of its builds and, where it says so per machine, each build's
    arch list per platform ((version, platform) -> archs)."""

    versions: tuple[str, ...]
    per_platform: bool
    lists: Mapping[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)


def cuda_arch(capability: int) -> str:
    """75 -> 7.5, 120 -> 12.0: a compute capability as the data writes it."""
    return f"{capability // 10}.{capability % 10}"


def read_arch_table(text: str) -> ArchTable | None:
    """The table of a torch/cuda/__init__.py; None when the module has none (torch before 2.11). The literal is read by
    core/upstream/literals.py, bounded in length and nesting before ast sees it."""
    if len(text) > MAX_MODULE_CHARS:
        raise ArchTableError(f"torch/cuda/__init__.py is {len(text)} characters, more than the {MAX_MODULE_CHARS} a torch release's is")
    try:
        value = assigned_literal(text, TABLE_NAME, TABLE_NAME, max_chars=MAX_TABLE_CHARS, max_depth=MAX_TABLE_DEPTH)
    except LiteralError as error:
        raise ArchTableError(str(error)) from None
    return None if value is ABSENT else _table(value)


def _capabilities(value: object, where: str) -> tuple[int, ...]:
    if not isinstance(value, (set, frozenset, list, tuple)) or len(value) > MAX_ARCHS:
        raise ArchTableError(f"{TABLE_NAME}[{where}] is not a set of at most {MAX_ARCHS} compute capabilities")
    if not all(isinstance(cc, int) and not isinstance(cc, bool) and 10 <= cc <= 999 for cc in value):
        raise ArchTableError(f"{TABLE_NAME}[{where}] holds something other than compute capabilities (10-999)")
    return tuple(sorted(set(value)))


def _table(value: object) -> ArchTable:
    if not isinstance(value, dict) or not value or len(value) > MAX_BUILDS:
        raise ArchTableError(f"{TABLE_NAME} is not a table of 1 to {MAX_BUILDS} CUDA versions")
    bad = [key for key in value if not isinstance(key, str) or not _CUDA_VERSION.fullmatch(key)]
    if bad:
        raise ArchTableError(f"{TABLE_NAME} has a key that is no CUDA version: {str(bad[0])[:40]!r}")
    versions = tuple(value)
    per_platform = all(isinstance(entry, dict) for entry in value.values())
    if not per_platform:  # one set per CUDA version for both machines: its builds count, its sets do not
        for version, entry in value.items():
            _capabilities(entry, repr(version))
        return ArchTable(versions, False)
    lists = {}
    for version, by_machine in value.items():
        unknown = [machine for machine in by_machine if machine not in _MACHINES]
        if unknown or not by_machine:
            raise ArchTableError(f"{TABLE_NAME}[{version!r}] names machines other than {', '.join(_MACHINES)}")
        for machine, capabilities in by_machine.items():
            lists[(version, _MACHINES[machine])] = tuple(map(cuda_arch, _capabilities(capabilities, f"{version!r}][{machine!r}")))
    return ArchTable(versions, True, lists)


def read_arch_flags(rodata: bytes, backend: str) -> tuple[str, ...]:
    """The arch list of the flags string in a libtorch_python.so's .rodata, in the data's notation (sm_75 ->
    7.5; compute_120 beside sm_120 -> 12.0+PTX; gfx942 stays); () when it holds none. The longest run of arch
    names ending a C string is the build's; two different runs of that length are no answer."""
    if len(rodata) > MAX_RODATA_BYTES:
        raise ArchTableError(f"its .rodata is {len(rodata)} bytes, more than the {MAX_RODATA_BYTES} a torch library's is")
    runs = {found.group(1) for found in _FLAGS[backend].finditer(rodata)}
    if not runs:
        return ()
    longest = max(len(run.split()) for run in runs)
    chosen = [run for run in runs if len(run.split()) == longest]
    if len(chosen) > 1:
        raise ArchTableError(f"its .rodata holds {len(chosen)} different arch lists of {longest} names; which is the build's is not known")
    names = chosen[0].decode("ascii").split()
    if len(names) > MAX_ARCHS:
        raise ArchTableError(f"its arch flags name {len(names)} archs, more than {MAX_ARCHS}")
    return _cuda_flags(names) if backend == "cuda" else tuple(dict.fromkeys(name.split(":")[0] for name in names))


def _cuda_flags(names: list[str]) -> tuple[str, ...]:
    sass = {int(name[3:]) for name in names if name.startswith("sm_")}
    ptx = {int(name[8:]) for name in names if name.startswith("compute_")}
    return tuple(cuda_arch(cc) + ("+PTX" if cc in ptx else "") for cc in sorted(sass | ptx))
