"""What changed in an image's packages since the previous nightly, from the two SBOMs' package lists."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

if TYPE_CHECKING:
    from collections.abc import Iterable

    from buildkit.core.supply_chain.sbom import Package


@dataclass(frozen=True)
class Change:
    ecosystem: str  # deb | pypi
    name: str
    before: str  # "" when added
    after: str  # "" when removed


@dataclass(frozen=True)
class PackageDiff:
    added: tuple[Change, ...]
    removed: tuple[Change, ...]
    upgraded: tuple[Change, ...]
    downgraded: tuple[Change, ...]
    changed: tuple[Change, ...]  # another version whose order buildkit does not judge (Debian's version rules)

    @property
    def empty(self) -> bool:
        return not (self.added or self.removed or self.upgraded or self.downgraded or self.changed)


def _versions(packages: Iterable[Package]) -> dict[tuple[str, str], str]:
    """(ecosystem, name) -> version; a name installed twice (two site-packages) counts with its versions joined."""
    found: dict[tuple[str, str], list[str]] = {}
    for package in packages:
        found.setdefault((package.ecosystem, package.name), []).append(package.version)
    return {key: ", ".join(sorted(set(versions))) for key, versions in found.items()}


def _newer(before: str, after: str) -> bool | None:
    """Whether `after` is the newer Python version; None when either is no PEP 440 version."""
    try:
        return Version(after) > Version(before)
    except InvalidVersion:
        return None


def package_diff(before: Iterable[Package], after: Iterable[Package]) -> PackageDiff:
    """Packages added, removed and upgraded (or downgraded) from `before` to `after`, each group by name."""
    old, new = _versions(before), _versions(after)
    added = tuple(Change(eco, name, "", new[eco, name]) for eco, name in sorted(new.keys() - old.keys()))
    removed = tuple(Change(eco, name, old[eco, name], "") for eco, name in sorted(old.keys() - new.keys()))
    upgraded: list[Change] = []
    downgraded: list[Change] = []
    changed: list[Change] = []
    for eco, name in sorted(old.keys() & new.keys()):
        if old[eco, name] == new[eco, name]:
            continue
        change = Change(eco, name, old[eco, name], new[eco, name])
        newer = _newer(change.before, change.after) if eco == "pypi" else None
        (changed if newer is None else upgraded if newer else downgraded).append(change)
    return PackageDiff(added, removed, tuple(upgraded), tuple(downgraded), tuple(changed))
