"""Facts of published releases, read from the artifacts themselves.

A project's files on an index (their names, upload dates and Requires-Python), a wheel's METADATA and its version
module.

`compat check` feeds this module what the indexes hold; it answers, per torch release, when it was
published, which Pythons and platforms its wheels are for, which backend build an index serves (PyPI's
torch is a CUDA build: torch/version.py says which), the backend libraries it pins, and which torchvision
and torchaudio release pairs with it. Pure: text and file lists in, facts out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from email.parser import HeaderParser
from typing import TYPE_CHECKING

from packaging.markers import InvalidMarker, Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import InvalidWheelFilename, NormalizedName, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from buildkit.core.compat.facts import AMD64, ARM64
from buildkit.core.upstream.literals import LiteralError, module_constants
from buildkit.core.vendors import VENDORS

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from packaging.tags import Tag

    from buildkit.core.upstream.arch_lists import ArchTable

TORCH = "torch"
_PLATFORM = {"x86_64": AMD64, "aarch64": ARM64}
_CPYTHON = re.compile(r"^cp(\d)(\d+)$")
# ASCII digits, a few of them: a folder named cu + 5,000 digits is no variant (and int() refuses it)
# The distributions a torch wheel pins that carry a backend's libraries, and triton, which is built per backend
_BACKEND_LIBRARIES = re.compile(r"^(cuda-toolkit|cuda-bindings|nvidia-.+|triton|pytorch-triton-rocm|rocm|rocm-sdk-.+|amd-torch-device-.+)$")
# What the markers of a pinned requirement are evaluated against: the Linux images buildkit builds
_LINUX = {
    "platform_system": "Linux",
    "sys_platform": "linux",
    "os_name": "posix",
    "platform_machine": "x86_64",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}
_PYTHONS = tuple(f"3.{minor}" for minor in range(8, 21))  # the CPythons a marker is weighed against
MAX_VERSION_LENGTH = 64  # a version string longer than this is not a real release's (and packaging is slow on them)


@dataclass(frozen=True)
class WheelMetadata:
    """A wheel's METADATA, the fields compat check reads."""

    name: str
    version: str
    requires_python: str
    requires_dist: tuple[str, ...]


# What of a METADATA is read: it comes from an index, so its fields and their number are bounded before packaging
# parses any (torch's has about 30 Requires-Dist lines of under 200 characters).
MAX_REQUIREMENTS = 1_000
MAX_FIELD_CHARS = 1_024


def read_metadata(text: str) -> WheelMetadata:
    """METADATA is an RFC 822 header block (core metadata 2.x); its body (the description) is not read. A field
    longer than MAX_FIELD_CHARS is left out (as a field the METADATA does not have), and so is every Requires-Dist
    past the first MAX_REQUIREMENTS."""
    headers = HeaderParser().parsestr(text, headersonly=True)

    def field(name: str) -> str:
        value = str(headers.get(name, "") or "")
        return value if len(value) <= MAX_FIELD_CHARS else ""

    requirements = headers.get_all("Requires-Dist", [])[:MAX_REQUIREMENTS]
    return WheelMetadata(
        name=field("Name"),
        version=field("Version"),
        requires_python=field("Requires-Python"),
        requires_dist=tuple(str(value) for value in requirements if len(str(value)) <= MAX_FIELD_CHARS),
    )


def read_version_module(text: str) -> dict[str, str]:
    """The string constants of torch/version.py (__version__ '2.15.0+cu132', cuda '13.2', hip None...), read as
    literals by core/upstream/literals.py: nothing in the file is run, and only its top-level scalar assignments are parsed."""
    try:
        constants = module_constants(text, "torch/version.py")
    except LiteralError:
        return {}
    return {name: value for name, value in constants.items() if isinstance(value, str) and len(value) <= MAX_FIELD_CHARS}


def variant_of(tag: str) -> tuple[str, str] | None:
    """(backend, version) of an index folder or local version: cu129 -> (cuda, 12.9), rocm6.2.4 -> (rocm, 6.2.4); else None."""
    return next(((vendor.backend, version) for vendor in VENDORS if (version := vendor.index_version(tag))), None)


def build_of(release: Release) -> str:
    """'cuda 13.2' for a torch whose version module reads 2.15.0+cu132 (PyPI's CUDA build); '' when unknown."""
    local = release.version_module.get("__version__", "").partition("+")[2] or release.local
    variant = variant_of(local) if local else None
    return f"{variant[0]} {variant[1]}" if variant else ""


