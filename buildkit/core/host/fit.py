"""Whether an image can use a host's GPUs: the driver its backend needs, and its arch list against every GPU.

A Finding is one reason, blocking or not, with its fix; `detect` passes over a target these block, and
`doctor` and `run` block its image (buildkit.core.host.routing).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.version import InvalidVersion, Version

from buildkit.core import grammar
from buildkit.core.shell import assignment, pasted

if TYPE_CHECKING:
    from buildkit.core.compat.facts import Compat
    from buildkit.core.host.facts import Gpu, HostFacts
    from buildkit.core.labels import ImageIdentity
    from buildkit.core.vendors import Vendor

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
        findings.append(
            Finding(
                True,
                "kfd-missing",
                "the ROCm kernel driver is not loaded: /dev/kfd is missing",
                "load amdgpu with KFD support (`sudo modprobe amdgpu`; install amdgpu-dkms for older kernels) and check `dmesg | grep kfd`",
            )
        )
    gpus = host.gpus_of(vendor.name)
    mixed = len({gpu.arch for gpu in gpus}) > 1
    for ordinal, gpu in enumerate(gpus):
        if not gpu.arch:
            if not vendor.arch_from_kfd:
                findings.append(
                    Finding(
                        False,
                        "arch-unknown",
                        f"GPU {gpu.pci} ({gpu.name}): its compute capability is unknown "
                        "(no nvidia-smi, and its PCI id is not in the compatibility data), so it was not checked "
                        "against the image's arch list",
                        "install nvidia-smi (it comes with the driver)",
                    )
                )
            continue  # no kfd topology, which kfd-missing already says
        if arch_covered(gpu.arch, identity.archs):
            continue
        archs = " ".join(identity.archs) or "unknown"
        if vendor.names_gfx_targets and gpu.arch not in compat.known_archs[vendor.backend]:
            findings.append(
                Finding(
                    True,
                    "unknown-gfx",
                    f"GPU {gpu.pci} ({gpu.name}) is {gpu.arch}, a gfx target neither AMD's hierarchy (rocm-bootstrap) "
                    f"nor the compatibility data knows, and the image's arch list ({archs}) lacks: kernels fail with {vendor.missing_arch_error}",
                    _arch_fix(compat, identity, gpu, None),
                )
            )
            continue
        findings.append(
            Finding(
                True,
                "arch-missing",
                f"GPU {gpu.pci} ({gpu.name}, {gpu.arch_described}) is not in the image's arch list ({archs}): kernels fail with {vendor.missing_arch_error}",
                _arch_fix(compat, identity, gpu, ordinal if mixed else None),
            )
        )
    return findings


def _driver_findings(host: HostFacts, compat: Compat, vendor: Vendor, version: str) -> list[Finding]:
    """An NVIDIA driver against the oldest its CUDA version runs on (compat driver_min)."""
    if not host.nvidia_driver:
        return [
            Finding(
                True,
                "driver-missing",
                "the NVIDIA driver is not loaded (/proc/driver/nvidia/version is missing)",
                "install the NVIDIA driver for this GPU and reboot, or `sudo modprobe nvidia`",
            )
        ]
    facts = compat.backend(vendor.backend, version)
    driver = _version(host.nvidia_driver)
    if facts is None or driver is None:
        return []
    if facts.driver_min and driver < Version(facts.driver_min):
        older = [
            v
            for (backend, v), other in sorted(compat.backends.items(), key=lambda item: Version(item[0][1]))
            if backend == vendor.backend and other.driver_min and driver >= Version(other.driver_min)
        ]
        instead = f"an image of CUDA {' or '.join(older)}" if older else "an image of an older CUDA"
        return [
            Finding(
                True,
                "driver-too-old",
                f"the NVIDIA driver {host.nvidia_driver} is older than {facts.driver_min}, "
                f"the oldest that runs CUDA {version}: torch finds no usable GPU and runs on the CPU",
                f"upgrade the driver to {facts.driver_min} or newer, or use {instead} (see `buildkit detect`)",
            )
        ]
    if facts.driver_toolkit and driver < Version(facts.driver_toolkit):
        return [
            Finding(
                False,
                "driver-older-than-toolkit",
                f"driver {host.nvidia_driver} is older than CUDA {version}'s own "
                f"({facts.driver_toolkit}): it runs through minor version compatibility, but PTX compiled for newer "
                "GPUs cannot be JIT-compiled",
                "upgrade the driver when convenient",
            )
        ]
    return []


def _arch_fix(compat: Compat, identity: ImageIdentity, gpu: Gpu, ordinal: int | None) -> str:
    """What to do about a GPU the image has no code for, offering only what `plan` and `build` accept: an
    image whose wheels carry the arch, else (AMD) the source flavor, which compiles any known gfx target, and
    for close RDNA parts the HSA override as a risk (per device on a host whose AMD GPUs differ)."""
    if not identity.vendor.builds_from_source:
        # the torch version comes from the image's labels: only a plain release names one
        own_release = compat.torch_release(identity.torch) if identity.torch and grammar.release_version(identity.torch) is None else None
        if own_release is not None:  # the image's torch release: its own builds, with the archs each carries
            own = [
                v
                for v in sorted(own_release.backends[identity.backend], key=Version)
                if arch_covered(gpu.arch, compat.wheel_archs(own_release.minor, identity.backend, v).archs)
            ]
            if own:
                return f"use an image of torch {identity.torch} for CUDA {' or '.join(own)}: its wheels for them carry {gpu.arch} (see `buildkit detect`)"
        versions = [
            v
            for (backend, v), facts in sorted(compat.backends.items(), key=lambda item: Version(item[0][1]))
            if backend == identity.vendor.backend and arch_covered(gpu.arch, facts.archs)
        ]
        if not versions:
            return f"no CUDA version buildkit knows ships kernels for {gpu.arch}"
        return f"use an image of CUDA {' or '.join(versions)}: their wheels carry {gpu.arch} (see `buildkit detect`)"
    target = compat.gfx_targets.get(gpu.arch)
    if target is None:
        return (
            f"{gpu.arch} is not a gfx target buildkit knows: a newer rocm-bootstrap may (pip install -U rocm-bootstrap), or "
            "describe it in [compat.gfx] to build for it from source"
        )
    release = compat.backend(identity.backend, identity.backend_version)
    families = [name for name, family in compat.families.items() if gpu.arch in family.gfx]
    if gpu.bundles:
        families.append(gpu.bundles[0])  # its sub-family of AMD's hierarchy: an image per bundle carries it too
    if families and release is not None and compat.layout_of(release) is not None and gpu.arch in release.archs:
        # thin wheels: the image is one family's; another family's image of the same stack carries the arch
        fix = (
            f"use the {' or '.join(families)} image of ROCm {identity.backend_version}, which carries {gpu.arch}: "
            f'add "{families[0]}" to the stack\'s rocm_families to build it'
        )
    elif target.rocm_versions:
        fix = f"use a ROCm {' or '.join(target.rocm_versions)} image: their wheels carry {gpu.arch} (see `buildkit detect`)"
    else:
        fix = (
            f"no ROCm wheel carries {gpu.arch}: build torch for it from source (a stack with the `source` flavor, "
            f"docs/source-builds.md) with {pasted('buildkit', 'build', '--select', 'flavor=source', '--gpu-arch', gpu.arch)}"
        )
    override = compat_override(compat, gpu.arch)
    if override and override[1] in identity.archs:
        variable = "HSA_OVERRIDE_GFX_VERSION" if ordinal is None else f"HSA_OVERRIDE_GFX_VERSION_{ordinal}"
        scope = "" if ordinal is None else (f" (this host's AMD GPUs differ, so only for this one: GPU {ordinal} in ROCm's order, check with rocminfo)")
        fix += (
            f"; or, at your own risk, {assignment(variable, override[0])} makes it run {override[1]} code{scope}: "
            "unsupported by AMD, and wrong results or hangs are possible"
        )
    return fix


def compat_override(compat: Compat, arch: str) -> tuple[str, str] | None:
    entry = compat.hsa_override.get(arch)
    return (entry[0], entry[1]) if entry else None
