"""The host as buildkit.adapters.host read it: its GPUs, drivers, device nodes, CDI specs and container engine.

Plain data, so every verdict about the host (buildkit.core.host.fit, .access, .routing) is a function of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from buildkit.core.vendors import VENDOR_NAMES, Vendor
from buildkit.errors import Problem, UserError


@dataclass(frozen=True)
class DeviceNode:
    path: str
    group: str  # name of the owning group ("" when unknown)
    gid: int
    accessible: bool  # whether the current user can open it read-write


@dataclass(frozen=True)
class Gpu:
    vendor: str  # nvidia | amd
    pci: str
    device_id: str
    name: str
    arch: str  # sm_90, gfx942, or "" when unknown
    # an AMD GPU's place in AMD's hierarchy (rocm-bootstrap): its sub-family and family (gfx9_4, gfx9), and the
    # sub-family's name (MI300); () for a target rocm-bootstrap does not know, and for NVIDIA GPUs
    bundles: tuple[str, ...] = ()
    bundle_name: str = ""

    @property
    def arch_described(self) -> str:
        """gfx942 [gfx9_4 MI300, gfx9]: the target beside its sub-family and family, as AMD's detection prints them."""
        if len(self.bundles) < 2:
            return self.arch
        return f"{self.arch} [{self.bundles[0]} {self.bundle_name}, {self.bundles[1]}]"


@dataclass(frozen=True)
class CdiDevice:
    name: str  # 0, all, GPU-<uuid>: `--device <kind>=<name>`
    nodes: tuple[str, ...]  # the host device nodes it hands the container


@dataclass(frozen=True)
class CdiSpec:
    """One CDI spec file (/etc/cdi, /var/run/cdi), as the adapter read it."""

    path: str
    kind: str  # nvidia.com/gpu, amd.com/gpu
    devices: tuple[CdiDevice, ...]
    missing_nodes: tuple[str, ...] = ()  # device nodes it names that this host's /dev does not have

    @property
    def gpu_devices(self) -> tuple[CdiDevice, ...]:
        """One device per GPU: `all` left out, and the names of one GPU (index and UUID) counted once."""
        seen: dict[tuple[str, ...], CdiDevice] = {}
        for device in self.devices:
            if device.name != "all" and device.nodes:
                seen.setdefault(tuple(sorted(device.nodes)), device)
        return tuple(seen.values())


# Engines that take CDI device names (`--device nvidia.com/gpu=all`): Docker 25 with the cdi feature on
# (cncf-tags/container-device-interface#84), on by default from Docker 28.2 (moby/moby#49963); podman always.
# Docker 29.3 also maps `--gpus` to AMD GPUs through the same AMD spec (moby/moby#52048): buildkit names the
# CDI device itself, which that Docker, older ones with CDI and podman all take, so it never prints --gpus for AMD.
DOCKER_CDI_FEATURE = (25, 0)
DOCKER_CDI_DEFAULT = (28, 2)
ENGINE_KINDS = ("docker", "podman")
_VERSION_RE = re.compile(r"([0-9]{1,4})\.([0-9]{1,4})")


@dataclass(frozen=True)
class EngineFacts:
    """The container engine that will run the container, as it describes itself (or as --engine names it)."""

    kind: str  # docker | podman
    version: str = ""
    rootless: bool = False
    runtimes: tuple[str, ...] | None = None  # docker runtimes (nvidia among them where the toolkit set it up); None: not asked
    cdi_spec_dirs: tuple[str, ...] | None = None  # Docker's own answer: () when its CDI is off; None: not asked

    @property
    def version_tuple(self) -> tuple[int, int] | None:
        found = _VERSION_RE.match(self.version)
        return (int(found.group(1)), int(found.group(2))) if found else None

    @property
    def takes_cdi(self) -> bool:
        if self.kind == "podman":
            return True
        version = self.version_tuple
        if version is None or version < DOCKER_CDI_FEATURE:
            return False
        if self.cdi_spec_dirs is not None:
            return bool(self.cdi_spec_dirs)
        return version >= DOCKER_CDI_DEFAULT

    def describe(self) -> str:
        return f"{'rootless ' if self.rootless else ''}{self.kind.capitalize()} {self.version}".strip()


def engine_from_option(text: str) -> EngineFacts:
    """--engine: docker:VERSION (docker:28.2), podman or podman-rootless, for a host buildkit does not ask."""
    kind, _, version = text.partition(":")
    rootless = kind == "podman-rootless"
    kind = "podman" if rootless else kind
    if kind not in ENGINE_KINDS or (kind == "docker" and not _VERSION_RE.fullmatch(version)) or (kind == "podman" and version):
        raise UserError(Problem("--engine", f"expected docker:VERSION (such as docker:28.2), podman or podman-rootless, got {text!r}"))
    return EngineFacts(kind, version, rootless)


@dataclass(frozen=True)
class HostFacts:
    gpus: tuple[Gpu, ...] = ()
    nvidia_driver: str = ""  # kernel module version; "" when not loaded
    amdgpu_driver: str = ""  # amdgpu module version ("" when built in or not loaded)
    amdgpu_loaded: bool = False
    kfd: DeviceNode | None = None
    render_nodes: tuple[DeviceNode, ...] = ()
    nvidia_nodes: tuple[DeviceNode, ...] = ()
    cdi_specs: tuple[CdiSpec, ...] = ()
    engine: EngineFacts | None = None  # None when the engine was not asked (--host-root) nor named (--engine)
    notes: tuple[str, ...] = field(default_factory=tuple)
    # what the host sets of the variables that change which gfx target AMD's tools see (core/host/amd_environment.py)
    environment: tuple[tuple[str, str], ...] = ()

    def vendors(self) -> tuple[str, ...]:
        present = {gpu.vendor for gpu in self.gpus}
        return tuple(v for v in VENDOR_NAMES if v in present)

    def gpus_of(self, vendor: str) -> tuple[Gpu, ...]:
        return tuple(gpu for gpu in self.gpus if gpu.vendor == vendor)

    def cdi_spec(self, vendor: Vendor) -> CdiSpec | None:
        """The vendor's CDI spec; where several define its kind (etc and var/run), the one with most GPUs."""
        specs = [spec for spec in self.cdi_specs if spec.kind == vendor.cdi_kind]
        return max(specs, key=lambda spec: len(spec.gpu_devices)) if specs else None

    @property
    def amd_group_id(self) -> int | None:
        for node in (self.kfd, *self.render_nodes):
            if node is not None:
                return node.gid
        return None