def backend_pins(requires_dist: Iterable[str]) -> tuple[str, ...]:
    """The backend libraries a torch wheel requires on Linux: cuda-toolkit[cublas,...]==13.2.2,
    nvidia-cudnn-cu13==9.26.0.51, rocm[device-all,libraries]==7.14.*, each with its marker where the marker
    does not hold on every Linux machine and Python (cuda-bindings<14,>=13.0.3; platform_system == "Linux" and
    python_version < "3.15": torch 2.13 and later leave it out on Python 3.15)."""
    pins = []
    for line in requires_dist:
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if not _BACKEND_LIBRARIES.match(canonicalize_name(requirement.name)):
            continue
        holds = _holds_on_linux(requirement.marker) if requirement.marker is not None else (True,)
        if not any(holds):
            continue
        extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
        marker = "" if all(holds) else f"; {requirement.marker}"
        pins.append(f"{canonicalize_name(requirement.name)}{extras}{requirement.specifier}{marker}")
    return tuple(dict.fromkeys(pins))


def _holds_on_linux(marker: Marker) -> tuple[bool, ...]:
    """Whether a marker holds on each Linux machine and Python an image may have (none where it cannot be evaluated)."""
    try:
        return tuple(
            marker.evaluate({**_LINUX, "platform_machine": machine, "python_version": python, "python_full_version": f"{python}.0"})
            for machine in _PLATFORM
            for python in _PYTHONS
        )
    except (InvalidMarker, ValueError):
        return ()


def _applies_on_linux(marker: Marker) -> bool:
    """A marker that holds on Linux for some Python version (triton's `python_version < "3.15"` does)."""
    return any(_holds_on_linux(marker))


def pinned_version(pins: Sequence[str], name: str) -> str:
    """The exact version `name` is pinned to (13.2.2 of cuda-toolkit[...]==13.2.2), '' when it is a range."""
    for pin in pins:
        requirement = Requirement(pin)
        specifiers = list(requirement.specifier)
        if canonicalize_name(requirement.name) == name and len(specifiers) == 1 and specifiers[0].operator == "==":
            return specifiers[0].version
    return ""


# --- a project's releases from its files ------------------------------------------------------------------


@dataclass(frozen=True)
class PublishedFile:
    """One file on an index, as the index lists it."""

    filename: str
    uploaded: str = ""  # YYYY-MM-DD where the index says
    requires_python: str = ""


@dataclass(frozen=True)
class Release:
    """One final release of a project on one index: what its wheel names and the index say of it, and what
    one of its wheels (`wheel`) says inside."""

    project: str
    version: str  # without a local version: 2.15.0
    local: str  # the index's local version: "" on PyPI, cu130 on PyTorch's index, rocm7.14.0 on AMD's
    uploaded: str  # the earliest upload date of its files
    pythons: tuple[str, ...]  # the CPython versions of its Linux wheels (none for py3-none wheels)
    platforms: tuple[str, ...]
    requires_python: str
    wheel: str  # the Linux x86_64 wheel read for metadata (the newest CPython's)
    metadata: WheelMetadata | None = None
    version_module: Mapping[str, str] = field(default_factory=dict)
    arch_table: ArchTable | None = None  # torch/cuda/__init__.py's PYTORCH_RELEASES_CODE_CC (torch 2.11 and later)
    arm64_wheel: str = ""  # the Linux aarch64 wheel of the same CPython, where there is one

    @property
    def date(self) -> str:
        return self.uploaded

    def with_contents(self, metadata: WheelMetadata | None, version_module: Mapping[str, str], arch_table: ArchTable | None = None) -> Release:
        return replace(self, metadata=metadata, version_module=dict(version_module), arch_table=arch_table)


