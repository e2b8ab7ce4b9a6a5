"""What a host offers GPU containers, and what follows for an image: the findings, the fitting target, run flags.

Pure: the facts come in (from buildkit.adapters.host reading /sys, /proc, /dev and the CDI specs, and from the
engine); verdicts go out. One set of findings decides all three commands, so they can never disagree:
`detect` picks the newest target that no finding blocks, `doctor` shows the findings, and `run` refuses an
image that a blocking finding keeps off the GPU (and warns for the others).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from buildkit.core import grammar, labels
from buildkit.core.compat import Compat
from buildkit.core.labels import ImageIdentity
from buildkit.core.plan import Plan, Target
from buildkit.core.shell import USER, assignment, pasted
from buildkit.core.vendors import SHM_SIZE, VENDOR_NAMES, Vendor, of_vendor
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
_GROUP_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")  # POSIX portable user and group names


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


# --- arch coverage ---------------------------------------------------------------------------------------


def _sm(arch: str) -> int:
    return int(arch.removeprefix("sm_"))


def _label_sm(arch: str) -> int:
    major, minor = arch.removesuffix("+PTX").split(".")
    return int(major) * 10 + int(minor)


def arch_covered(gpu_arch: str, image_archs: tuple[str, ...]) -> bool:
    """Whether an image built for image_archs (label form: 9.0, 12.0+PTX, gfx942) runs on gpu_arch."""
    if not gpu_arch:
        return True  # unknown arch: nothing to hold against the image
    if gpu_arch.startswith("gfx"):
        return gpu_arch in image_archs
    if not re.fullmatch(r"sm_[0-9]{2,3}", gpu_arch):
        return False  # an arch buildkit cannot read: nothing proves the image runs there
    wanted = _sm(gpu_arch)
    for arch in image_archs:
        if grammar.cuda_arch(arch):
            continue  # a gfx target, or a label value that is no CUDA arch: it covers nothing here
        built = _label_sm(arch)
        # SASS runs on its own major with an equal or higher minor; PTX is JIT-compiled for any newer arch
        if built == wanted or (arch.endswith("+PTX") and built <= wanted) or (built // 10 == wanted // 10 and built <= wanted):
            return True
    return False


def _version(text: str) -> Version | None:
    try:
        return Version(text)
    except InvalidVersion:
        return None


# --- findings ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    blocking: bool
    code: str  # stable name for scripts and tests: wrong-vendor, no-gpu, driver-too-old, arch-missing, ...
    title: str
    fix: str


def fit_findings(host: HostFacts, compat: Compat, identity: ImageIdentity) -> list[Finding]:
    """Whether an image of the host's vendor can use its GPUs: the driver its backend needs, and its arch list
    against every GPU. `detect` passes over a target these block, and `doctor` and `run` block its image."""
    vendor = identity.vendor
    findings: list[Finding] = []
    if vendor.driver_minimums:
        findings += _driver_findings(host, compat, vendor, identity.backend_version)
    elif host.kfd is None:
        findings.append(Finding(
            True, "kfd-missing", "the ROCm kernel driver is not loaded: /dev/kfd is missing",
            "load amdgpu with KFD support (`sudo modprobe amdgpu`; install amdgpu-dkms for older kernels) and check `dmesg | grep kfd`",
        ))
    gpus = host.gpus_of(vendor.name)
    mixed = len({gpu.arch for gpu in gpus}) > 1
    for ordinal, gpu in enumerate(gpus):
        if not gpu.arch:
            if not vendor.arch_from_kfd:
                findings.append(Finding(False, "arch-unknown", f"GPU {gpu.pci} ({gpu.name}): its compute capability is unknown "
                                        "(no nvidia-smi, and its PCI id is not in the compatibility data), so it was not checked "
                                        "against the image's arch list", "install nvidia-smi (it comes with the driver)"))
            continue  # no kfd topology, which kfd-missing already says
        if arch_covered(gpu.arch, identity.archs):
            continue
        archs = " ".join(identity.archs) or "unknown"
        if vendor.names_gfx_targets and gpu.arch not in compat.gfx_targets:
            findings.append(Finding(
                True, "unknown-gfx", f"GPU {gpu.pci} ({gpu.name}) is {gpu.arch}, a gfx target buildkit does not know and the "
                f"image's arch list ({archs}) lacks: kernels fail with {vendor.missing_arch_error}",
                _arch_fix(compat, identity, gpu, None),
            ))
            continue
        findings.append(Finding(
            True, "arch-missing", f"GPU {gpu.pci} ({gpu.name}, {gpu.arch}) is not in the image's arch list "
            f"({archs}): kernels fail with {vendor.missing_arch_error}",
            _arch_fix(compat, identity, gpu, ordinal if mixed else None),
        ))
    return findings


def _driver_findings(host: HostFacts, compat: Compat, vendor: Vendor, version: str) -> list[Finding]:
    """An NVIDIA driver against the oldest its CUDA version runs on (compat driver_min)."""
    if not host.nvidia_driver:
        return [Finding(True, "driver-missing", "the NVIDIA driver is not loaded (/proc/driver/nvidia/version is missing)",
                        "install the NVIDIA driver for this GPU and reboot, or `sudo modprobe nvidia`")]
    facts = compat.backend(vendor.backend, version)
    driver = _version(host.nvidia_driver)
    if facts is None or driver is None:
        return []
    if facts.driver_min and driver < Version(facts.driver_min):
        older = [v for (backend, v), other in sorted(compat.backends.items(), key=lambda item: Version(item[0][1]))
                 if backend == vendor.backend and other.driver_min and driver >= Version(other.driver_min)]
        instead = f"an image of CUDA {' or '.join(older)}" if older else "an image of an older CUDA"
        return [Finding(True, "driver-too-old", f"the NVIDIA driver {host.nvidia_driver} is older than {facts.driver_min}, "
                        f"the oldest that runs CUDA {version}: torch finds no usable GPU and runs on the CPU",
                        f"upgrade the driver to {facts.driver_min} or newer, or use {instead} (see `buildkit detect`)")]
    if facts.driver_toolkit and driver < Version(facts.driver_toolkit):
        return [Finding(False, "driver-older-than-toolkit", f"driver {host.nvidia_driver} is older than CUDA {version}'s own "
                        f"({facts.driver_toolkit}): it runs through minor version compatibility, but PTX compiled for newer "
                        "GPUs cannot be JIT-compiled", "upgrade the driver when convenient")]
    return []


def _arch_fix(compat: Compat, identity: ImageIdentity, gpu: Gpu, ordinal: int | None) -> str:
    """What to do about a GPU the image has no code for, offering only what `plan` and `build` accept: an
    image whose wheels carry the arch, else (AMD) the source flavor, which compiles any known gfx target, and
    for close RDNA parts the HSA override as a risk (per device on a host whose AMD GPUs differ)."""
    if not identity.vendor.builds_from_source:
        versions = [v for (backend, v), facts in sorted(compat.backends.items(), key=lambda item: Version(item[0][1]))
                    if backend == identity.vendor.backend and arch_covered(gpu.arch, facts.archs)]
        if not versions:
            return f"no CUDA version buildkit knows ships kernels for {gpu.arch}"
        return f"use an image of CUDA {' or '.join(versions)}: their wheels carry {gpu.arch} (see `buildkit detect`)"
    target = compat.gfx_targets.get(gpu.arch)
    if target is None:
        return f"{gpu.arch} is not a gfx target buildkit knows; add it to [compat.gfx] to build for it from source"
    release = compat.backend(identity.backend, identity.backend_version)
    families = [name for name, family in compat.families.items() if gpu.arch in family.gfx]
    if families and release is not None and compat.layout_of(release) is not None and gpu.arch in release.archs:
        # thin wheels: the image is one family's; another family's image of the same stack carries the arch
        fix = (f"use the {' or '.join(families)} image of ROCm {identity.backend_version}, which carries {gpu.arch}: "
               f"add \"{families[0]}\" to the stack's rocm_families to build it")
    elif target.rocm_versions:
        fix = f"use a ROCm {' or '.join(target.rocm_versions)} image: their wheels carry {gpu.arch} (see `buildkit detect`)"
    else:
        fix = (f"no ROCm wheel carries {gpu.arch}: build torch for it from source (a stack with the `source` flavor, "
               f"docs/source-builds.md) with {pasted('buildkit', 'build', '--select', 'flavor=source', '--gpu-arch', gpu.arch)}")
    override = compat_override(compat, gpu.arch)
    if override and override[1] in identity.archs:
        variable = "HSA_OVERRIDE_GFX_VERSION" if ordinal is None else f"HSA_OVERRIDE_GFX_VERSION_{ordinal}"
        scope = "" if ordinal is None else (f" (this host's AMD GPUs differ, so only for this one: GPU {ordinal} in ROCm's "
                                            "order, check with rocminfo)")
        fix += (f"; or, at your own risk, {assignment(variable, override[0])} makes it run {override[1]} code{scope}: "
                "unsupported by AMD, and wrong results or hangs are possible")
    return fix


def compat_override(compat: Compat, arch: str) -> tuple[str, str] | None:
    entry = compat.hsa_override.get(arch)
    return (entry[0], entry[1]) if entry else None


# --- how a container gets the GPUs ---------------------------------------------------------------------


@dataclass(frozen=True)
class GpuAccess:
    """What a container needs to use this host's GPUs of one vendor: the vendor's record applied to the
    host's device nodes, groups, CDI spec and engine. `docker run` flags and the docker SDK's arguments
    both come from it."""

    gpu_request: bool  # NVIDIA without CDI: --gpus all, through the NVIDIA container runtime
    devices: tuple[str, ...]  # device nodes that exist here (raw flags)
    groups: tuple[str, ...]  # the groups that may open them
    security_options: tuple[str, ...]
    shm_size: str = SHM_SIZE
    cdi_devices: tuple[str, ...] = ()  # CDI names (nvidia.com/gpu=all), where a spec exists and the engine takes them

    def docker_flags(self) -> list[str]:
        flags = ["--gpus", "all"] if self.gpu_request else []
        for device in (*self.cdi_devices, *self.devices):
            flags += ["--device", device]
        for group in self.groups:
            flags += ["--group-add", group]
        for option in self.security_options:
            flags += ["--security-opt", option]
        return [*flags, "--shm-size", self.shm_size]


NO_GPU_ACCESS = GpuAccess(False, (), (), ())
# Rootless podman: the container's user keeps the host user's own supplementary groups (render, video) only
# with this, and podman takes it alone, never beside other --group-add values.
KEEP_GROUPS = "keep-groups"


def gpu_access(vendor: Vendor, host: HostFacts) -> GpuAccess:
    """The access a container gets to this host's GPUs of `vendor`; shared memory only when it has none."""
    if vendor.name not in host.vendors():
        return NO_GPU_ACCESS
    spec, engine = host.cdi_spec(vendor), host.engine
    cdi = spec is not None and engine is not None and engine.takes_cdi
    if cdi:
        devices: tuple[str, ...] = ()
    else:
        present = {"/dev/kfd": host.kfd is not None, "/dev/dri": bool(host.render_nodes)}
        devices = tuple(node for node in vendor.device_nodes if present.get(node, False))
    opened = cdi or bool(devices)
    groups: tuple[str, ...] = ()
    if opened and vendor.groups:  # AMD: the image's non-root user opens /dev/kfd and the render nodes through groups
        if engine is not None and engine.kind == "podman" and engine.rootless:
            groups = (KEEP_GROUPS,)
        else:
            groups = vendor.groups + ((str(host.amd_group_id),) if host.amd_group_id is not None else ())  # often `render`,
            # whose gid differs between distributions
    return GpuAccess(vendor.gpu_request and not cdi, devices, groups, vendor.security_options if opened else (),
                     cdi_devices=(f"{vendor.cdi_kind}=all",) if cdi else ())


