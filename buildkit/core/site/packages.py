"""Each image's packages as the difference from a list most images of its kind share, so a package list is written
once on the site, not once per image (a runtime image's 110 Debian packages are the same in nearly every one).

A base list is, per ecosystem and per kind of image (vendor and flavor), the packages (name and version) more than
half the kind's images with an SBOM have. Kinds whose base lists come out the same (the Debian packages of CUDA
and ROCm runtime images) share one. An image then lists only what it has beyond its base list (torch, its vendor's
libraries, a version the base has another of) and what of the base it lacks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from buildkit.core.vendors import of_vendor

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from buildkit.core.supply_chain.sbom import Package
    from buildkit.core.targets.plan import Target

Kind = tuple[str, str]  # what base lists are per: a backend (CUDA, ROCm) and a flavor
ECOSYSTEMS = {"pypi": "Python distributions", "deb": "Debian packages"}  # in the order the pages list them


@dataclass(frozen=True)
class BaseList:
    """Packages most images of some kinds share, on a page of its own."""

    path: str  # relative to the site's root
    ecosystem: str
    kinds: tuple[Kind, ...]  # the kinds of image it is the base list of
    packages: tuple[Package, ...]

    @property
    def what(self) -> str:
        return ECOSYSTEMS[self.ecosystem]

    @property
    def share(self) -> str:
        """The kinds of image it is the base list of, flavor by flavor: "CUDA and ROCm runtime and devel"."""
        by_flavor: dict[str, list[str]] = {}
        for backend, flavor in self.kinds:
            by_flavor.setdefault(flavor, []).append(backend)
        said: dict[str, list[str]] = {}  # backends -> their flavors
        for flavor, backends in by_flavor.items():
            said.setdefault(" and ".join(backends), []).append(flavor)
        return ", ".join(f"{backends} {' and '.join(flavors)}" for backends, flavors in said.items())

    @property
    def title(self) -> str:
        return f"{self.what} of most {self.share} images"


@dataclass(frozen=True)
class PackageList:
    """An image's packages of one ecosystem: its base list, what it has beyond it and what of it it lacks."""

    ecosystem: str
    os: str  # the image's operating system, with its Debian packages ("" for Python's)
    count: int  # how many it has in all
    base: BaseList | None  # None: listed whole (in `own`)
    own: tuple[Package, ...]
    lacks: tuple[Package, ...]

    @property
    def title(self) -> str:
        return ECOSYSTEMS[self.ecosystem]

    @property
    def left_out(self) -> int:
        """Packages it has that neither its base list nor `own` shows (past the limit)."""
        from_base = len(self.base.packages) - len(self.lacks) if self.base else 0
        return max(0, self.count - from_base - len(self.own))


def kind_of(target: Target) -> Kind:
    return of_vendor(target.vendor).backend_display, target.flavor


def _key(package: Package) -> tuple[str, str]:
    return package.name, package.version


def base_lists(targets: Sequence[Target], packages: Mapping[str, Sequence[Package]], limit: int) -> dict[tuple[str, Kind], BaseList]:
    """(ecosystem, kind) -> its base list, for kinds with two images or more with packages; identical lists are
    one. `packages` maps a target id to its SBOM's packages; a list holds at most `limit` packages."""
    kinds: dict[Kind, list[str]] = {}
    for target in targets:
        if packages.get(target.id):
            kinds.setdefault(kind_of(target), []).append(target.id)
    found: dict[tuple[str, Kind], BaseList] = {}
    by_content: dict[tuple[str, tuple[Package, ...]], BaseList] = {}
    for ecosystem in ECOSYSTEMS:
        for kind, ids in kinds.items():
            if len(ids) < 2:
                continue
            counts: dict[tuple[str, str], int] = {}
            first: dict[tuple[str, str], Package] = {}
            for target_id in ids:
                for package in {_key(p): p for p in packages[target_id] if p.ecosystem == ecosystem}.values():
                    counts[_key(package)] = counts.get(_key(package), 0) + 1
                    first.setdefault(_key(package), package)
            shared = tuple(sorted((first[key] for key, count in counts.items() if count * 2 > len(ids)), key=_key))[:limit]
            if not shared:
                continue
            same = by_content.get((ecosystem, shared))
            if same is None:
                number = sum(1 for written, _ in by_content if written == ecosystem) + 1
                same = BaseList(f"packages/{ecosystem}-{number}.html", ecosystem, (kind,), shared)
            else:
                same = BaseList(same.path, ecosystem, (*same.kinds, kind), shared)
            by_content[ecosystem, shared] = same
    for (ecosystem, _), base in by_content.items():
        for kind in base.kinds:
            found[ecosystem, kind] = base
    return found


def package_lists(target: Target, packages: Sequence[Package], os: str, bases: Mapping[tuple[str, Kind], BaseList], limit: int) -> tuple[PackageList, ...]:
    """The image's packages per ecosystem it has any of, each against its kind's base list; at most `limit` listed.
    `os` names its operating system."""
    lists = []
    kind = kind_of(target)
    for ecosystem in ECOSYSTEMS:
        mine = [p for p in packages if p.ecosystem == ecosystem]
        if not mine:
            continue
        base = bases.get((ecosystem, kind))
        if base is None:
            lists.append(PackageList(ecosystem, os if ecosystem == "deb" else "", len(mine), None, tuple(mine[:limit]), ()))
            continue
        held, have = {_key(p) for p in base.packages}, {_key(p) for p in mine}
        own = tuple(p for p in mine if _key(p) not in held)[:limit]
        lacks = tuple(p for p in base.packages if _key(p) not in have)[:limit]
        lists.append(PackageList(ecosystem, os if ecosystem == "deb" else "", len(mine), base, own, lacks))
    return tuple(lists)
