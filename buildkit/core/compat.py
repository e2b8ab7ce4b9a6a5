"""Version facts: which torch release ships wheels for which CUDA, ROCm and Python, with what arch lists.

The facts live in buildkit/data/compat.toml, each with its source; this module turns that data (plus a
team's explicit [compat] overrides) into frozen lookups. Loading the file is the caller's job.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version

from buildkit.core.vendors import BACKENDS, GFX_BACKENDS, VENDOR_NAMES, of_backend

_UBUNTU_RE = re.compile(r"ubuntu-?([0-9]{2}\.[0-9]{2})")
# Debian ships ROCm too (a devel base such as a team's own debian-sid toolchain image): debian13, debiansid.
_DEBIAN_RE = re.compile(r"debian-?([0-9]{2}|sid)\b")

AMD64, ARM64 = "linux/amd64", "linux/arm64"
# The packages PyTorch publishes with each torch release, built per backend like torch
COMPANION_PACKAGES = ("torchvision", "torchaudio")


@dataclass(frozen=True)
class BackendRelease:
    """One CUDA or ROCm version as torch's wheels use it."""

    backend: str
    version: str
    archs: tuple[str, ...]
    devel_base: str
    driver_min: str = ""
    driver_toolkit: str = ""
    thin_wheels: bool = False
    unconfirmed: tuple[str, ...] = ()
    platforms: tuple[str, ...] = (AMD64,)  # where PyTorch ships wheels for this version (some releases may not)
    arm64_archs: tuple[str, ...] = ()  # the linux/arm64 wheels' arch list, where it differs from archs
    layers: tuple[str, ...] = ()  # torch's large dependencies, each installed in a layer of its own
    layout: str = ""  # thin wheels: the [rocm_layouts] entry its index follows

    @property
    def index_tag(self) -> str:
        """The wheel index directory: cu130 for CUDA 13.0, rocm7.2 for ROCm 7.2."""
        return of_backend(self.backend).index_tag(self.version)

    @property
    def devel_os(self) -> str:
        """ubuntu24.04, read from nvidia/cuda:…-ubuntu24.04 or rocm/dev-ubuntu-24.04:…; debian13 or debiansid
        from an image whose tag names Debian so."""
        found = _UBUNTU_RE.search(self.devel_base)
        if found:
            return f"ubuntu{found.group(1)}"
        found = _DEBIAN_RE.search(self.devel_base)
        return f"debian{found.group(1)}" if found else ""


@dataclass(frozen=True)
class Published:
    """What one torch release's published artifacts say (compat check reads them from the indexes): its
    date, its Requires-Python, which backend build PyPI serves, the backend libraries each build pins, and the
    companion releases published with it."""

    date: str = ""
    requires_python: str = ""
    pypi: str = ""  # "cuda 13.2": the build PyPI's torch is (torch/version.py)
    companions: Mapping[str, str] = field(default_factory=dict)  # torchvision -> 0.29.2
    pins: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # "cuda 13.2" -> (cuda-toolkit[...]==13.2.2, ...)
    wheel: str = ""  # the wheel whose METADATA and version module were read


@dataclass(frozen=True)
class ArchList:
    """The GPU archs one build of one torch release carries (`[torch."M".arch_lists]`), and what decided them:
    the release whose artifacts were read and [sources] keys (its own table, its arch flags, a report)."""

    archs: tuple[str, ...]  # its linux/amd64 wheels'
    arm64_archs: tuple[str, ...] = ()  # its linux/arm64 wheels', where it has them
    release: str = ""
    sources: tuple[str, ...] = ()


