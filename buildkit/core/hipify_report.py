"""What one `buildkit hipify` run found: the files it converted, what will not port, what was not copied,
and each translation unit's compile result. Values only; the adapters in buildkit.adapters.hipify fill
them in (the conversion first, then the compile check), and the report decides whether the tree passed."""

from __future__ import annotations

from dataclasses import dataclass, field

from buildkit.core.porting import DEFECT, Finding


@dataclass(frozen=True)
class Skipped:
    """A path of the source tree that was not copied, and why (a symlink leading out, a loop, a FIFO...)."""

    path: str
    reason: str


@dataclass(frozen=True)
class Compiled:
    file: str  # the translation unit compiled, in --out
    source: str  # the user's file it was made from
    compiler: str  # hipcc | c++
    status: str  # ok | error (the code) | missing (a header not installed) | environment | toolchain
    summary: str  # one line: compiles, the user's file:line and error, or what is missing and how to get it
    output: str  # the compiler's output (its tail)
    location: str = ""  # for a defect: the user's file:line


@dataclass
class HipifyReport:
    source: str
    output: str
    converted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    origins: dict[str, str] = field(default_factory=dict)  # each converted file (in --out) -> the user's file it was made from
    findings: list[Finding] = field(default_factory=list)  # what will not port as it is, at the user's lines
    skipped: list[Skipped] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)  # files of an earlier run in --out that this one no longer writes
    seconds: float = 0.0
    offload_arch: str = ""
    toolchain: str = ""  # the hipcc that compiled, and where it ran
    headers: str = ""  # where the ROCm-only torch headers came from
    compiled: list[Compiled] = field(default_factory=list)  # one per translation unit
    compile_seconds: float | None = None
    compile_skipped: str = ""
    toolchain_limit: str = ""  # hipcc cannot compile for the arch: the check did not run, the code is not blamed

    @property
    def passed(self) -> bool:
        return not any(f.blocks for f in self.findings) and not any(c.status == DEFECT for c in self.compiled)
