"""Each torch release's builds and arch lists, as its own artifacts state them, against the data.

Which `[torch."M".arch_lists]` entries to write and which builds a release's own table names that the
compatibility data lacks.

What was read comes in as readings: one arch list of one build (cuda 12.9) of one release on one platform,
from one source. Three sources, from the most to the least direct: the arch flags the build was compiled
with (libtorch_python.so), the GPU code its library carries (`--deep`), the release's own table
(torch/cuda/__init__.py, which names every build of the release, also those PyPI does not serve). Per build
and platform the newest release's most direct reading is the list; an entry the data holds from a more
direct source of the same release (an earlier run read the flags) is not replaced by a less direct one.
Pure: readings and the data in, records out (core/upstream/check.py turns them into differences and TOML).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.version import Version

from buildkit.core.compat.facts import AMD64, ARM64, ArchList, Compat
from buildkit.core.upstream.pypi import PypiFacts, minor_of

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

ARCH_TABLE_SOURCE = "wheel-arch-table"
ARCH_TABLE_SOURCE_TEXT = (
    "The table PYTORCH_RELEASES_CODE_CC in a torch wheel's torch/cuda/__init__.py: the release's own CUDA builds "
    "and, from torch 2.13 on, each one's compute capabilities per machine; read by byte ranges by "
    "`buildkit compat check`, as data (never imported)"
)
ARCH_FLAGS_SOURCE = "wheel-arch-flags"
ARCH_FLAGS_SOURCE_TEXT = (
    "The arch flags a torch build was compiled with (the string torch.cuda.get_arch_list() splits, in "
    "torch/lib/libtorch_python.so's .rodata), read from the wheel by byte ranges by `buildkit compat check`"
)
CODE_SOURCE = "wheel-code-objects"
CODE_SOURCE_TEXT = (
    "The GPU code in torch wheels' libraries (the SASS and PTX entries of libtorch_cuda.so's .nv_fatbin, the offload "
    "bundles of libtorch_hip.so's .hip_fatbin), read by `buildkit compat check --deep`"
)
SOURCE_TEXTS = {ARCH_FLAGS_SOURCE: ARCH_FLAGS_SOURCE_TEXT, CODE_SOURCE: CODE_SOURCE_TEXT, ARCH_TABLE_SOURCE: ARCH_TABLE_SOURCE_TEXT}
_RANK = {ARCH_FLAGS_SOURCE: 3, CODE_SOURCE: 2, ARCH_TABLE_SOURCE: 1}  # a cited report ranks as the table
_PLATFORM_ORDER = (AMD64, ARM64)
_WHAT = {ARCH_FLAGS_SOURCE: "arch flags", CODE_SOURCE: "GPU code", ARCH_TABLE_SOURCE: "own table"}


@dataclass(frozen=True, order=True)
class ArchReading:
    """One build's arch list on one platform, as one artifact of one release states it."""

    release: str  # 2.13.0
    backend: str
    version: str
    platform: str
    archs: tuple[str, ...]
    source: str  # ARCH_FLAGS_SOURCE, CODE_SOURCE or ARCH_TABLE_SOURCE
    wheel: str  # the wheel read

    @property
    def build(self) -> str:
        return f"{self.backend} {self.version}"

    @property
    def minor(self) -> str:
        return minor_of(self.release)


@dataclass(frozen=True)
class ArchUpdate:
    """A build's arch lists as the data should hold them, and the readings that say so."""

    minor: str
    build: str
    wanted: ArchList
    readings: tuple[ArchReading, ...]

    def describe(self) -> str:
        """torch 2.13.0's arch flags: 7.5 8.0 ... 12.0, arm64 8.0 9.0 ...: what was read, from where."""
        by_source: dict[str, list[str]] = {}
        for reading in self.readings:
            by_source.setdefault(reading.source, []).append(f"{'arm64 ' if reading.platform == ARM64 else ''}{' '.join(reading.archs)}")
        return "; ".join(f"torch {self.wanted.release}'s {_WHAT[source]}: {', '.join(lists)}" for source, lists in by_source.items())


