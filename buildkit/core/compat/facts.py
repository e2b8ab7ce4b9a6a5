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

from buildkit.core.compat.amd_targets import LEVELS, AmdTargets, amd_targets
from buildkit.core.vendors import BACKENDS, GFX_BACKENDS, VENDOR_NAMES, of_backend

_UBUNTU_RE = re.compile(r"ubuntu-?([0-9]{2}\.[0-9]{2})")
# Debian ships ROCm too (a devel base such as a team's own debian-sid toolchain image): debian13, debiansid.
_DEBIAN_RE = re.compile(r"debian-?([0-9]{2}|sid)\b")

AMD64, ARM64 = "linux/amd64", "linux/arm64"
# A layout's device package (or extra) name: a prefix, then the level of AMD's hierarchy it is cut at,
# amd-torch-device-{sub_family}; rocm-bootstrap names it for each bundle (amd-torch-device-gfx115x)
_LEVEL_TEMPLATE = re.compile(r"(?P<prefix>.+)-\{(?P<level>" + "|".join(LEVELS) + r")\}")
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
    # the major.minor torch.version.hip/cuda reports for this build, where it is not the release's own: ROCm 10.0's
    # torch reports HIP 7.15 (TheRock's HIP kept its own numbering when ROCm's went to 10)
    runtime: str = ""

    @property
    def runtime_version(self) -> str:
        """What torch reports as its CUDA or HIP version (major.minor) for this build."""
        return self.runtime or self.version

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
class DeviceCode:
    """The distributions of one bundle's device code that an image installs, in a layer of their own: torch's
    (rocm-sdk-device-gfx942, amd-torch-device-gfx942), or a companion's (amd-torchvision-device-gfx942)."""

    owner: str  # torch, or the companion (torchvision) whose kernels they are
    bundle: str  # the bundle of AMD's hierarchy they are cut for (gfx942, gfx115x)
    packages: tuple[str, ...]

    @property
    def layer(self) -> str:
        return f"device-{self.bundle}" if self.owner == "torch" else f"device-{self.owner}-{self.bundle}"


def template_level(template: str) -> tuple[str, str] | None:
    """(prefix, level) of a layout's name template (amd-torch-device-{target}); None when it names no level."""
    found = _LEVEL_TEMPLATE.fullmatch(template)
    return (found.group("prefix"), found.group("level")) if found else None


@dataclass(frozen=True)
class RocmLayout:
    """How a thin-wheel index lays out torch's GPU code: which distributions carry a bundle's code at which level
    of AMD's hierarchy (target, sub-family, family), the companions' device code, and whose extras choose them
    (see compat.toml's [rocm_layouts])."""

    name: str
    device: tuple[str, ...]  # name templates: a prefix and the level it is cut at (rocm-sdk-device-{target})
    extras_of: str  # "rocm": torch's requirement on the rocm meta package; "torch": torch's own extras
    all_extra: str  # every gfx target's code (device-all)
    arch_extra: str  # a bundle's code: device-{target}
    index: str = ""  # the layout's own simple index ("": the matrix's wheel_index, a folder per variant)
    local: str = ""  # torch's local version on that index, with {version} ("": rocm<version>)
    companion_device: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # torchvision -> its device templates
    unconfirmed: tuple[str, ...] = ()

    @property
    def level(self) -> str:
        """The finest level its device packages are cut at: an image carries one set per bundle of that level."""
        levels = [found[1] for found in map(template_level, self.device) if found]
        return min(levels, key=LEVELS.index) if levels else LEVELS[0]

    def device_code(self, amd: AmdTargets, archs: tuple[str, ...], companions: tuple[str, ...] = ()) -> tuple[DeviceCode, ...]:
        """What an image of these gfx targets installs: per bundle (at each template's level) torch's packages,
        then each companion's that the layout publishes, named by rocm-bootstrap."""
        owners = [("torch", self.device), *((name, self.companion_device[name]) for name in companions if name in self.companion_device)]
        code: list[DeviceCode] = []
        for owner, templates in owners:
            found: dict[str, list[str]] = {}
            for gfx in archs:
                for prefix, level in filter(None, map(template_level, templates)):
                    name, key = _device_name(amd, prefix, level, gfx)
                    if name and name not in found.setdefault(key, []):
                        found[key].append(name)
            code += [DeviceCode(owner, key, tuple(names)) for key, names in found.items()]
        return tuple(code)

    def arch_extras(self, amd: AmdTargets, archs: tuple[str, ...]) -> tuple[str, ...]:
        """The extras that choose the device code of these gfx targets (device-gfx942), once each."""
        found = template_level(self.arch_extra)
        if found is None:
            return ()
        return tuple(dict.fromkeys(name for name, _ in (_device_name(amd, *found, gfx) for gfx in archs) if name))