def access_findings(host: HostFacts, vendor: Vendor, access: GpuAccess) -> list[Finding]:
    """What keeps any container from this host's GPUs of `vendor` with `access`, whatever its image."""
    findings: list[Finding] = []
    rootless = host.engine is not None and host.engine.rootless
    if "/dev/dri" in vendor.device_nodes and not host.render_nodes:
        findings.append(Finding(True, "render-node-missing", "no /dev/dri/renderD* node for the AMD GPU",
                                "load the amdgpu driver; the render node appears with it"))
    for node in [n for n in (host.kfd, *host.render_nodes, *host.nvidia_nodes) if n is not None and not n.accessible]:
        group = node.group or str(node.gid)
        # The name comes from the host's /etc/group and can be anything, shell syntax included: the command
        # names a group by a portable name (POSIX's characters) or else by its number, which usermod takes too.
        member_of = node.group if _GROUP_NAME_RE.fullmatch(node.group) else str(node.gid)
        add_to_groups = pasted("sudo", "usermod", "-aG", f"{member_of},video", USER)
        if rootless:  # the container's user is this user: it opens the node with this user's groups or not at all
            findings.append(Finding(True, "device-permission", f"{node.path} is not readable and writable by this user "
                                    f"(owned by group {group}), and a rootless engine's containers open it as this user",
                                    f"{add_to_groups} and log in again"))
        else:
            findings.append(Finding(False, "device-permission", f"{node.path} is not readable and writable by this user "
                                    f"(owned by group {group}): torch outside containers cannot use it",
                                    f"{add_to_groups} and log in again; containers get it through "
                                    f"--group-add (buildkit run adds it)"))
    engine = host.engine
    if access.gpu_request and engine is not None and engine.runtimes is not None and "nvidia" not in engine.runtimes:
        findings.append(Finding(
            True, "nvidia-runtime-missing", "the Docker engine has no NVIDIA container runtime, so --gpus cannot hand it the GPU",
            "install nvidia-container-toolkit, then `sudo nvidia-ctk runtime configure --runtime=docker` and restart dockerd "
            f"(or write a CDI spec, `{vendor.cdi_generate}`, for an engine that takes CDI names)",
        ))
    findings += _cdi_findings(host, vendor, access)
    return findings


