"""The compatibility data against what the indexes publish, and the change that agrees.

What they have that the data lacks, the reverse, and the change to compat.toml that makes them agree.

Pure: what the indexes hold comes in (file names on PyTorch's per-variant torch pages, PyPI's releases with
the contents of the wheels read, the GPU code found in a wheel's libraries); differences and the rewritten
TOML text go out. PyTorch's index is read per backend variant (<index>/cu130/torch/, <index>/rocm7.2/torch/);
its wheel names carry the variant facts, e.g. torch-2.14.1+cu130-cp311-cp311-manylinux_2_28_x86_64.whl is
torch 2.14.1, CUDA 13.0, CPython 3.11, linux/amd64.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import tomlkit
from packaging.version import Version

from buildkit.core.compat.facts import AMD64, ARM64, Compat, Published
from buildkit.core.upstream.arch_check import (
    ARCH_TABLE_SOURCE,
    CODE_SOURCE,
    SOURCE_TEXTS,
    ArchReading,
    ArchUpdate,
    TableBuild,
    arch_updates,
    table_builds,
    table_readings,
)
from buildkit.core.upstream.pypi import PYPI_SOURCE, PYPI_SOURCE_TEXT, PypiFacts, changed_fields, minor_of, published_table
from buildkit.core.upstream.releases import Pairing, linux_platform, parse_wheel, variant_of
from buildkit.core.vendors import BACKENDS, VENDORS

PROJECT = "torch"
VariantPins = Mapping[tuple[str, str], tuple[str, ...]]  # (release, "rocm 7.14") -> the pins read from that variant's wheel
TomlTable = MutableMapping[str, Any]  # a TOML table edited in place (tomlkit's, which keeps comments and layout), any TOML inside
WHEEL_INDEX_SOURCE = "wheel-index"
WHEEL_INDEX_SOURCE_TEXT = "PyTorch's wheel index, per-variant simple pages <index>/<cu130|rocm7.2>/torch/, read by `buildkit compat check`"
AHEAD = 4  # minor versions probed past the newest one the data knows, per major
_CPYTHON = re.compile(r"^cp(\d)(\d+)$")


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


def read_wheel_name(filename: str, tag: str, local: str | None = None) -> list[IndexWheel]:
    """The facts one file on a variant's torch page states; none when it is not a final-release CPython
    Linux torch wheel of that variant. Pages also list files from the index root (other variants, CPU
    builds without a local version), so the local version must name the page's variant (`local`, where an
    index writes it otherwise than the folder: rocm7.14.0 on AMD's)."""
    variant = variant_of(tag)
    parsed = parse_wheel(filename)
    if variant is None or parsed is None:
        return []
    name, version, tags = parsed
    if name != PROJECT or version.local != (local or tag) or version.is_prerelease or version.is_devrelease:
        return []
    found = set()
    for wheel_tag in tags:
        python = _CPYTHON.match(wheel_tag.interpreter)
        platform = linux_platform(wheel_tag.platform)
        # abi == interpreter keeps cp311-cp311 and drops the free-threaded cp314-cp314t
        if python and platform and wheel_tag.abi == wheel_tag.interpreter:
            found.add(IndexWheel(version.base_version, *variant, f"{python.group(1)}.{python.group(2)}", platform))
    return sorted(found)


@dataclass(frozen=True)
class IndexFacts:
    """What the wheel indexes showed: which variant pages exist, and the torch wheels on them. PyTorch's index
    judges every backend version but those whose thin-wheel layout names an index of its own (AMD's), which
    that index judges: `layouts` are the layouts whose index was read."""

    url: str
    probed: tuple[str, ...]  # every variant folder asked for
    found: tuple[str, ...]  # those with a torch page
    wheels: frozenset[IndexWheel]
    read_pytorch: bool = True
    layouts: tuple[str, ...] = ()

    def of(self, minor: str) -> list[IndexWheel]:
        return [w for w in self.wheels if w.minor == minor]

    def judges(self, compat: Compat, backend: str, version: str) -> bool:
        """Whether what was read says if torch has wheels for this backend version."""
        facts = compat.backend(backend, version)
        layout = compat.layout_of(facts) if facts else None
        if layout and layout.index:
            return layout.name in self.layouts
        return self.read_pytorch