def _device_name(amd: AmdTargets, prefix: str, level: str, gfx: str) -> tuple[str, str]:
    """(distribution name, bundle key) of a target's package cut at `level`; a target rocm-bootstrap does not
    know has a package of its own name at the target level, and none above it."""
    bundle = amd.bundle_at(gfx, level)
    if bundle is not None:
        return bundle.device_name(prefix), bundle.key
    return (f"{prefix}-{gfx}", gfx) if level == LEVELS[0] else ("", "")


@dataclass(frozen=True)
class Family:
    """A product-named ROCm GPU family (mi300, rdna3): a group over bundles of AMD's hierarchy; one AMD image
    carries the device code of its gfx targets only."""

    name: str
    bundles: tuple[str, ...]  # bundle keys of AMD's hierarchy (gfx9_4, gfx1151)
    gfx: tuple[str, ...]  # the bundles' gfx targets, in rocm-bootstrap's order
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
    amd: AmdTargets = field(default_factory=amd_targets)  # AMD's gfx targets and their hierarchy (rocm-bootstrap)
    uv: str = ""  # the uv release images install when uv is their installer ([installers])

    def torch_release(self, torch_version: str) -> TorchRelease | None:
        release = Version(torch_version)
        return self.torch.get(f"{release.major}.{release.minor}")

    def backend(self, backend: str, version: str) -> BackendRelease | None:
        return self.backends.get((backend, version))

    def wheel_index_url(self, base_url: str, channel: str, index_tag: str) -> str:
        return f"{base_url.rstrip('/')}/{self.channels[channel]}{index_tag}/"

    def image_group(self, name: str) -> tuple[str, ...] | None:
        """The gfx targets of what a stack's rocm_families names: a product family of the data (mi300) or a
        bundle of AMD's hierarchy (gfx9_4, gfx115x, gfx12); None for a name neither knows."""
        if name in self.families:
            return self.families[name].gfx
        bundle = self.amd.bundles.get(name)
        return bundle.members if bundle else None

    def known_groups(self) -> tuple[str, ...]:
        """What rocm_families may name: the data's families, then AMD's sub-family and family bundles."""
        return (*self.families, *(b.key for b in self.amd.bundles.values() if b.level != LEVELS[0]))

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
            runtime=entry.get("runtime", ""),
        )
        for backend in BACKENDS
        for version, entry in data.get(backend, {}).items()
    }
    index = data.get("wheel_index", {})
    offered = {(backend, version) for release in torch.values() for backend in BACKENDS for version in release.backends[backend]}
    gfx_targets = _gfx_targets(data.get("gfx", {}), {key: facts for key, facts in backends.items() if key in offered})
    known_archs = {backend: tuple(data.get("archs", {}).get(backend, ())) for backend in BACKENDS}
    amd = amd_targets()
    # AMD's targets are rocm-bootstrap's, plus any the data (a team's [compat.gfx] or arch list) describes before it does
    for backend in GFX_BACKENDS:
        listed = (arch for b in backends.values() if b.backend == backend for arch in b.archs)
        known_archs[backend] = tuple(dict.fromkeys([*amd.targets, *gfx_targets, *listed]))
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
                name=name,
                device=tuple(entry.get("device", ())),
                extras_of=entry.get("extras_of", "rocm"),
                all_extra=entry.get("all_extra", ""),
                arch_extra=entry.get("arch_extra", ""),
                index=entry.get("index", ""),
                local=entry.get("local", ""),
                unconfirmed=tuple(entry.get("unconfirmed", ())),
                companion_device={companion: tuple(names) for companion, names in entry.get("companion_device", {}).items()},
            )
            for name, entry in data.get("rocm_layouts", {}).items()
        },
        uv=data.get("installers", {}).get("uv", ""),
        families={name: _family(amd, name, entry) for name, entry in data.get("families", {}).items()},
        amd=amd,
    )


def _family(amd: AmdTargets, name: str, entry: Mapping[str, Any]) -> Family:
    """A product family's gfx targets: its bundles' members (a bundle rocm-bootstrap lacks adds none; matrix
    validation names it)."""
    bundles = tuple(entry.get("bundles", ()))
    gfx = tuple(dict.fromkeys(gfx for key in bundles if key in amd.bundles for gfx in amd.bundles[key].members))
    return Family(name, bundles, gfx, tuple(entry.get("products", ())), entry.get("therock", ""))


def _published(entry: Mapping[str, Any]) -> Published:
    return Published(
        date=entry.get("date", ""),
        requires_python=entry.get("requires_python", ""),
        pypi=entry.get("pypi", ""),
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