def _cdi_findings(host: HostFacts, vendor: Vendor, access: GpuAccess) -> list[Finding]:
    spec = host.cdi_spec(vendor)
    if spec is None:
        return []
    findings: list[Finding] = []
    used = bool(access.cdi_devices)
    if spec.missing_nodes:
        shown = ", ".join(spec.missing_nodes[:4]) + (" and more" if len(spec.missing_nodes) > 4 else "")
        findings.append(Finding(
            used, "cdi-stale", f"the CDI spec {spec.path} names device nodes this host does not have ({shown}): it is stale"
            + (", and the engine refuses a container that asks for them" if used else ""),
            f"write it again: `{vendor.cdi_generate}`",
        ))
    listed, present = len(spec.gpu_devices), len(host.gpus_of(vendor.name))
    if listed < present:
        findings.append(Finding(False, "cdi-missing-gpus", f"the CDI spec {spec.path} lists {listed} of this host's {present} "
                                f"{vendor.display} GPUs: containers that ask for {vendor.cdi_kind}=all get only those",
                                f"write it again: `{vendor.cdi_generate}`"))
    engine = host.engine
    if engine is not None and not engine.takes_cdi:
        enable = ("upgrade to Docker 28.2 or newer (CDI on by default), or turn on its CDI feature "
                  "(`\"features\": {\"cdi\": true}` in /etc/docker/daemon.json, Docker 25 and newer)")
        findings.append(Finding(False, "cdi-unused", f"a CDI spec for {vendor.cdi_kind} exists ({spec.path}), but "
                                f"{engine.describe()} does not take CDI device names, so buildkit hands it the device nodes itself",
                                enable))
    elif engine is None:
        findings.append(Finding(False, "cdi-engine-unknown", f"a CDI spec for {vendor.cdi_kind} exists ({spec.path}), but the engine "
                                "was not asked (--host-root), so buildkit cannot tell whether it takes CDI device names",
                                "name it with --engine docker:VERSION, podman or podman-rootless"))
    return findings