def index_facts(
    url: str,
    probed: Iterable[str],
    pages: Mapping[str, Sequence[str]],
    layout_pages: Mapping[str, Sequence[tuple[str, str, str]]] | None = None,
    read_pytorch: bool = True,
) -> IndexFacts:
    """Facts from each existing variant page's file names, and from the torch page of each layout index read
    (layout -> (file name, variant tag, local version) of each of its wheels)."""
    wheels = {w for tag, names in pages.items() for name in names for w in read_wheel_name(name, tag)}
    for entries in (layout_pages or {}).values():
        wheels.update(w for name, tag, local in entries for w in read_wheel_name(name, tag, local))
    return IndexFacts(url, tuple(sorted(set(probed))), tuple(sorted(pages)), frozenset(wheels), read_pytorch, tuple(sorted(layout_pages or {})))


@dataclass(frozen=True)
class CodeFinding:
    """The GPU code one torch wheel's library carries (`--deep`), in the data's arch notation (7.5, 12.0+PTX, gfx942)."""

    release: str
    backend: str
    version: str
    wheel: str
    archs: tuple[str, ...]
    partial: tuple[str, ...] = ()  # archs that only a few kernels are compiled for (not the build's list)


@dataclass(frozen=True)
class CheckFacts:
    """Everything compat check read: PyTorch's (and AMD's) wheel index, PyPI, and with --deep the wheels' GPU code."""

    index: IndexFacts | None = None
    pypi: PypiFacts | None = None
    variant_pins: VariantPins = field(default_factory=dict)
    code: tuple[CodeFinding, ...] = ()
    flags: tuple[ArchReading, ...] = ()  # the arch flags of the builds whose libtorch_python.so was read

    def arch_readings(self) -> list[ArchReading]:
        """Every arch list read: the builds' flags, their GPU code (--deep, linux/amd64 wheels) and the releases' own tables."""
        code = [ArchReading(f.release, f.backend, f.version, AMD64, f.archs, CODE_SOURCE, f.wheel) for f in self.code]
        return [*self.flags, *code, *(table_readings(self.pypi) if self.pypi else ())]

    def table_builds(self, compat: Compat) -> list[TableBuild]:
        """Builds the releases' own tables name that the data lacks, where PyTorch's index (which decides) was not read."""
        if self.pypi is None or (self.index is not None and self.index.read_pytorch):
            return []
        return table_builds(compat, self.pypi)

    def arch_updates(self, compat: Compat) -> list[ArchUpdate]:
        return arch_updates(compat, self.arch_readings(), _builds_added(compat, self))


def _builds_added(compat: Compat, facts: CheckFacts) -> dict[str, set[str]]:
    """minor -> the builds this check adds to it: those the index serves for its newest release, PyPI's build of a
    new minor, and the described builds its own table names."""
    added: dict[str, set[str]] = {}
    if facts.index is not None:
        for minor in _minors(compat, facts.index):
            wheels = facts.index.of(minor)
            if wheels:
                current = _from_index(wheels, compat.torch[minor].releases if minor in compat.torch else ()).current
                added.setdefault(minor, set()).update(f"{b} {v}" for b, v in current if compat.backend(b, v) is not None)
    if facts.pypi is not None:
        for minor, versions in _pypi_minors(compat, facts.pypi).items():
            build = facts.pypi.published(versions[-1]).pypi
            if minor not in compat.torch and build and compat.backend(*build.split()) is not None:
                added.setdefault(minor, set()).add(build)
    for listed in facts.table_builds(compat):
        if listed.described:
            added.setdefault(listed.minor, set()).add(listed.build)
    return added


