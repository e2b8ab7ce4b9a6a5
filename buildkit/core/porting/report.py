"""What one `buildkit hipify` run found, and whether the tree passed.

The files it converted, what will not port, what was not copied, and each translation unit's compile result.
Values only; the adapters in buildkit.adapters.hipify fill them in (the conversion first, then the compile
check), and the report decides whether the tree passed."""

from __future__ import annotations

from dataclasses import dataclass, field

from buildkit.core.porting.analysis import COMPILED, DEFECT, CodeError, Finding


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
    location: str = ""  # for a defect: the user's file:line of the first error
    errors: tuple[CodeError, ...] = ()  # every error in the user's code, one per user line
    command: tuple[str, ...] = ()  # the compiler command exactly as it ran
    includes: tuple[str, ...] | None = ()  # the files of --out it reads (its dependency list); None: not known


@dataclass
class HipifyReport:
    source: str
    output: str
    converted: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    origins: dict[str, str] = field(default_factory=dict)  # each converted file (in --out) -> the user's file it was made from
    findings: list[Finding] = field(default_factory=list)  # what will not port as it is, at the user's lines
    inactive: list[Finding] = field(default_factory=list)  # the same, in code the ROCm build does not compile: never blocks
    macros: str = ""  # where the macros that decide the #if branches came from
    skipped: list[Skipped] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)  # files of an earlier run in --out that this one no longer writes
    seconds: float = 0.0
    checked: bool = False  # the compile check was asked for
    offload_arch: str = ""
    toolchain: str = ""  # the hipcc that compiled, and where it ran
    headers: str = ""  # where the ROCm-only torch headers came from
    build_flags: list[str] = field(default_factory=list)  # the project's own flags and where each came from
    compiled: list[Compiled] = field(default_factory=list)  # one per translation unit
    objects: str = ""  # where the objects were kept (--keep-objects)
    compile_seconds: float | None = None
    compile_skipped: str = ""
    toolchain_limit: str = ""  # hipcc cannot compile for the arch: the check did not run, the code is not blamed

    @property
    def failures(self) -> list[str]:
        """Why the tree did not pass, one line each; empty when it passed."""
        reasons = []
        blocking = [f for f in self.findings if f.blocks]
        if blocking:
            reasons.append(f"{len(blocking)} finding{'s' if len(blocking) > 1 else ''} that will not port")
        defects = [c for c in self.compiled if c.status == DEFECT]
        if defects:
            reasons.append(f"{len(defects)} file{'s' if len(defects) > 1 else ''} with errors in your code")
        if self.checked and not defects and not any(c.status == COMPILED for c in self.compiled):
            reasons.append(
                "the compile check compiled nothing: "
                + (
                    self.compile_skipped
                    or self.toolchain_limit
                    or ("no .cu, .hip, .cpp or .cc file to compile" if not self.compiled else "no file compiled, each for a reason outside your code")
                )
            )
        return reasons

    @property
    def passed(self) -> bool:
        return not self.failures
