"""The compatibility data against PyTorch's wheel index: what the index has that the data lacks, the
reverse, and the change to compat.toml that makes them agree.

Pure: the file names found on the index's per-variant torch pages come in; differences and the rewritten
TOML text go out. The index is read per backend variant (<index>/cu130/torch/, <index>/rocm7.2/torch/);
its wheel names carry every fact compared here, e.g. torch-2.14.1+cu130-cp311-cp311-manylinux_2_28_x86_64.whl
is torch 2.14.1, CUDA 13.0, CPython 3.11, linux/amd64.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import tomlkit
from packaging.utils import parse_wheel_filename
from packaging.version import Version

from buildkit.core.compat import AMD64, ARM64, BACKENDS, Compat
from buildkit.core.vendors import of_backend

PROJECT = "torch"
WHEEL_INDEX_SOURCE = "wheel-index"
WHEEL_INDEX_SOURCE_TEXT = "PyTorch's wheel index, per-variant simple pages <index>/<cu130|rocm7.2>/torch/, read by `buildkit compat check`"
AHEAD = 4  # minor versions probed past the newest one the data knows, per major
# ASCII digits, a few of them: a folder named cu + 5,000 digits is no variant (and int() refuses it)
_CUDA_TAG = re.compile(r"^cu([0-9]{1,3})([0-9])$")  # cu130 -> 13.0, cu118 -> 11.8
_ROCM_TAG = re.compile(r"^rocm([0-9]{1,4}(?:\.[0-9]{1,4}){1,3})$")  # rocm7.2, rocm6.2.4
_PLATFORM = {"x86_64": AMD64, "aarch64": ARM64}
_CPYTHON = re.compile(r"^cp(\d)(\d+)$")


def variant_of(tag: str) -> tuple[str, str] | None:
    """(backend, version) of an index folder: cu129 -> (cuda, 12.9), rocm6.2.4 -> (rocm, 6.2.4); else None."""
    if found := _CUDA_TAG.match(tag):
        return "cuda", f"{int(found.group(1))}.{found.group(2)}"
    if found := _ROCM_TAG.match(tag):
        return "rocm", found.group(1)
    return None


@dataclass(frozen=True, order=True)
class IndexWheel:
    """One (release, backend version, Python, platform) the index offers torch for."""

    release: str  # 2.14.1
    backend: str
    version: str
    python: str  # 3.11
    platform: str  # linux/amd64

    @property
    def minor(self) -> str:
        found = Version(self.release)
        return f"{found.major}.{found.minor}"


def read_wheel_name(filename: str, tag: str) -> list[IndexWheel]:
    """The facts one file on a variant's torch page states; none when it is not a final-release CPython
    Linux torch wheel of that variant. Pages also list files from the index root (other variants, CPU
    builds without a local version), so the local version must name the page's variant."""
    variant = variant_of(tag)
    try:
        name, version, _build, tags = parse_wheel_filename(filename)
    except ValueError:  # InvalidWheelFilename, or a version of more digits than int() takes
        return []
    if variant is None or name != PROJECT or version.local != tag or version.is_prerelease or version.is_devrelease:
        return []
    found = set()
    for wheel_tag in tags:
        python = _CPYTHON.match(wheel_tag.interpreter)
        platform = _platform(wheel_tag.platform)
        # abi == interpreter keeps cp311-cp311 and drops the free-threaded cp314-cp314t
        if python and platform and wheel_tag.abi == wheel_tag.interpreter:
            found.add(IndexWheel(version.base_version, *variant, f"{python.group(1)}.{python.group(2)}", platform))
    return sorted(found)


def _platform(platform_tag: str) -> str | None:
    """linux/amd64 for manylinux_2_28_x86_64, linux/arm64 for manylinux_2_28_aarch64; None for Windows, macOS."""
    if not platform_tag.startswith(("manylinux", "linux_")):
        return None
    return next((platform for machine, platform in _PLATFORM.items() if platform_tag.endswith("_" + machine)), None)


@dataclass(frozen=True)
class IndexFacts:
    """What the index showed: which variant pages exist, and the torch wheels on them."""

    url: str
    probed: tuple[str, ...]  # every variant folder asked for
    found: tuple[str, ...]  # those with a torch page
    wheels: frozenset[IndexWheel]

    def of(self, minor: str) -> list[IndexWheel]:
        return [w for w in self.wheels if w.minor == minor]


def index_facts(url: str, probed: Iterable[str], pages: Mapping[str, Sequence[str]]) -> IndexFacts:
    """Facts from each existing variant page's file names."""
    wheels = frozenset(w for tag, names in pages.items() for name in names for w in read_wheel_name(name, tag))
    return IndexFacts(url, tuple(sorted(set(probed))), tuple(sorted(pages)), wheels)


