"""The image label contract: written from a Target, read back into one ImageIdentity.

Images describe themselves: the smoke test, `doctor`, `run`, `parity` and publishing read what an image
is from its labels, never from what torch reports at run time. This module alone knows the keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from buildkit.core.compat.facts import AMD64, ARM64
from buildkit.core.targets.source import SOURCE_FLAVOR
from buildkit.core.trim import trim_for
from buildkit.core.vendors import BY_BACKEND, Vendor

if TYPE_CHECKING:
    from collections.abc import Mapping

    from buildkit.core.targets.plan import Target

PREFIX = "dev.buildkit."
OCI = "org.opencontainers.image."

TARGET = f"{PREFIX}target"
TORCH = f"{PREFIX}torch"
VENDOR = f"{PREFIX}vendor"
BACKEND = f"{PREFIX}backend"
BACKEND_VERSION = f"{PREFIX}backend-version"
# the CUDA or HIP version (major.minor) torch reports, where it is not the backend version's (ROCm 10.0: HIP 7.15)
BACKEND_RUNTIME = f"{PREFIX}backend-runtime"
PYTHON = f"{PREFIX}python"
FLAVOR = f"{PREFIX}flavor"
GPU_ARCHS = f"{PREFIX}gpu-archs"
TRIMMED_ARCHS = f"{PREFIX}trimmed-archs"  # the archs of the wheels whose GPU code the image left out
PAIR = f"{PREFIX}pair"
BASE_IMAGE = f"{PREFIX}base-image"
FINGERPRINT = f"{PREFIX}fingerprint"
SOURCE_REVISION = f"{PREFIX}source-revision"
BUILDER_IMAGE = f"{PREFIX}builder-image"
BUILD_OPTIONS = f"{PREFIX}build-options"
BASE_DIGEST = f"{PREFIX}base-digest"  # matrix.lock's digest of the base image
PLATFORMS = f"{PREFIX}platforms"  # set when the image index holds more (or other) than linux/amd64
TORCH_COMPILE = f"{PREFIX}torch-compile"  # "false" when built without the torch.compile toolchain (compile = false)
ROCM_FAMILY = f"{PREFIX}rocm-family"  # a family image (mi300): it carries its gfx targets' device code only
ROCM_BUNDLE = f"{PREFIX}rocm-bundle"  # a family image's bundle of AMD's hierarchy (gfx9_4, gfx115x; rocm-bootstrap)
DEVICE_PACKAGES = f"{PREFIX}device-packages"  # thin ROCm wheels: the device-code distributions the image carries
# thin ROCm wheels: the companions whose device code the image carries too (torchvision), whose ops must load
COMPANION_DEVICE_CODE = f"{PREFIX}companion-device-code"
# thin ROCm wheels: the image's WheelNext variant properties (amd :: gfx_arch :: gfx942), so a variant-aware
# install inside it can be pinned to what the image carries
WHEEL_VARIANT = f"{PREFIX}wheel-variant"
MAX_LAYER_SIZE = f"{PREFIX}max-layer-size"  # bytes: the budget every layer of the image was built under
COMPRESSION = f"{PREFIX}compression"  # how its layers are compressed: zstd (engines from Docker 23 on) or gzip
INSTALLER = f"{PREFIX}installer"  # what installed torch and the packages: uv or pip
# Not image labels: the label of smoke-test containers, and the annotation of nightly date-tag copies.
PROBE_CONTAINER = f"{PREFIX}probe"
NIGHTLY_ANNOTATION = f"{PREFIX}nightly"


def image_labels(target: Target, source: str) -> dict[str, str]:
    """What describes an image to the smoke test and doctor; nothing time- or commit-dependent, so the
    labels are part of the fingerprint."""
    labels = {
        f"{OCI}title": f"PyTorch {target.torch} for {target.backend_label}, Python {target.python} ({target.flavor})",
        f"{OCI}version": target.tag_names[0],
        f"{OCI}source": source,
        TARGET: target.id,
        TORCH: target.torch,
        VENDOR: target.vendor,
        BACKEND: target.backend,
        BACKEND_VERSION: target.backend_version,
        PYTHON: target.python,
        FLAVOR: target.flavor,
        GPU_ARCHS: ";".join(target.archs),
        PAIR: target.pair or "",
        BASE_IMAGE: target.base_image,
        MAX_LAYER_SIZE: str(target.max_layer_size),
        COMPRESSION: target.compression,
        INSTALLER: target.installer,
    }
    if target.backend_runtime:
        labels[BACKEND_RUNTIME] = target.backend_runtime
    if target.family:
        labels[ROCM_FAMILY] = target.family
    if target.bundle:
        labels[ROCM_BUNDLE] = target.bundle
    if target.device_code:
        labels[DEVICE_PACKAGES] = ",".join(target.device_packages)
    if target.companion_device_packages:
        labels[COMPANION_DEVICE_CODE] = ",".join(target.companion_device_packages)
    if target.wheel_variant:
        labels[WHEEL_VARIANT] = "; ".join(target.wheel_variant)
    if target.base_digest:
        labels[BASE_DIGEST] = target.base_digest
    if not target.compile:
        labels[TORCH_COMPILE] = "false"
    if target.platforms != (AMD64,):
        labels[PLATFORMS] = ",".join(target.platforms)
    if ARM64 in target.platforms and target.arm64_archs and target.arm64_archs != target.archs:
        labels[f"{GPU_ARCHS}.linux-arm64"] = ";".join(target.arm64_archs)
    trim = trim_for(target)
    if trim:
        labels[TRIMMED_ARCHS] = ";".join(trim.removed)
    if target.flavor == SOURCE_FLAVOR:
        jobs = str(target.max_jobs) if target.max_jobs else "auto"
        labels |= {
            SOURCE_REVISION: "local checkout (build context)" if target.source_checkout else f"v{target.torch}",
            BUILDER_IMAGE: target.builder_image,
            BUILD_OPTIONS: f"USE_ROCM=1 PYTORCH_ROCM_ARCH={';'.join(target.archs)} MAX_JOBS={jobs}",
        }
    return labels


CREATED, REVISION = f"{OCI}created", f"{OCI}revision"
STAMP_LABELS = (CREATED, REVISION)


def build_stamp_labels(created: str, revision: str) -> dict[str, str]:
    """Labels that vary per build; kept out of the fingerprint so an unchanged image is not rebuilt, and out
    of an image's content id (ImageFacts.content_id) so a rebuild of it is known as the image tested before."""
    stamp = {CREATED: created}
    if revision:
        stamp[REVISION] = revision
    return stamp


