"""Parity of a pair's twins: same OS, same Python, same packages, except what must differ. Pure."""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from buildkit.errors import UserError

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from buildkit.core.targets.plan import Target


@dataclass(frozen=True)
class Parity:
    first: str
    second: str
    differences: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.differences


def _public(version: str) -> str:
    return version.split("+", 1)[0]


def compare(first: str, first_report: Mapping[str, Any], second: str, second_report: Mapping[str, Any], vendor_packages: Sequence[str]) -> Parity:
    """Every difference between two probe reports that is not a vendor runtime package or a local tag."""
    differences = []
    for key, name in (("os", "OS"), ("python", "Python")):
        if first_report.get(key) != second_report.get(key):
            differences.append(f"{name}: {first_report.get(key)} vs {second_report.get(key)}")

    def comparable(report: Mapping[str, Any]) -> dict[str, str]:
        return {
            name: _public(version)
            for name, version in (report.get("distributions") or {}).items()
            if not any(fnmatch.fnmatchcase(name, pattern) for pattern in vendor_packages)
        }

    a, b = comparable(first_report), comparable(second_report)
    for name in sorted(a.keys() - b.keys()):
        differences.append(f"{name} {a[name]} only in {first}")
    for name in sorted(b.keys() - a.keys()):
        differences.append(f"{name} {b[name]} only in {second}")
    for name in sorted(a.keys() & b.keys()):
        if a[name] != b[name]:
            differences.append(f"{name}: {a[name]} in {first} vs {b[name]} in {second}")
    return Parity(first, second, tuple(differences))


def pair_images(targets: Sequence[Target], subjects: Sequence[str]) -> tuple[str, str]:
    """`parity PAIR` (a pair key of the matrix: its CUDA twin, then its ROCm twin) or `parity IMAGE IMAGE`."""
    if len(subjects) == 2:
        return subjects[0], subjects[1]
    if len(subjects) != 1:
        raise UserError("parity compares one pair (PAIR) or two images (IMAGE IMAGE)")
    twins = sorted((t for t in targets if t.pair == subjects[0]), key=lambda t: t.backend)
    if len(twins) != 2:
        known = sorted({t.pair for t in targets if t.pair})
        more = " …" if len(known) > 8 else ""
        raise UserError(f"{subjects[0]!r} is not a pair of this matrix; pairs: {', '.join(known[:8])}{more}")
    return twins[0].tags[0], twins[1].tags[0]
