"""What a host offers GPU containers, and what follows for an image: the best target, run flags, findings.

Pure: the facts come in (from buildkit.adapters.host reading /sys, /proc and /dev); verdicts go out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from packaging.version import InvalidVersion, Version

from buildkit.core import grammar, labels
from buildkit.core.compat import Compat
from buildkit.core.labels import ImageIdentity
from buildkit.core.plan import Plan, Target
from buildkit.core.vendors import SHM_SIZE, VENDOR_NAMES, Vendor, of_vendor


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
class HostFacts:
    gpus: tuple[Gpu, ...] = ()
    nvidia_driver: str = ""  # kernel module version; "" when not loaded
    amdgpu_driver: str = ""  # amdgpu module version ("" when built in or not loaded)
    amdgpu_loaded: bool = False
    kfd: DeviceNode | None = None
    render_nodes: tuple[DeviceNode, ...] = ()
    nvidia_nodes: tuple[DeviceNode, ...] = ()
    engine_runtimes: tuple[str, ...] | None = None  # docker runtimes; None when the engine was not asked
    notes: tuple[str, ...] = field(default_factory=tuple)

    def vendors(self) -> tuple[str, ...]:
        present = {gpu.vendor for gpu in self.gpus}
        return tuple(v for v in VENDOR_NAMES if v in present)

    def gpus_of(self, vendor: str) -> tuple[Gpu, ...]:
        return tuple(gpu for gpu in self.gpus if gpu.vendor == vendor)

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


def driver_supports(host: HostFacts, backend: str, backend_version: str, compat: Compat) -> tuple[bool, str]:
    """(ok, why) for the host driver against a CUDA version's minimum; ROCm: the kernel driver must be loaded."""
    if backend == "rocm":
        return (host.kfd is not None, "" if host.kfd is not None else "the ROCm kernel driver (/dev/kfd) is not loaded")
    facts = compat.backend("cuda", backend_version)
    driver = _version(host.nvidia_driver)
    if facts is None or not facts.driver_min or driver is None:
        return (driver is not None, "" if driver is not None else "the NVIDIA driver is not loaded")
    if driver < Version(facts.driver_min):
        return False, f"driver {host.nvidia_driver} is older than {facts.driver_min}, the oldest that runs CUDA {backend_version}"
    return True, ""


# --- the best target for this host ------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    vendor: str
    target: Target | None
    reasons: tuple[str, ...]  # why other targets were passed over (newest first), or why none fits


def best_target(host: HostFacts, plan: Plan, compat: Compat, vendor: str, python: str | None = None) -> Choice:
    """Newest torch whose backend the driver runs and whose arch list covers every GPU of the vendor;
    runtime flavor; the pair's twin before other backend versions; the requested (else newest) Python."""
    gpus = host.gpus_of(vendor)
    candidates = [t for t in plan.targets if t.vendor == vendor and t.flavor == "runtime" and (python is None or t.python == python)]
    candidates.sort(key=lambda t: (Version(t.torch), t.pair is not None, Version(t.backend_version), Version(t.python)), reverse=True)
    reasons: list[str] = []
    for target in candidates:
        ok, why = driver_supports(host, target.backend, target.backend_version, compat)
        uncovered = sorted({gpu.arch for gpu in gpus if not arch_covered(gpu.arch, target.archs)})
        if ok and not uncovered:
            return Choice(vendor, target, tuple(reasons))
        reason = why or f"{', '.join(uncovered)} not in its arch list"
        if len(reasons) < 5:
            reasons.append(f"{target.id}: {reason}")
    if not candidates:
        reasons.append(f"the matrix has no {of_vendor(vendor).display} runtime target{f' for Python {python}' if python else ''}")
    return Choice(vendor, None, tuple(reasons))


def primary_vendor(host: HostFacts) -> str | None:
    """The vendor a host is routed to: the one with more GPUs (NVIDIA on a tie); None without GPUs."""
    vendors = host.vendors()
    if not vendors:
        return None
    return max(vendors, key=lambda v: (len(host.gpus_of(v)), v == "nvidia"))