# --- an image on this host ------------------------------------------------------------------------------


def no_gpu_finding(subject: str) -> Finding:
    return Finding(True, "no-gpu", f"this host has no GPU: {subject} on the CPU",
                   "nothing to fix if that is expected (CI runners); on a GPU host, check the PCI device and its driver")


def assess(host: HostFacts, compat: Compat, reference: str, identity: ImageIdentity | None, twin: str | None = None) -> list[Finding]:
    """Why this image would or would not use this host's GPUs, blocking findings first, each with its fix.
    `identity` is what its labels say it is (None: no buildkit labels); `twin` its other vendor's image."""
    if identity is None:
        return [Finding(True, "no-labels", f"{reference} carries no {labels.BACKEND} label, so its GPU backend is unknown",
                        "build it with buildkit, or check it with `buildkit test`")]
    vendors = host.vendors()
    if not vendors:
        return [no_gpu_finding(f"{reference} runs")]
    vendor = identity.vendor
    if vendor.name not in vendors:
        other = of_vendor(vendors[0])
        hint = f"run {twin} instead" if twin else f"use its {other.backend_display} twin (`buildkit detect` names it)"
        return [Finding(
            True, "wrong-vendor", f"{reference} is a {vendor.backend_display} image and this host has only {other.display} GPUs: "
            f"torch will find no GPU it can use and run on the CPU; {hint}",
            "`buildkit run` picks the image that fits this host",
        )]
    findings = access_findings(host, vendor, gpu_access(vendor, host)) + fit_findings(host, compat, identity)
    return sorted(findings, key=lambda f: not f.blocking)