def releases(project: str, files: Iterable[PublishedFile], local: str | None = None) -> dict[str, Release]:
    """Final releases of `project` from an index's file list, by version (oldest first). `local`: keep only
    wheels of that local version (a variant folder's page lists other variants' files too); None: any."""
    grouped: dict[str, list[tuple[PublishedFile, str, frozenset[Tag]]]] = {}
    for published in files:
        parsed = parse_wheel(published.filename)
        if parsed is None:
            continue
        name, version, tags = parsed
        if name != canonicalize_name(project) or version.is_prerelease or version.is_devrelease:
            continue
        if local is not None and (version.local or "") != local:
            continue
        grouped.setdefault(version.public, []).append((published, version.local or "", tags))
    found: dict[str, Release] = {}
    for public, entries in grouped.items():
        pythons, platforms, linux = set(), set(), []
        for published, _local, tags in entries:
            for tag in tags:
                platform = linux_platform(tag.platform)
                python = _CPYTHON.match(tag.interpreter)
                if platform is None:
                    continue
                platforms.add(platform)
                if python and tag.abi == tag.interpreter:  # cp314-cp314t (free-threaded) is left out
                    pythons.add(f"{python.group(1)}.{python.group(2)}")
                if platform == AMD64:
                    linux.append((python_order(tag.interpreter), published))
        dates = sorted(p.uploaded for p, _, _ in entries if p.uploaded)
        chosen = max(linux, key=lambda item: item[0])[1] if linux else entries[0][0]
        arm64 = next(
            (
                published.filename
                for published, _local, tags in entries
                if chosen.filename.rsplit("-", 1)[0] == published.filename.rsplit("-", 1)[0] and any(linux_platform(tag.platform) == ARM64 for tag in tags)
            ),
            "",
        )
        found[public] = Release(
            project=canonicalize_name(project),
            version=public,
            local=entries[0][1],
            uploaded=dates[0] if dates else "",
            pythons=tuple(sorted(pythons, key=Version)),
            platforms=tuple(sorted(platforms)),
            requires_python=chosen.requires_python,
            wheel=chosen.filename,
            arm64_wheel=arm64,
        )
    return dict(sorted(found.items(), key=lambda item: Version(item[0])))


def python_order(interpreter: str) -> tuple[int, int]:
    """cp312 -> (3, 12); py3 -> (3, 0): the newest CPython's wheel is the one read."""
    found = _CPYTHON.match(interpreter)
    return (int(found.group(1)), int(found.group(2))) if found else (3, 0)


def parse_wheel(filename: str) -> tuple[NormalizedName, Version, frozenset[Tag]] | None:
    """(canonical name, Version, tags) of a wheel file name; None for anything else, including names whose
    version is too long to be a real release's."""
    if not filename.endswith(".whl") or len(filename.split("-")[1] if "-" in filename else "") > MAX_VERSION_LENGTH:
        return None
    try:
        name, version, _build, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion, ValueError):
        return None
    return name, version, tags


def linux_platform(platform_tag: str) -> str | None:
    """linux/amd64 for manylinux_2_28_x86_64, linux/arm64 for manylinux_2_28_aarch64; None for Windows and macOS."""
    if not platform_tag.startswith(("manylinux", "linux_")):
        return None
    return next((platform for machine, platform in _PLATFORM.items() if platform_tag.endswith("_" + machine)), None)


# --- which companion release goes with which torch release --------------------------------------------------


@dataclass(frozen=True)
class Pairing:
    """torch release -> the companion's release published with it; the companion releases no torch release pairs with."""

    paired: Mapping[str, str]
    unpaired: tuple[str, ...]


def pair_companion(torch: Mapping[str, Release], companion: Mapping[str, Release]) -> Pairing:
    """PyTorch publishes torchvision (and torchaudio) with torch, the same day: a companion release pairs with
    the torch release of its upload date that its own requirement on torch admits (torchvision 0.29.2 of
    2026-10-28 requires torch>=2.14.0 and pairs with torch 2.15.0 of that day). Where a day has several torch
    releases the newest one admitted wins; a companion release of a day without an admitted torch release pairs
    with none."""
    paired: dict[str, str] = {}
    unpaired = []
    of_day: dict[str, list[str]] = {}  # each day's torch releases: a companion is weighed against its day's only
    for version, facts in torch.items():
        if facts.date:
            of_day.setdefault(facts.date, []).append(version)
    for version, release in companion.items():
        admits = _torch_requirement(release)
        candidates = [t for t in of_day.get(release.date, ()) if admits.contains(t, prereleases=False)]
        if not candidates:
            unpaired.append(version)
            continue
        chosen = max(candidates, key=Version)
        if chosen not in paired or Version(version) > Version(paired[chosen]):
            paired[chosen] = version
    return Pairing(paired, tuple(unpaired))


def _torch_requirement(release: Release) -> SpecifierSet:
    """What a companion's METADATA requires of torch (any torch where it names none or was not read)."""
    for line in release.metadata.requires_dist if release.metadata else ():
        try:
            requirement = Requirement(line)
        except InvalidRequirement:
            continue
        if canonicalize_name(requirement.name) == TORCH and (requirement.marker is None or _applies_on_linux(requirement.marker)):
            try:
                return SpecifierSet(str(requirement.specifier))
            except InvalidSpecifier:
                break
    return SpecifierSet()