@dataclass(frozen=True)
class GpuAccess:
    """What a container needs to use this host's GPUs of one vendor: the vendor's record applied to the
    host's device nodes and groups. `docker run` flags and the docker SDK's arguments both come from it."""

    gpu_request: bool  # NVIDIA: --gpus all, through the NVIDIA container runtime
    devices: tuple[str, ...]  # AMD: the device nodes that exist here
    groups: tuple[str, ...]  # the groups that may open them
    security_options: tuple[str, ...]
    shm_size: str = SHM_SIZE

    def docker_flags(self) -> list[str]:
        flags = ["--gpus", "all"] if self.gpu_request else []
        for device in self.devices:
            flags += ["--device", device]
        for group in self.groups:
            flags += ["--group-add", group]
        for option in self.security_options:
            flags += ["--security-opt", option]
        return [*flags, "--shm-size", self.shm_size]


NO_GPU_ACCESS = GpuAccess(False, (), (), ())


def gpu_access(vendor: Vendor, host: HostFacts) -> GpuAccess:
    """The access a container gets to this host's GPUs of `vendor`; shared memory only when it has none."""
    if vendor.name not in host.vendors():
        return NO_GPU_ACCESS
    present = {"/dev/kfd": host.kfd is not None, "/dev/dri": bool(host.render_nodes)}
    devices = tuple(node for node in vendor.device_nodes if present.get(node, False))
    groups = vendor.groups
    if devices and host.amd_group_id is not None:
        groups = (*groups, str(host.amd_group_id))  # often `render`, whose gid differs between distributions
    return GpuAccess(vendor.gpu_request, devices, groups if devices else (), vendor.security_options if devices else ())


def run_refusal(reference: str, identity: ImageIdentity, host: HostFacts, twin: str | None = None) -> str | None:
    """Why running this image here would silently use the CPU: a vendor's image on a host that has only
    the other vendor's GPUs. None when it may run (its vendor is here, or the host has no GPU at all)."""
    vendors = host.vendors()
    if not vendors or identity.vendor.name in vendors:
        return None
    other = of_vendor(vendors[0])
    hint = f"; run {twin} instead" if twin else f"; use its {other.backend_display} twin (`buildkit detect` names it)"
    return (
        f"{reference} is a {identity.vendor.backend_display} image and this host has only {other.display} GPUs: "
        f"torch will find no GPU it can use and run on the CPU{hint}"
    )


# --- doctor -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    blocking: bool
    title: str
    fix: str


def _access_findings(host: HostFacts, vendor: str) -> list[Finding]:
    findings = []
    if vendor == "amd":
        if host.kfd is None:
            findings.append(Finding(
                True, "the ROCm kernel driver is not loaded: /dev/kfd is missing",
                "load amdgpu with KFD support (`sudo modprobe amdgpu`; install amdgpu-dkms for older kernels) and check `dmesg | grep kfd`",
            ))
        if not host.render_nodes:
            findings.append(Finding(True, "no /dev/dri/renderD* node for the AMD GPU", "load the amdgpu driver; the render node appears with it"))
        for node in [n for n in (host.kfd, *host.render_nodes) if n is not None and not n.accessible]:
            findings.append(Finding(
                True, f"{node.path} is not readable and writable by this user (owned by group {node.group or node.gid})",
                f"`sudo usermod -aG {node.group or node.gid},video $USER` and log in again; containers get it through "
                f"--group-add {node.gid} (buildkit run adds it)",
            ))
    else:
        if not host.nvidia_driver:
            findings.append(Finding(True, "the NVIDIA driver is not loaded (/proc/driver/nvidia/version is missing)",
                                    "install the NVIDIA driver for this GPU and reboot, or `sudo modprobe nvidia`"))
        for node in [n for n in host.nvidia_nodes if not n.accessible]:
            findings.append(Finding(True, f"{node.path} is not readable and writable by this user",
                                    "fix the device permissions (nvidia-persistenced / udev rules) or run as a user in its group"))
        if host.engine_runtimes is not None and "nvidia" not in host.engine_runtimes:
            findings.append(Finding(
                True, "the Docker engine has no NVIDIA container runtime, so --gpus cannot hand it the GPU",
                "install nvidia-container-toolkit, then `sudo nvidia-ctk runtime configure --runtime=docker` and restart dockerd",
            ))
    return findings