@dataclass(frozen=True)
class ImageIdentity:
    """What an image says it is, read from its labels."""

    vendor: Vendor
    backend_version: str
    archs: tuple[str, ...]
    target: str = ""
    torch: str = ""
    python: str = ""
    flavor: str = ""
    pair: str = ""
    base_image: str = ""
    fingerprint: str = ""
    compile: bool = True  # built with the torch.compile toolchain (the default); False: compile = false
    family: str = ""  # a ROCm family image's family
    device_packages: tuple[str, ...] = ()  # thin ROCm wheels: the device-code distributions it must carry
    companion_device_code: tuple[str, ...] = ()  # the companions whose device code it carries (their ops must load)
    bundle: str = ""  # a ROCm family image's bundle of AMD's hierarchy
    backend_runtime: str = ""  # the version torch reports, where it is not backend_version (ROCm 10.0: HIP 7.15)

    @property
    def backend(self) -> str:
        return self.vendor.backend

    @property
    def reported_backend_version(self) -> str:
        """The CUDA or HIP version (major.minor) torch must report in the image."""
        return self.backend_runtime or self.backend_version

    @classmethod
    def of_target(cls, target: Target) -> ImageIdentity:
        """What the image of `target` will say it is (its labels for linux/amd64), without writing them."""
        return cls(
            vendor=BY_BACKEND[target.backend],
            backend_version=target.backend_version,
            archs=target.archs,
            target=target.id,
            torch=target.torch,
            python=target.python,
            flavor=target.flavor,
            pair=target.pair or "",
            base_image=target.base_image,
            compile=target.compile,
            backend_runtime=target.backend_runtime,
        )

    @classmethod
    def read(cls, labels: Mapping[str, str] | None, platform: str = AMD64) -> ImageIdentity | None:
        """None when the labels do not say which GPU backend the image is for (not a buildkit image). The
        arch list is the one of `platform`'s wheels (arm64 CUDA wheels have their own)."""
        labels = labels or {}
        vendor = BY_BACKEND.get(labels.get(BACKEND, ""))
        version = labels.get(BACKEND_VERSION, "")
        if vendor is None or not version:
            return None
        return cls(
            vendor=vendor,
            backend_version=version,
            archs=tuple(arch for arch in labels.get(f"{GPU_ARCHS}.{platform.replace('/', '-')}", labels.get(GPU_ARCHS, "")).split(";") if arch),
            target=labels.get(TARGET, ""),
            torch=labels.get(TORCH, ""),
            python=labels.get(PYTHON, ""),
            flavor=labels.get(FLAVOR, ""),
            pair=labels.get(PAIR, ""),
            base_image=labels.get(BASE_IMAGE, ""),
            fingerprint=labels.get(FINGERPRINT, ""),
            compile=labels.get(TORCH_COMPILE, "") != "false",
            family=labels.get(ROCM_FAMILY, ""),
            device_packages=tuple(name for name in labels.get(DEVICE_PACKAGES, "").split(",") if name),
            companion_device_code=tuple(name for name in labels.get(COMPANION_DEVICE_CODE, "").split(",") if name),
            bundle=labels.get(ROCM_BUNDLE, ""),
            backend_runtime=labels.get(BACKEND_RUNTIME, ""),
        )