@dataclass(frozen=True)
class TorchRelease:
    """What one torch minor release (2.14) supports."""

    minor: str
    python: tuple[str, ...]
    backends: Mapping[str, tuple[str, ...]]
    torchvision: str = ""  # a team's shorthand: torchvision's minor series, whose patch follows torch's
    unconfirmed: tuple[str, ...] = ()
    releases: tuple[str, ...] = ()  # every final release of the minor, oldest first (2.12.0, 2.12.1)
    amd64_only: tuple[str, ...] = ()  # "cuda 12.6": backend versions whose arm64 wheels this release lacks
    published: Mapping[str, Published] = field(default_factory=dict)  # release -> what its artifacts say
    arch_lists: Mapping[str, ArchList] = field(default_factory=dict)  # "cuda 12.9" -> that build's archs
    # "cuda 13.4" -> the [sources] key that says this release was not built for it, though its own table lists it
    not_built: Mapping[str, str] = field(default_factory=dict)

    @property
    def newest_release(self) -> str | None:
        return max(self.releases, key=Version) if self.releases else None

    def companion_version(self, package: str, torch_version: str) -> str | None:
        """The companion release published with this torch release (torch 2.15.0 <-> torchvision 0.29.2), as
        its artifacts say; a team's `torchvision` series gives 0.29.<torch's patch> for releases without."""
        published = self.published.get(torch_version)
        if published and package in published.companions:
            return published.companions[package]
        if package == "torchvision" and self.torchvision:
            return f"{self.torchvision}.{Version(torch_version).micro}"
        return None


@dataclass(frozen=True)
class GfxTarget:
    """One AMD gfx target: its family (LLVM's processor table), products, and who ships code for it."""

    name: str
    family: str
    products: tuple[str, ...] = ()
    rocm_versions: tuple[str, ...] = ()  # ROCm versions whose official torch wheels ship kernels for it
    sdk_rocm_versions: tuple[str, ...] = ()  # ROCm versions with a pip device-library package (rocm-sdk-device-gfxNNN)
    amdgpu_family: str = ""  # the kernel's AMDGPU_FAMILY_* name, which the AMD node labeller publishes (amd.com/gpu.family)
    unconfirmed: tuple[str, ...] = ()