def candidate_tags(compat: Compat, listed: Iterable[str] = ()) -> tuple[str, ...]:
    """Variant folders to read: every backend version the data knows, the minors between and a few past
    the newest of each major, the next majors' first minors, and any folder the index root lists.
    download.pytorch.org/whl/ lists projects, not variant folders, so probing is what finds new ones."""
    tags = {b.index_tag for b in compat.backends.values()}
    tags.update(tag for tag in listed if variant_of(tag))
    for vendor in VENDORS:
        known = [_major_minor(v) for (b, v) in compat.backends if b == vendor.backend]
        if not known:
            continue
        oldest, newest_major = min(known), max(known)[0]
        for major in range(oldest[0], newest_major + 1):
            last = min(max((m for j, m in known if j == major), default=-1) + AHEAD, vendor.index_top_minor)
            tags.update(vendor.index_tag(f"{major}.{minor}") for minor in range(last + 1) if (major, minor) >= oldest)
        for major in range(newest_major + 1, newest_major + 1 + vendor.index_majors_ahead):
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
    current: frozenset[tuple[str, str]] = frozenset()


def _from_index(wheels: Sequence[IndexWheel], known: Iterable[str] = ()) -> _Facts:
    """The facts of every wheel; `current`: the backend versions of the newest release, the one a stack pins
    (AMD's index has torch 2.14.0 for ROCm 10.1, not 2.14.1): only those are added to the data, while a
    version any release has is kept (a patch release reaches the variant folders one after another)."""
    newest = max([w.release for w in wheels] + list(known), key=Version, default="")  # `known`: the data's releases
    platforms: dict[tuple[str, str], set[str]] = {}
    for wheel in wheels:
        platforms.setdefault((wheel.backend, wheel.version), set()).add(wheel.platform)
    return _Facts(
        frozenset(w.release for w in wheels),
        frozenset(w.python for w in wheels),
        frozenset(platforms),
        {variant: frozenset(found) for variant, found in platforms.items()},
        frozenset((w.backend, w.version) for w in wheels if w.release == newest),
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


def compare(compat: Compat, facts: CheckFacts) -> tuple[Difference, ...]:
    """Every disagreement between the data and what was read, once each."""
    differences: list[Difference] = []
    if facts.index is not None:
        differences += _compare_index(compat, facts.index)
    if facts.pypi is not None:
        differences += _compare_pypi(compat, facts.pypi, facts.variant_pins)
    differences += _compare_archs(compat, facts)
    return tuple(dict.fromkeys(differences))


def _compare_index(compat: Compat, facts: IndexFacts) -> list[Difference]:
    """Per torch minor: releases, Python versions, backend versions, platforms."""
    differences: list[Difference] = []
    for minor in _minors(compat, facts):
        wheels = facts.of(minor)
        if minor not in compat.torch and not facts.read_pytorch:
            continue  # a new torch release is PyTorch's index's (or PyPI's) to describe
        if minor in compat.torch and not wheels:
            if facts.read_pytorch:  # a layout index (AMD's) carries a few releases only
                differences.append(
                    Difference(minor, f"torch {minor}", False, writable=False, note="no wheel on the index; remove the entry by hand if it was withdrawn")
                )
            continue
        index = _from_index(wheels, compat.torch[minor].releases if minor in compat.torch else ())
        data = _from_data(compat, minor) if minor in compat.torch else _Facts(frozenset(), frozenset(), frozenset(), {})
        if facts.read_pytorch:
            differences += _set_differences(minor, "release", index.releases, data.releases)
            differences += _set_differences(minor, "python", index.python, data.python)
        for backend, version in sorted(index.variants ^ data.variants, key=_variant_key):
            on_index = (backend, version) in index.variants
            if (not on_index and not facts.judges(compat, backend, version)) or (on_index and (backend, version) not in index.current):
                continue
            described = compat.backend(backend, version) is not None
            differences.append(
                Difference(
                    minor,
                    f"{backend} {version}",
                    on_index,
                    writable=described or not on_index,
                    note="" if described or not on_index else f'describe [{backend}."{version}"] (archs, devel_base) in the data first',
                )
            )
        for variant in sorted(index.variants & data.variants, key=_variant_key):
            for platform in sorted(index.platforms[variant] ^ data.platforms[variant]):
                differences.append(
                    Difference(minor, f"{variant[0]} {variant[1]} on {platform}", platform in index.platforms[variant], writable=platform == ARM64)
                )
    return differences


def _compare_pypi(compat: Compat, pypi: PypiFacts, variant_pins: VariantPins) -> list[Difference]:
    """What PyPI's artifacts add: releases and Pythons the data lacks, and each release's published facts."""
    differences: list[Difference] = []
    pairings = pypi.pairings()
    for minor, versions in _pypi_minors(compat, pypi).items():
        data = compat.torch.get(minor)
        differences += [Difference(minor, f"release {v}", True) for v in versions if not data or v not in data.releases]
        differences += [Difference(minor, f"python {p}", True) for p in pypi.pythons(versions[-1]) if not data or p not in data.python]
        for version in versions:
            changed = changed_fields(data.published.get(version) if data else None, _published(pypi, version, pairings, variant_pins))
            if changed:
                differences.append(Difference(minor, f"published {version}", True, note=", ".join(changed)))
    return differences


def _pypi_minors(compat: Compat, pypi: PypiFacts) -> dict[str, list[str]]:
    """The torch minors in scope (the data's and newer ones), each with its releases on PyPI, oldest first."""
    oldest = min((Version(m) for m in compat.torch), default=Version("0"))
    found: dict[str, list[str]] = {}
    for version in sorted(pypi.torch, key=Version):
        if Version(minor_of(version)) >= oldest:
            found.setdefault(minor_of(version), []).append(version)
    return found


def _published(pypi: PypiFacts, version: str, pairings: Mapping[str, Pairing], variant_pins: VariantPins) -> Published:
    """One release's published facts: PyPI's, with the pins read from each variant's wheel on PyTorch's index."""
    published = pypi.published(version, pairings)
    extra = {variant: pins for (release, variant), pins in variant_pins.items() if release == version}
    return replace(published, pins={**extra, **published.pins}) if extra else published


@dataclass(frozen=True)
class Pending:
    """A fact of the data that the indexes this check read cannot settle: only the index that serves (or not)
    a torch release's build can."""

    torch: str
    subject: str  # "cuda 12.9"
    why: str


def pending_facts(compat: Compat, facts: CheckFacts) -> tuple[Pending, ...]:
    """Each torch release's builds the data marks unconfirmed, and the builds its own table lists that a
    source says were not built, where the index that decides was not read: PyTorch's for its variants, a
    layout's own (AMD's) for the ROCm versions laid out there."""
    tables = {minor_of(v): r for v, r in (facts.pypi.torch.items() if facts.pypi else ()) if r.arch_table is not None}
    found = []
    for minor in sorted(compat.torch, key=Version):
        release = compat.torch[minor]
        table = tables[minor].arch_table if minor in tables else None
        listed = set(table.versions) if table else set()
        for backend in BACKENDS:
            for version in release.backends[backend]:
                build = f"{backend} {version}"
                read = facts.index is not None and facts.index.judges(compat, backend, version)
                if build in release.unconfirmed and not read:
                    mention = f"torch {tables[minor].version}'s own table lists it; " if backend == "cuda" and version in listed else ""
                    found.append(Pending(minor, build, f"{mention}unconfirmed until {_decider(compat, backend, version)} serves it"))
        for build, source in release.not_built.items():
            backend, _, version = build.partition(" ")
            read = facts.index is not None and facts.index.judges(compat, backend, version)
            if backend == "cuda" and version in listed and not read:
                found.append(
                    Pending(
                        minor,
                        build,
                        f"torch {tables[minor].version}'s own table lists it, {source} says it was not built; {_decider(compat, backend, version)} settles it",
                    )
                )
    return tuple(found)


def _decider(compat: Compat, backend: str, version: str) -> str:
    facts = compat.backend(backend, version)
    layout = compat.layout_of(facts) if facts else None
    return f"the {layout.name} layout's index" if layout and layout.index else "PyTorch's index"


def _compare_archs(compat: Compat, facts: CheckFacts) -> list[Difference]:
    """Builds a release's own table names that the data lacks, and builds whose arch lists its artifacts state
    otherwise than the data (or that the data does not hold per release yet)."""
    differences = []
    for build in facts.table_builds(compat):
        note = (
            f"torch {build.release}'s own table lists it; unconfirmed until PyTorch's index serves it"
            if build.described
            else f'torch {build.release}\'s own table lists it; describe [{build.backend}."{build.version}"] (archs, devel_base) in the data first'
        )
        differences.append(Difference(build.minor, build.build, True, writable=build.described, note=note))
    for update in facts.arch_updates(compat):
        differences.append(Difference(update.minor, f"{update.build} archs", True, note=update.describe()))
    return differences


@dataclass(frozen=True)
class AmdDifference:
    """A gfx target or bundle AMD's hierarchy (rocm-bootstrap) and the data's [gfx] table disagree on."""

    subject: str  # "gfx target gfx1252 (gfx12_5, gfx12)", "bundle gfx13_0"
    in_rocm_bootstrap: bool  # True: rocm-bootstrap knows it and the data does not; False: the reverse
    note: str


def compare_amd(compat: Compat) -> tuple[AmdDifference, ...]:
    """The targets rocm-bootstrap knows that [gfx] does not describe (their products, releases and sources are
    the data's to add), the sub-families and families none of whose targets it describes, and the targets it
    describes that rocm-bootstrap does not know (a target AMD dropped or renamed, or one a newer rocm-bootstrap
    will add). None of it is written: products and sources are read by a person."""
    amd, described = compat.amd, compat.gfx_targets
    found = [
        AmdDifference(
            f"gfx target {name}" + (f" ({', '.join(b.key for b in amd.chain(name)[1:])})" if amd.chain(name) else ""),
            True,
            f"describe [gfx.{name}] (family, products, sources) in the data",
        )
        for name in amd.targets
        if name not in described
    ]
    found += [
        AmdDifference(
            f"bundle {bundle.key}",
            True,
            f"{bundle.display_name}, {bundle.level.replace('_', '-')} of {', '.join(bundle.members)}: none of its targets is in [gfx]",
        )
        for bundle in amd.bundles.values()
        if bundle.level != "target" and not any(gfx in described for gfx in bundle.members)
    ]
    found += [
        AmdDifference(f"gfx target {name}", False, "rocm-bootstrap does not know it: check its name, or a newer rocm-bootstrap")
        for name in described
        if name not in amd.chains
    ]
    return tuple(found)


def _set_differences(minor: str, kind: str, index: frozenset[str], data: frozenset[str]) -> list[Difference]:
    return [Difference(minor, f"{kind} {value}", value in index) for value in sorted(index ^ data, key=Version)]


def _variant_key(variant: tuple[str, str]) -> tuple[str, Version]:
    return variant[0], Version(variant[1])


# --- the proposed change --------------------------------------------------------------------------------


def propose(text: str, compat: Compat, facts: CheckFacts) -> str:
    """compat.toml's text changed so that every writable difference is gone, each added fact named in its
    entry's `from_index` (or in a published table citing the wheel read) and its source cited in `sources`.
    Comments and layout are kept (tomlkit)."""
    document = tomlkit.parse(text)
    torch_tables = document.setdefault("torch", tomlkit.table(is_super_table=True))
    if facts.index is not None:
        _propose_index(document, torch_tables, compat, facts.index)
    if facts.pypi is not None:
        _propose_pypi(document, torch_tables, compat, facts.pypi, facts.variant_pins)
    _propose_table_builds(document, torch_tables, facts.table_builds(compat))
    _propose_archs(document, torch_tables, facts.arch_updates(compat))
    return spaced(tomlkit.dumps(document))


def spaced(text: str) -> str:
    """A blank line before each table header that tomlkit wrote right after a value, as the file's own are."""
    lines: list[str] = []
    for line in text.split("\n"):
        if line.startswith("[") and lines and lines[-1].strip() and not lines[-1].startswith(("#", "[")):
            lines.append("")
        lines.append(line)
    return "\n".join(lines)


def _cite(document: TomlTable, key: str, text: str) -> None:
    if key not in document.setdefault("sources", tomlkit.table()):
        document["sources"][key] = text


def _propose_index(document: TomlTable, torch_tables: TomlTable, compat: Compat, facts: IndexFacts) -> None:
    """The lists of each torch minor the index has wheels for follow the index; a variant the index shows
    is confirmed for that minor."""
    described = {(b, v) for b, v in compat.backends}
    offered: dict[tuple[str, str], dict[str, frozenset[str]]] = {}  # variant -> minor -> platforms on the index
    for minor in _minors(compat, facts):
        wheels = facts.of(minor)
        if not wheels:
            continue
        index = _from_index(wheels, compat.torch[minor].releases if minor in compat.torch else ())
        entry = torch_tables.get(minor)
        if entry is None and not facts.read_pytorch:
            continue
        if entry is None:
            entry = tomlkit.table()
            entry["unconfirmed"] = ["torchvision"]
            torch_tables[minor] = entry
        if facts.read_pytorch:
            _set_list(entry, "releases", index.releases, "release")
            _set_list(entry, "python", index.python, "python")
        for backend in BACKENDS:
            current = [str(v) for v in entry.get(backend, [])]
            kept = {v for v in current if not facts.judges(compat, backend, v)}  # what no index read here can tell
            versions = {v for b, v in index.variants if b == backend and (b, v) in described and (v in current or (b, v) in index.current)}
            _set_list(entry, backend, versions | kept, backend)
            _served(entry, [f"{backend} {v}" for v in versions])
        _confirm(entry, [f"{b} {v}" for b, v in index.variants])
        for variant in index.variants:
            offered.setdefault(variant, {})[minor] = index.platforms[variant]
    for (backend, version), by_minor in offered.items():
        if (backend, version) in described:
            _set_platforms(document, torch_tables, backend, version, by_minor)
    _cite(document, WHEEL_INDEX_SOURCE, WHEEL_INDEX_SOURCE_TEXT)


def _propose_pypi(document: TomlTable, torch_tables: TomlTable, compat: Compat, pypi: PypiFacts, variant_pins: VariantPins) -> None:
    """Releases and Pythons PyPI adds (never removes: PyPI serves one build of each release), and a published
    table per release; a new minor starts with the build PyPI serves, its other backends unconfirmed until
    PyTorch's index is read."""
    pairings = pypi.pairings()
    for minor, versions in _pypi_minors(compat, pypi).items():
        entry = torch_tables.get(minor)
        if entry is None:
            entry = torch_tables[minor] = tomlkit.table()
            build = pypi.published(versions[-1], pairings).pypi
            for backend in BACKENDS:
                entry[backend] = [build.split()[1]] if build.startswith(backend + " ") and compat.backend(*build.split()) else []
        _set_list(entry, "releases", {*map(str, entry.get("releases", [])), *versions}, "release")
        _set_list(entry, "python", {*map(str, entry.get("python", [])), *pypi.pythons(versions[-1])}, "python")
        data = compat.torch.get(minor)
        tables = entry.setdefault("published", tomlkit.table(is_super_table=True))
        for version in versions:
            published = _published(pypi, version, pairings, variant_pins)
            held = data.published.get(version) if data else None
            if changed_fields(held, published):
                # pins read in an earlier run (each variant's wheel is read once) stay beside today's
                merged = replace(published, pins={**(held.pins if held else {}), **published.pins})
                tables[version] = published_table(merged, pypi.torch[version].wheel)
        if "torchvision" in _published(pypi, versions[-1], pairings, variant_pins).companions:
            _confirm(entry, ["torchvision"])
        if any("torchvision" in table for table in tables.values()):
            entry.pop("torchvision", None)  # a series guessed before the releases were published: they say otherwise
    _cite(document, PYPI_SOURCE, PYPI_SOURCE_TEXT)


def _propose_table_builds(document: TomlTable, torch_tables: TomlTable, builds: Sequence[TableBuild]) -> None:
    """A described build a release's own table names joins its minor's list, unconfirmed until PyTorch's index
    serves it."""
    for build in builds:
        if not build.described:
            continue
        entry = torch_tables[build.minor]
        entry[build.backend] = sorted({*map(str, entry.get(build.backend, [])), build.version}, key=Version)
        entry["unconfirmed"] = [*map(str, entry.get("unconfirmed", [])), build.build]
        _note(entry, [f"{build.build} from its table"], ARCH_TABLE_SOURCE)
        _cite(document, ARCH_TABLE_SOURCE, SOURCE_TEXTS[ARCH_TABLE_SOURCE])


def _propose_archs(document: TomlTable, torch_tables: TomlTable, updates: Sequence[ArchUpdate]) -> None:
    """Each build's arch lists as its release's artifacts state them, with the release and the sources read."""
    for update in updates:
        entry = torch_tables[update.minor]
        lists = entry.get("arch_lists")
        if lists is None:
            lists = entry["arch_lists"] = tomlkit.table()
        wanted = update.wanted
        table = tomlkit.inline_table()
        if wanted.archs:
            table["archs"] = list(wanted.archs)
        if wanted.arm64_archs:
            table["arm64_archs"] = list(wanted.arm64_archs)
        table["release"] = wanted.release
        table["sources"] = list(wanted.sources)
        lists[update.build] = table
        for source in wanted.sources:
            _cite(document, source, SOURCE_TEXTS[source])


def _served(entry: TomlTable, builds: Iterable[str]) -> None:
    """Builds the index serves leave the release's `not_built` table: the index outweighs the source that said so."""
    table = entry.get("not_built")
    if table is None:
        return
    for build in [b for b in builds if b in table]:
        del table[build]
        _note(entry, [build])
    if not table:
        del entry["not_built"]


def _confirm(table: TomlTable, facts: Iterable[str]) -> None:
    """Facts an index now shows leave the table's `unconfirmed` list."""
    current = [str(v) for v in table.get("unconfirmed", [])]
    kept = [v for v in current if v not in set(facts)]
    if kept == current:
        return
    if kept:
        table["unconfirmed"] = kept
    else:
        del table["unconfirmed"]


def _set_list(entry: TomlTable, key: str, wanted: Iterable[str], label: str) -> None:
    """entry[key] = wanted (version order), noting the facts that changed under from_index."""
    wanted = sorted(set(wanted), key=Version)
    current = [str(v) for v in entry.get(key, [])]
    if current != wanted:
        entry[key] = wanted
        _note(entry, [f"{label} {v}" for v in wanted if v not in current] + [f"no {label} {v}" for v in current if v not in wanted])


def _set_platforms(document: TomlTable, torch_tables: TomlTable, backend: str, version: str, by_minor: Mapping[str, frozenset[str]]) -> None:
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


def _note(table: TomlTable, facts: list[str], source: str = WHEEL_INDEX_SOURCE) -> None:
    """Name each fact the index now states in the table's from_index (replacing the fact it contradicts)
    and cite the index among the table's sources."""
    noted = [str(v) for v in table.get("from_index", [])]
    for fact in facts:
        opposite = fact.removeprefix("no ") if fact.startswith("no ") else f"no {fact}"
        noted = [v for v in noted if v != opposite] + ([] if fact in noted else [fact])
    table["from_index"] = noted
    sources = [str(s) for s in table.get("sources", [])]
    if source not in sources:
        table["sources"] = [*sources, source]


def unified_diff(before: str, after: str, fromfile: str, tofile: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True), fromfile, tofile))