def candidate_tags(compat: Compat, listed: Iterable[str] = ()) -> tuple[str, ...]:
    """Variant folders to read: every backend version the data knows, the minors between and a few past
    the newest of each major, the next majors' first minors, and any folder the index root lists.
    download.pytorch.org/whl/ lists projects, not variant folders, so probing is what finds new ones."""
    tags = {b.index_tag for b in compat.backends.values()}
    tags.update(tag for tag in listed if variant_of(tag))
    # CUDA minors are one digit in a tag (cu129); ROCm majors have jumped (7.2 -> 7.14), so look further ahead.
    for backend, next_majors, top_minor in (("cuda", 1, 9), ("rocm", 3, 99)):
        vendor = of_backend(backend)
        known = [_major_minor(v) for (b, v) in compat.backends if b == backend]
        if not known:
            continue
        oldest, newest_major = min(known), max(known)[0]
        for major in range(oldest[0], newest_major + 1):
            last = min(max((m for j, m in known if j == major), default=-1) + AHEAD, top_minor)
            tags.update(vendor.index_tag(f"{major}.{minor}") for minor in range(last + 1) if (major, minor) >= oldest)
        for major in range(newest_major + 1, newest_major + 1 + next_majors):
            tags.update(vendor.index_tag(f"{major}.{minor}") for minor in range(3))
    return tuple(sorted(tags))


def _major_minor(version: str) -> tuple[int, int]:
    release = Version(version).release
    return release[0], release[1] if len(release) > 1 else 0


# --- differences ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Difference:
    """One fact the index and the data disagree on, for one torch minor release."""

    torch: str  # 2.9
    subject: str  # "cuda 12.9", "python 3.15", "release 2.12.2", "cuda 12.6 on linux/arm64", "torch 2.14"
    on_index: bool  # True: the index has it and the data does not; False: the reverse
    writable: bool = True  # whether --write can apply it
    note: str = ""


@dataclass(frozen=True)
class _Facts:
    """The comparable facts of one torch minor, from either side."""

    releases: frozenset[str]
    python: frozenset[str]
    variants: frozenset[tuple[str, str]]
    platforms: Mapping[tuple[str, str], frozenset[str]]


def _from_index(wheels: Sequence[IndexWheel]) -> _Facts:
    platforms: dict[tuple[str, str], set[str]] = {}
    for wheel in wheels:
        platforms.setdefault((wheel.backend, wheel.version), set()).add(wheel.platform)
    return _Facts(
        frozenset(w.release for w in wheels),
        frozenset(w.python for w in wheels),
        frozenset(platforms),
        {variant: frozenset(found) for variant, found in platforms.items()},
    )


def _from_data(compat: Compat, minor: str) -> _Facts:
    release = compat.torch[minor]
    variants = frozenset((b, v) for b in BACKENDS for v in release.backends[b])
    return _Facts(
        frozenset(release.releases),
        frozenset(release.python),
        variants,
        {(b, v): frozenset(compat.platforms(minor, b, v)) for b, v in variants},
    )


def _minors(compat: Compat, facts: IndexFacts) -> list[str]:
    """The data's minors and every newer (or in-between) one on the index; older releases are out of scope."""
    oldest = min((Version(m) for m in compat.torch), default=Version("0"))
    found = {w.minor for w in facts.wheels if Version(w.minor) >= oldest}
    return sorted(set(compat.torch) | found, key=Version)


def compare(compat: Compat, facts: IndexFacts) -> tuple[Difference, ...]:
    """Every disagreement, per torch minor: releases, Python versions, backend versions, platforms."""
    differences: list[Difference] = []
    for minor in _minors(compat, facts):
        wheels = facts.of(minor)
        if minor in compat.torch and not wheels:
            differences.append(Difference(minor, f"torch {minor}", False, writable=False,
                                          note="no wheel on the index; remove the entry by hand if it was withdrawn"))
            continue
        index = _from_index(wheels)
        data = _from_data(compat, minor) if minor in compat.torch else _Facts(frozenset(), frozenset(), frozenset(), {})
        differences += _set_differences(minor, "release", index.releases, data.releases)
        differences += _set_differences(minor, "python", index.python, data.python)
        for backend, version in sorted(index.variants ^ data.variants, key=_variant_key):
            on_index = (backend, version) in index.variants
            described = compat.backend(backend, version) is not None
            differences.append(Difference(
                minor, f"{backend} {version}", on_index, writable=described or not on_index,
                note="" if described or not on_index else f'describe [{backend}."{version}"] (archs, devel_base) in the data first',
            ))
        for variant in sorted(index.variants & data.variants, key=_variant_key):
            for platform in sorted(index.platforms[variant] ^ data.platforms[variant]):
                differences.append(Difference(minor, f"{variant[0]} {variant[1]} on {platform}", platform in index.platforms[variant],
                                              writable=platform == ARM64))
    return tuple(differences)