@dataclass(frozen=True)
class RocmLayout:
    """How a thin-wheel index lays out torch's GPU code: which distributions carry one gfx target's code,
    and whose extras choose them (see compat.toml's [rocm_layouts])."""

    name: str
    device: tuple[str, ...]  # distribution names with {gfx}
    extras_of: str  # "rocm": torch's requirement on the rocm meta package; "torch": torch's own extras
    all_extra: str  # every gfx target's code (device-all)
    arch_extra: str  # one gfx target's code, with {gfx}
    index: str = ""  # the layout's own simple index ("": the matrix's wheel_index, a folder per variant)
    local: str = ""  # torch's local version on that index, with {version} ("": rocm<version>)
    unconfirmed: tuple[str, ...] = ()

    def device_packages(self, gfx: str) -> tuple[str, ...]:
        return tuple(name.format(gfx=gfx) for name in self.device)

    def arch_extras(self, archs: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(self.arch_extra.format(gfx=gfx) for gfx in archs)


@dataclass(frozen=True)
class Family:
    """A ROCm GPU family: one AMD image carries the device code of its gfx targets only."""

    name: str
    gfx: tuple[str, ...]
    products: tuple[str, ...] = ()
    therock: str = ""  # the family's name in AMD's TheRock builds (gfx94X-dcgpu)


@dataclass(frozen=True)
class Compat:
    torch: Mapping[str, TorchRelease]
    backends: Mapping[tuple[str, str], BackendRelease]
    known_archs: Mapping[str, tuple[str, ...]]
    os_python: Mapping[str, str]
    wheel_index: str
    channels: Mapping[str, str]
    vendor_packages: tuple[str, ...] = ()  # distributions that differ between twins by design
    gpu_names: Mapping[str, Mapping[str, Mapping[str, str]]] = field(default_factory=dict)  # vendor -> PCI id -> facts
    hsa_override: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # gfx arch -> (override, runs as)
    gfx_targets: Mapping[str, GfxTarget] = field(default_factory=dict)
    rocm_layouts: Mapping[str, RocmLayout] = field(default_factory=dict)
    families: Mapping[str, Family] = field(default_factory=dict)
    uv: str = ""  # the uv release images install when uv is their installer ([installers])

    def torch_release(self, torch_version: str) -> TorchRelease | None:
        release = Version(torch_version)
        return self.torch.get(f"{release.major}.{release.minor}")

    def backend(self, backend: str, version: str) -> BackendRelease | None:
        return self.backends.get((backend, version))

    def wheel_index_url(self, base_url: str, channel: str, index_tag: str) -> str:
        return f"{base_url.rstrip('/')}/{self.channels[channel]}{index_tag}/"

    def layout_of(self, release: BackendRelease) -> RocmLayout | None:
        """The thin-wheel layout of a ROCm version's index (None for fat wheels and CUDA)."""
        return self.rocm_layouts.get(release.layout) if release.thin_wheels else None

    def device_archs(self, version: str) -> tuple[str, ...]:
        """The gfx targets a ROCm version's index has device packages for ([gfx] sdk_rocm)."""
        return tuple(name for name, target in self.gfx_targets.items() if version in target.sdk_rocm_versions)

    def wheel_archs(self, torch_minor: str, backend: str, version: str) -> ArchList:
        """The archs of one build of a torch release: the release's own list where the data holds one (read
        from its wheels, or a cited report), else the backend version's list ([cuda."12.6"]), the source
        that decides for releases whose artifacts say nothing of that build. A platform the release's list
        leaves out takes the backend version's list."""
        facts, release = self.backend(backend, version), self.torch.get(torch_minor)
        general = ArchList(facts.archs, facts.arm64_archs, sources=(f'[{backend}."{version}"]',)) if facts else ArchList(())
        own = release.arch_lists.get(f"{backend} {version}") if release else None
        if own is None:
            return general
        return ArchList(own.archs or general.archs, own.arm64_archs or general.arm64_archs, own.release, own.sources)

    def platforms(self, torch_minor: str, backend: str, version: str) -> tuple[str, ...]:
        """Where a torch release's wheels for one backend version exist: the backend's platforms, less
        arm64 where that release is listed as amd64 only."""
        facts, release = self.backend(backend, version), self.torch.get(torch_minor)
        if facts is None or release is None:
            return ()
        if f"{backend} {version}" in release.amd64_only:
            return tuple(p for p in facts.platforms if p != ARM64)
        return facts.platforms


def merge_overrides(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge a team's [compat] table over the shipped data: tables merge, other values replace."""
    merged = dict(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = merge_overrides(merged[key], value)
        else:
            merged[key] = value
    return merged


def compat_from_data(data: Mapping[str, Any]) -> Compat:
    """Build lookups from compat.toml's structure (already validated by matrix validation for overrides)."""
    torch = {
        minor: TorchRelease(
            minor=minor,
            python=tuple(entry.get("python", ())),
            backends={backend: tuple(entry.get(backend, ())) for backend in BACKENDS},
            torchvision=entry.get("torchvision", ""),
            unconfirmed=tuple(entry.get("unconfirmed", ())),
            releases=tuple(entry.get("releases", ())),
            amd64_only=tuple(entry.get("amd64_only", ())),
            published={release: _published(facts) for release, facts in entry.get("published", {}).items()},
            arch_lists={build: _arch_list(facts) for build, facts in entry.get("arch_lists", {}).items()},
            not_built=dict(entry.get("not_built", {})),
        )
        for minor, entry in data.get("torch", {}).items()
    }
    backends = {
        (backend, version): BackendRelease(
            backend=backend,
            version=version,
            archs=tuple(entry.get("archs", ())),
            devel_base=entry.get("devel_base", ""),
            driver_min=entry.get("driver_min", ""),
            driver_toolkit=entry.get("driver_toolkit", ""),
            thin_wheels=bool(entry.get("thin_wheels", False)),
            unconfirmed=tuple(entry.get("unconfirmed", ())),
            platforms=tuple(entry.get("platforms", (AMD64,))),
            arm64_archs=tuple(entry.get("arm64_archs", ())),
            layers=tuple(entry.get("layers", ())),
            layout=entry.get("layout", ""),
        )
        for backend in BACKENDS
        for version, entry in data.get(backend, {}).items()
    }
    index = data.get("wheel_index", {})
    offered = {(backend, version) for release in torch.values() for backend in BACKENDS for version in release.backends[backend]}
    gfx_targets = _gfx_targets(data.get("gfx", {}), {key: facts for key, facts in backends.items() if key in offered})
    known_archs = {backend: tuple(data.get("archs", {}).get(backend, ())) for backend in BACKENDS}
    if gfx_targets:  # the gfx table lists the known ROCm targets (plus any a team's [compat] arch list names)
        for backend in GFX_BACKENDS:
            listed = (arch for b in backends.values() if b.backend == backend for arch in b.archs)
            known_archs[backend] = tuple(dict.fromkeys([*gfx_targets, *listed]))
    return Compat(
        torch=torch,
        backends=backends,
        known_archs=known_archs,
        os_python=dict(data.get("os_python", {})),
        wheel_index=index.get("url", ""),
        channels=dict(index.get("channels", {"release": ""})),
        vendor_packages=tuple(data.get("parity", {}).get("vendor_packages", ())),
        gpu_names={vendor: dict(data.get("gpus", {}).get(vendor, {})) for vendor in VENDOR_NAMES},
        hsa_override={arch: tuple(value) for arch, value in data.get("gpus", {}).get("hsa_override", {}).items()},
        gfx_targets=gfx_targets,
        rocm_layouts={
            name: RocmLayout(
                name=name, device=tuple(entry.get("device", ())), extras_of=entry.get("extras_of", "rocm"),
                all_extra=entry.get("all_extra", ""), arch_extra=entry.get("arch_extra", ""), index=entry.get("index", ""),
                local=entry.get("local", ""), unconfirmed=tuple(entry.get("unconfirmed", ())),
            )
            for name, entry in data.get("rocm_layouts", {}).items()
        },
        uv=data.get("installers", {}).get("uv", ""),
        families={
            name: Family(name, tuple(entry.get("gfx", ())), tuple(entry.get("products", ())), entry.get("therock", ""))
            for name, entry in data.get("families", {}).items()
        },
    )


def _published(entry: Mapping[str, Any]) -> Published:
    return Published(
        date=entry.get("date", ""), requires_python=entry.get("requires_python", ""), pypi=entry.get("pypi", ""),
        companions={name: entry[name] for name in COMPANION_PACKAGES if name in entry},
        pins={variant: tuple(pins) for variant, pins in entry.get("pins", {}).items()},
        wheel=entry.get("wheel", ""),
    )


def _arch_list(entry: Mapping[str, Any]) -> ArchList:
    return ArchList(tuple(entry.get("archs", ())), tuple(entry.get("arm64_archs", ())), entry.get("release", ""), tuple(entry.get("sources", ())))


def _gfx_targets(table: Mapping[str, Any], backends: Mapping[tuple[str, str], BackendRelease]) -> dict[str, GfxTarget]:
    """The [gfx] table, each target with the ROCm versions whose wheels list it (read from [rocm] archs,
    so the two never disagree), among the versions some torch release ships wheels for."""
    rocm = sorted((b for b in backends.values() if b.backend in GFX_BACKENDS), key=lambda b: Version(b.version))
    return {
        name: GfxTarget(
            name=name,
            family=entry.get("family", ""),
            products=tuple(entry.get("products", ())),
            rocm_versions=tuple(b.version for b in rocm if name in b.archs),
            sdk_rocm_versions=tuple(entry.get("sdk_rocm", ())),
            amdgpu_family=entry.get("amdgpu_family", ""),
            unconfirmed=tuple(entry.get("unconfirmed", ())),
        )
        for name, entry in table.items()
    }