@dataclass(frozen=True)
class RunVerdict:
    """What `run` does with an image's findings: refuse for the blocking ones where the host has a GPU the image
    would miss; on a host without GPUs every image runs on the CPU, as expected there, so they are warnings."""

    refusals: tuple[Finding, ...]
    warnings: tuple[Finding, ...]


def run_verdict(host: HostFacts, findings: list[Finding]) -> RunVerdict:
    if not host.gpus:
        return RunVerdict((), tuple(findings))
    return RunVerdict(tuple(f for f in findings if f.blocking), tuple(f for f in findings if not f.blocking))


# --- the best target for this host ------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    vendor: str
    target: Target | None
    reasons: tuple[str, ...]  # why other targets were passed over (newest first), or why none fits
    first_blocker: Finding | None = None  # what kept the newest candidate off the GPU, when none fits
    uncarried: tuple[str, ...] = ()  # the host's GPU archs that no candidate's arch list has (no image carries gfx1103)


def best_target(host: HostFacts, plan: Plan, compat: Compat, vendor: str, python: str | None = None) -> Choice:
    """Newest torch that no fit finding blocks (the driver runs its backend, its arch list covers every GPU of
    the vendor); runtime flavor; the pair's twin before other backend versions; the requested (else newest) Python."""
    candidates = [t for t in plan.targets if t.vendor == vendor and t.flavor == "runtime" and (python is None or t.python == python)]
    candidates.sort(key=lambda t: (Version(t.torch), t.pair is not None, Version(t.backend_version), Version(t.python)), reverse=True)
    reasons: list[str] = []
    first: Finding | None = None
    for target in candidates:
        blockers = [f for f in fit_findings(host, compat, ImageIdentity.of_target(target)) if f.blocking]
        if not blockers:
            return Choice(vendor, target, tuple(reasons))
        first = first or blockers[0]
        if len(reasons) < 5:
            reasons.append(f"{target.id}: {blockers[0].title}")
    if not candidates:
        reasons.append(f"the matrix has no {of_vendor(vendor).display} runtime target{f' for Python {python}' if python else ''}")
    uncarried = sorted({gpu.arch for gpu in host.gpus_of(vendor)
                        if gpu.arch and candidates and not any(arch_covered(gpu.arch, t.archs) for t in candidates)})
    return Choice(vendor, None, tuple(reasons), first, tuple(uncarried))


def primary_vendor(host: HostFacts) -> str | None:
    """The vendor a host is routed to: the one with more GPUs (NVIDIA on a tie); None without GPUs."""
    vendors = host.vendors()
    if not vendors:
        return None
    return max(vendors, key=lambda v: (len(host.gpus_of(v)), of_vendor(v).routing_rank))


@dataclass(frozen=True)
class Routing:
    """Where this host is routed, and what doctor says about it: what `detect`, `doctor` and `run` all show."""

    vendor: str | None
    choices: dict[str, Choice]  # per vendor present: the fitting target, or why none fits
    access: dict[str, GpuAccess]  # per vendor present: what a container needs
    findings: tuple[Finding, ...]  # blocking first

    @property
    def target(self) -> Target | None:
        return self.choices[self.vendor].target if self.vendor else None

    @property
    def blocking(self) -> bool:
        return any(f.blocking for f in self.findings)


def route(host: HostFacts, plan: Plan, compat: Compat, python: str | None = None) -> Routing:
    choices = {vendor: best_target(host, plan, compat, vendor, python) for vendor in host.vendors()}
    access = {vendor: gpu_access(of_vendor(vendor), host) for vendor in host.vendors()}
    vendor = primary_vendor(host)
    if vendor is None:
        return Routing(None, choices, access, (no_gpu_finding("every image runs"),))
    record, choice = of_vendor(vendor), choices[vendor]
    findings = access_findings(host, record, access[vendor])
    if choice.target is None:
        blocker = choice.first_blocker
        if choice.uncarried:  # every candidate lacks the same archs: say that, not the same reason per target
            why = (f"no {record.display} image of the matrix carries {', '.join(choice.uncarried)}, this host's GPU arch "
                   f"(kernels fail with {record.missing_arch_error})")
        else:
            why = f"no {record.display} image of the matrix fits this host: {'; '.join(choice.reasons)}"
        findings.append(Finding(
            True, "no-fitting-image", why,
            blocker.fix if blocker else f"add a {record.backend_display} runtime target to the matrix",
        ))
    else:
        findings += [f for f in fit_findings(host, compat, ImageIdentity.of_target(choice.target)) if not f.blocking]
    return Routing(vendor, choices, access, tuple(sorted(findings, key=lambda f: not f.blocking)))