def _set_differences(minor: str, kind: str, index: frozenset[str], data: frozenset[str]) -> list[Difference]:
    return [Difference(minor, f"{kind} {value}", value in index) for value in sorted(index ^ data, key=Version)]


def _variant_key(variant: tuple[str, str]) -> tuple[str, Version]:
    return variant[0], Version(variant[1])


# --- the proposed change --------------------------------------------------------------------------------


def propose(text: str, compat: Compat, facts: IndexFacts) -> str:
    """compat.toml's text changed so that every writable difference is gone: the lists of each torch minor
    the index has wheels for follow the index, each added fact named in the entry's `from_index` and the
    index cited in its `sources`. Comments and layout are kept (tomlkit)."""
    document = tomlkit.parse(text)
    torch_tables = document.setdefault("torch", tomlkit.table(is_super_table=True))
    described = {(b, v) for b, v in compat.backends}
    offered: dict[tuple[str, str], dict[str, frozenset[str]]] = {}  # variant -> minor -> platforms on the index
    for minor in _minors(compat, facts):
        wheels = facts.of(minor)
        if not wheels:
            continue
        index = _from_index(wheels)
        entry = torch_tables.get(minor)
        if entry is None:
            entry = tomlkit.table()
            entry["unconfirmed"] = ["torchvision"]
            torch_tables[minor] = entry
        _set_list(entry, "releases", index.releases, "release")
        _set_list(entry, "python", index.python, "python")
        for backend in BACKENDS:
            versions = {v for b, v in index.variants if b == backend and (b, v) in described}
            _set_list(entry, backend, versions, backend)
        for variant in index.variants:
            offered.setdefault(variant, {})[minor] = index.platforms[variant]
    for (backend, version), by_minor in offered.items():
        if (backend, version) in described:
            _set_platforms(document, torch_tables, backend, version, by_minor)
    if WHEEL_INDEX_SOURCE not in document.setdefault("sources", tomlkit.table()):
        document["sources"][WHEEL_INDEX_SOURCE] = WHEEL_INDEX_SOURCE_TEXT
    return tomlkit.dumps(document)


def _set_list(entry, key: str, wanted: Iterable[str], label: str) -> None:
    """entry[key] = wanted (version order), noting the facts that changed under from_index."""
    wanted = sorted(set(wanted), key=Version)
    current = [str(v) for v in entry.get(key, [])]
    if current != wanted:
        entry[key] = wanted
        _note(entry, [f"{label} {v}" for v in wanted if v not in current] + [f"no {label} {v}" for v in current if v not in wanted])


def _set_platforms(document, torch_tables, backend: str, version: str, by_minor: Mapping[str, frozenset[str]]) -> None:
    """A backend version is arm64 where any release on the index has arm64 wheels for it; the releases
    that lack them list it in amd64_only."""
    arm64 = {minor for minor, platforms in by_minor.items() if ARM64 in platforms}
    table = document[backend][version]
    wanted = [AMD64, ARM64] if arm64 else [AMD64]
    current = [str(p) for p in table.get("platforms", [AMD64])]
    if current != wanted:
        table["platforms"] = wanted
        _note(table, [f"platform {p}" for p in wanted if p not in current] + [f"no platform {p}" for p in current if p not in wanted])
    name = f"{backend} {version}"
    for minor in by_minor:
        entry = torch_tables[minor]
        current = [str(v) for v in entry.get("amd64_only", [])]
        lacks_arm64 = bool(arm64) and minor not in arm64
        wanted = sorted({*current, name} if lacks_arm64 else set(current) - {name})
        if wanted == current:
            continue
        if wanted:
            entry["amd64_only"] = wanted
        else:
            del entry["amd64_only"]
        _note(entry, [f"{'no ' if lacks_arm64 else ''}{name} on {ARM64}"])


def _note(table, facts: list[str]) -> None:
    """Name each fact the index now states in the table's from_index (replacing the fact it contradicts)
    and cite the index among the table's sources."""
    noted = [str(v) for v in table.get("from_index", [])]
    for fact in facts:
        opposite = fact.removeprefix("no ") if fact.startswith("no ") else f"no {fact}"
        noted = [v for v in noted if v != opposite] + ([] if fact in noted else [fact])
    table["from_index"] = noted
    sources = [str(s) for s in table.get("sources", [])]
    if WHEEL_INDEX_SOURCE not in sources:
        table["sources"] = [*sources, WHEEL_INDEX_SOURCE]


def unified_diff(before: str, after: str, fromfile: str, tofile: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True), fromfile, tofile))
