"""What PyPI's torch, torchvision and torchaudio artifacts say, against the compatibility data.

PyPI is where a torch release appears first and where its companions are published beside it; its files
carry upload dates, its wheels METADATA (Requires-Python, the pinned CUDA libraries) and torch/version.py
(which backend build PyPI serves). Each torch release the data knows, and each newer one, gets a
`[torch."M".published."R"]` table of those facts, citing the wheel read. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from buildkit.core.compat.facts import COMPANION_PACKAGES, Compat, Published
from buildkit.core.upstream.releases import Pairing, Release, backend_pins, build_of, pair_companion

if TYPE_CHECKING:
    from collections.abc import Mapping

PYPI_SOURCE = "pypi"
PYPI_SOURCE_TEXT = (
    "The package index pip installs from (PEP 691 JSON pages: files, upload times, Requires-Python) and its "
    "wheels' METADATA and torch/version.py, read by byte ranges by `buildkit compat check`"
)


@dataclass(frozen=True)
class PypiFacts:
    """torch's and its companions' releases on the package index, with the contents of the wheels read."""

    url: str
    torch: Mapping[str, Release]
    companions: Mapping[str, Mapping[str, Release]]  # torchvision -> version -> release

    def pairings(self) -> dict[str, Pairing]:
        return {name: pair_companion(self.torch, releases) for name, releases in self.companions.items()}

    def published(self, version: str, pairings: Mapping[str, Pairing] | None = None) -> Published:
        """The facts of one torch release, as the data's published table holds them."""
        release = self.torch[version]
        pairings = self.pairings() if pairings is None else pairings
        build = build_of(release)
        pins = backend_pins(release.metadata.requires_dist) if release.metadata else ()
        return Published(
            date=release.date,
            requires_python=release.metadata.requires_python if release.metadata else release.requires_python,
            pypi=build,
            companions={name: pairing.paired[version] for name, pairing in sorted(pairings.items()) if version in pairing.paired},
            pins={build: pins} if build and pins else {},
        )

    def pythons(self, version: str) -> tuple[str, ...]:
        """The CPython versions of a release's Linux wheels that its Requires-Python admits."""
        release = self.torch[version]
        required = release.metadata.requires_python if release.metadata else release.requires_python  # as published() says
        try:
            admits = SpecifierSet(required)
        except InvalidSpecifier:
            admits = SpecifierSet()
        return tuple(p for p in release.pythons if admits.contains(f"{p}.0", prereleases=True))


def minors_in_scope(compat: Compat, facts: PypiFacts) -> list[str]:
    """The data's torch minors and every newer one on the index (older ones are history the data does not keep)."""
    oldest = min((Version(minor) for minor in compat.torch), default=Version("0"))
    found = {minor_of(v) for v in facts.torch if Version(minor_of(v)) >= oldest}
    return sorted(set(compat.torch) | found, key=Version)


def minor_of(version: str) -> str:
    release = Version(version)
    return f"{release.major}.{release.minor}"


def changed_fields(ours: Published | None, theirs: Published) -> list[str]:
    """The fields of a published table that the index states otherwise (or that the data lacks)."""
    ours = ours or Published()
    changed = [name for name in ("date", "requires_python", "pypi") if getattr(theirs, name) and getattr(theirs, name) != getattr(ours, name)]
    changed += [f"{name} {version}" for name, version in theirs.companions.items() if ours.companions.get(name) != version]
    changed += [f"pins of {variant}" for variant, pins in theirs.pins.items() if tuple(ours.pins.get(variant, ())) != tuple(pins)]
    return changed


PublishedTable = dict[str, str | list[str] | dict[str, list[str]]]  # a release's published table: texts, lists of text, pins by variant


def published_table(published: Published, wheel: str) -> PublishedTable:
    """The TOML table of one release's published facts, citing the wheel whose contents were read."""
    table: PublishedTable = {"date": published.date}
    if published.requires_python:
        table["requires_python"] = published.requires_python
    if published.pypi:
        table["pypi"] = published.pypi
    for name in COMPANION_PACKAGES:
        if name in published.companions:
            table[name] = published.companions[name]
    if published.pins:
        table["pins"] = {variant: list(pins) for variant, pins in published.pins.items()}
    table["wheel"] = wheel
    table["sources"] = [PYPI_SOURCE]
    return table