def diagnose(
    host: HostFacts, compat: Compat, image: str = "", identity: ImageIdentity | None = None, twin: str | None = None
) -> list[Finding]:
    """Why GPU acceleration would or would not work here (for `image`, when given), blocking findings first,
    each with its fix. `identity` is what the image's labels say it is; `twin` its other vendor's image."""
    findings: list[Finding] = []
    vendors = host.vendors()
    if image and identity is None:
        findings.append(Finding(True, f"{image} carries no {labels.BACKEND} label, so its GPU backend is unknown",
                                "build it with buildkit, or check it with `buildkit test`"))
    if identity is None:
        for vendor in vendors:
            findings.extend(_access_findings(host, vendor))
        if not vendors and not image:
            findings.append(Finding(False, "no GPU found on this host: images run on the CPU here",
                                    "nothing to fix if that is expected; on a GPU host, check the PCI device and its driver"))
        return sorted(findings, key=lambda f: not f.blocking)
    refusal = run_refusal(image, identity, host, twin)
    if refusal:
        return [Finding(True, refusal, "`buildkit run` picks the image that fits this host")]
    vendor = identity.vendor
    if vendor.name not in vendors:
        return [Finding(True, f"this host has no GPU: {image} will run on the CPU", "run it on a host with a GPU of its vendor")]
    findings.extend(_access_findings(host, vendor.name))
    version = identity.backend_version
    ok, why = driver_supports(host, vendor.backend, version, compat)
    if not ok and why and host.nvidia_driver and vendor.backend == "cuda":
        findings.append(Finding(True, f"the NVIDIA {why}", "upgrade the driver, or use an image with an older CUDA (see `buildkit detect`)"))
    cuda = compat.backend("cuda", version) if vendor.backend == "cuda" else None
    driver = _version(host.nvidia_driver)
    if ok and cuda and cuda.driver_toolkit and driver and driver < Version(cuda.driver_toolkit):
        findings.append(Finding(
            False, f"driver {host.nvidia_driver} is older than CUDA {version}'s own ({cuda.driver_toolkit}): "
            "it runs through minor version compatibility, but PTX compiled for newer GPUs cannot be JIT-compiled",
            "upgrade the driver when convenient",
        ))
    vendor_gpus = host.gpus_of(vendor.name)
    mixed = len({gpu.arch for gpu in vendor_gpus}) > 1
    for ordinal, gpu in enumerate(vendor_gpus):
        if arch_covered(gpu.arch, identity.archs):
            continue
        findings.append(Finding(
            True, f"GPU {gpu.pci} ({gpu.name}, {gpu.arch}) is not in the image's arch list "
            f"({' '.join(identity.archs) or 'unknown'}): kernels fail with {vendor.missing_arch_error}",
            _arch_fix(compat, identity, gpu, ordinal if mixed else None),
        ))
    return sorted(findings, key=lambda f: not f.blocking)


def _arch_fix(compat: Compat, identity: ImageIdentity, gpu: Gpu, ordinal: int | None) -> str:
    """What to do about a GPU the image has no code for, offering only what `plan` and `build` accept: an
    image whose wheels carry the arch, else the source flavor (which compiles any known gfx target), and for
    close RDNA parts the HSA override as a risk (per device on a host whose AMD GPUs differ)."""
    if identity.vendor.name != "amd":
        return "use an image of a newer CUDA whose arch list has it (see `buildkit detect`)"
    target = compat.gfx_targets.get(gpu.arch)
    if target is None:
        return f"{gpu.arch} is not a gfx target buildkit knows; add it to [compat.gfx] to build for it from source"
    if target.rocm_versions:
        fix = f"use a ROCm {' or '.join(target.rocm_versions)} image: their wheels carry {gpu.arch} (see `buildkit detect`)"
    else:
        fix = (f"no ROCm wheel carries {gpu.arch}: build torch for it from source (a stack with the `source` flavor, "
               f"docs/source-builds.md) with `buildkit build --select flavor=source --gpu-arch {gpu.arch}`")
    override = compat_override(compat, gpu.arch)
    if override and override[1] in identity.archs:
        variable = "HSA_OVERRIDE_GFX_VERSION" if ordinal is None else f"HSA_OVERRIDE_GFX_VERSION_{ordinal}"
        scope = "" if ordinal is None else (f" (this host's AMD GPUs differ, so only for this one: GPU {ordinal} in ROCm's "
                                            "order, check with rocminfo)")
        fix += (f"; or, at your own risk, {variable}={override[0]} makes it run {override[1]} code{scope}: "
                "unsupported by AMD, and wrong results or hangs are possible")
    return fix


def compat_override(compat: Compat, arch: str) -> tuple[str, str] | None:
    entry = compat.hsa_override.get(arch)
    return (entry[0], entry[1]) if entry else None