@dataclass(frozen=True)
class TableBuild:
    """A build a torch release's own table names that the data's entry for its minor lacks."""

    minor: str
    release: str
    backend: str
    version: str
    wheel: str
    described: bool  # the data describes the backend version ([cuda."12.9"])

    @property
    def build(self) -> str:
        return f"{self.backend} {self.version}"


def table_readings(pypi: PypiFacts) -> list[ArchReading]:
    """The per-platform lists of each release's own table (torch 2.13 and later write them per machine)."""
    readings = []
    for version, release in pypi.torch.items():
        table = release.arch_table
        if table is None or not table.per_platform:
            continue
        for (cuda, platform), archs in table.lists.items():
            readings.append(ArchReading(version, "cuda", cuda, platform, archs, ARCH_TABLE_SOURCE, release.wheel))
    return readings


def _newest(releases: Iterable[str]) -> dict[str, str]:
    """minor -> its newest release among these."""
    newest: dict[str, str] = {}
    for version in sorted(releases, key=Version):
        newest[minor_of(version)] = version
    return newest


def best_readings(readings: Iterable[ArchReading]) -> dict[tuple[str, str], dict[str, list[ArchReading]]]:
    """(minor, build) -> platform -> the newest release's readings, the most direct first: the first decides, the
    others that say the same confirm it."""
    readings = list(readings)
    newest = _newest({r.release for r in readings})
    best: dict[tuple[str, str], dict[str, list[ArchReading]]] = {}
    for reading in sorted(readings, key=lambda r: -_RANK[r.source]):
        if newest[reading.minor] == reading.release:
            best.setdefault((reading.minor, reading.build), {}).setdefault(reading.platform, []).append(reading)
    return best


def _rank(sources: Iterable[str]) -> int:
    return max((_RANK.get(source, 1) for source in sources), default=0)


def arch_updates(compat: Compat, readings: Iterable[ArchReading], builds: Mapping[str, Iterable[str]]) -> list[ArchUpdate]:
    """The arch_lists entries to write: for each build the data lists (or is about to: `builds`, minor -> the
    builds being added) whose readings say otherwise than its entry. An entry of a newer release, or of the same
    release from a more direct source, stays."""
    updates = []
    for (minor, build), by_platform in sorted(best_readings(readings).items(), key=lambda item: (Version(item[0][0]), item[0][1])):
        release = compat.torch.get(minor)
        listed = set(builds.get(minor, ())) | ({f"{b} {v}" for b, versions in release.backends.items() for v in versions} if release else set())
        if build not in listed:
            continue
        deciding = {platform: found[0] for platform, found in by_platform.items()}
        agreeing = [r for found in by_platform.values() for r in found if r.archs == deciding[r.platform].archs]
        newest = next(iter(deciding.values())).release
        held = release.arch_lists.get(build) if release else None
        if held is not None and held.release:
            if Version(held.release) > Version(newest):
                continue
            if held.release == newest and _rank(held.sources) > _rank(r.source for r in deciding.values()):
                continue
        wanted = ArchList(
            deciding[AMD64].archs if AMD64 in deciding else (),
            deciding[ARM64].archs if ARM64 in deciding else (),
            newest,
            tuple(sorted({r.source for r in agreeing}, key=lambda source: -_RANK[source])),
        )
        if held != wanted:
            updates.append(ArchUpdate(minor, build, wanted, tuple(deciding[p] for p in _PLATFORM_ORDER if p in deciding)))
    return updates


def table_builds(compat: Compat, pypi: PypiFacts) -> list[TableBuild]:
    """The builds each minor's newest release names in its own table that the data's entry lacks, leaving out
    those a source says were not built (`not_built`). Only where PyTorch's index is not read: it serves each
    build or not, and what it serves decides."""
    oldest = min((Version(m) for m in compat.torch), default=Version("0"))
    found = []
    for minor, version in _newest(pypi.torch).items():
        table = pypi.torch[version].arch_table
        release = compat.torch.get(minor)
        if table is None or Version(minor) < oldest:
            continue
        for cuda in table.versions:
            if release is not None and (cuda in release.backends["cuda"] or f"cuda {cuda}" in release.not_built):
                continue
            found.append(TableBuild(minor, version, "cuda", cuda, pypi.torch[version].wheel, compat.backend("cuda", cuda) is not None))
    return found
