"""What buildkit knows about each GPU vendor, in one frozen record per vendor.

Names, the wheel-index layout of its backend, the PCI vendor id, the libraries its torch build loads,
the error a missing GPU arch produces, and how a container is given its GPUs. The `docker run` flags,
the docker SDK arguments of the smoke test and `doctor`'s advice are all derived from these records.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DOTTED_VERSION = re.compile(r"[0-9]{1,4}(?:\.[0-9]{1,4}){1,3}")  # rocm7.2, rocm6.2.4
_UNDOTTED_VERSION = re.compile(r"([0-9]{1,3})([0-9])")  # cu130 -> 13.0, cu118 -> 11.8: the minor is one digit


@dataclass(frozen=True)
class Vendor:
    name: str  # nvidia | amd: the value of the vendor label, --vendor and plan JSON
    display: str  # NVIDIA | AMD
    backend: str  # cuda | rocm: the torch build for this vendor's GPUs
    backend_display: str  # CUDA | ROCm
    pci_vendor: str  # the PCI vendor id its GPUs report in sysfs
    dnn_library: str  # the DNN library torch.backends.cudnn reports for this build
    collective_library: str  # what torch.cuda.nccl / torch.distributed's nccl backend is for this build
    missing_arch_error: str  # what a kernel launch on a GPU arch missing from the build says
    # How a container gets this vendor's GPUs: NVIDIA through the NVIDIA container runtime (--gpus), AMD
    # through the device nodes the ROCm runtime opens, readable by the groups that own them.
    gpu_request: bool
    device_nodes: tuple[str, ...]
    groups: tuple[str, ...]
    security_options: tuple[str, ...]
    # The CDI device kind its toolkit writes a spec for (`--device <kind>=all` on engines that take CDI names),
    # and the command that (re)writes that spec.
    cdi_kind: str
    cdi_generate: str
    # Kubernetes: the device plugin's extended resource, and the DRA DeviceClass the vendor's DRA driver creates.
    k8s_resource: str
    dra_device_class: str
    # PyTorch's wheel index names a backend version's folder with this prefix and the version, its dots kept
    # or dropped: cu130 for CUDA 13.0, rocm7.2 for ROCm 7.2.
    index_prefix: str
    index_keeps_dots: bool
    # How far `compat check` probes past the newest backend version the data knows (the index root lists no
    # variant folders): every minor up to index_top_minor of each known major, and the first minors of the
    # next index_majors_ahead majors.
    index_top_minor: int
    index_majors_ahead: int
    torch_version_field: str  # the attribute of torch.version naming this backend's build: cuda | hip
    torch_version_display: str  # how messages name that field's version: CUDA 13.0 | HIP 7.2.53211
    # The torch wheel's library that holds its GPU code, and how the code is packed in it: CUDA fat binaries
    # (fatbin) or clang offload bundles of code objects (offload-bundle); `compat check --deep` reads it.
    gpu_library: str
    gpu_code_format: str
    # How the arch lists of labels (8.0, gfx942) read where torch reports them (torch.cuda.get_arch_list():
    # sm_80, gfx942), and whether a GPU arch name is this vendor's.
    arch_prefix: str  # sm_ | gfx
    # Its wheels carry GPU code per arch that an image may leave out (ROCm's per-arch library files and
    # device packages; a CUDA wheel's fat binaries cannot be split), and torch builds from source through
    # hipify for it: the source flavor.
    narrows_arch_code: bool
    builds_from_source: bool
    # A container's environment the vendor's container runtime reads ({major}: the backend's major version).
    container_env: tuple[tuple[str, str], ...]
    # The kernel driver whose presence says the host's GPUs of this vendor can run kernels: its version field
    # in host facts (nvidia_driver, amdgpu_driver).
    host_driver_field: str
    host_driver_loaded_field: str  # the host fact that says the driver is loaded (a built-in amdgpu has no version)
    driver_module: str  # the kernel module, as a GPU test's record names the driver: nvidia, amdgpu
    # CUDA versions have driver minimums (compat driver_min); ROCm needs its kernel driver's /dev/kfd
    driver_minimums: bool
    # where a GPU's arch is read: AMD's kfd topology names its gfx target; NVIDIA's comes from nvidia-smi or
    # the compatibility data's PCI ids, and may stay unknown
    arch_from_kfd: bool
    jit_arch_prefix: str  # a build's JIT-compiled arch (PTX: compute_120) serves newer GPUs; "" when there is none
    k8s_affinity: str  # whose node labels place its workloads: gfd (GPU Feature Discovery) | amd-labeller
    routing_rank: int  # a host with as many GPUs of each vendor goes to the higher rank
    # The distributions (fnmatch patterns of their names) that carry the vendor's native libraries as wheels
    # built for any Python (`py3-none-<platform>`): an image installs them in layers whose files do not depend
    # on its Python, so the images of every Python of a stack share them.
    library_distributions: tuple[str, ...] = ()
    # The layer that takes every such distribution no layer of its own names (the backend version's compat
    # `layers`); "" when those layers take them all.
    libraries_layer: str = ""

    @property
    def names_gfx_targets(self) -> bool:
        """Its GPUs' archs are AMD gfx targets, described by the compatibility data's [gfx] table."""
        return self.arch_prefix == "gfx"

    def index_tag(self, version: str) -> str:
        """The wheel index folder of a backend version: cu130 for CUDA 13.0, rocm7.2 for ROCm 7.2."""
        return self.index_prefix + (version if self.index_keeps_dots else version.replace(".", ""))

    def index_version(self, tag: str) -> str | None:
        """The backend version an index folder or local version names (cu130 -> 13.0, rocm6.2.4 -> 6.2.4);
        None when it is not this vendor's."""
        if not tag.startswith(self.index_prefix):
            return None
        digits = tag.removeprefix(self.index_prefix)
        if self.index_keeps_dots:
            return digits if _DOTTED_VERSION.fullmatch(digits) else None
        found = _UNDOTTED_VERSION.fullmatch(digits)
        return f"{int(found.group(1))}.{found.group(2)}" if found else None

    def compiled_arch_names(self, label_archs: tuple[str, ...]) -> tuple[str, ...]:
        """A label's arch list as torch reports its build: 8.0, 12.0+PTX -> sm_80, sm_120; gfx942 stays."""
        if self.names_gfx_targets:
            return label_archs
        return tuple(self.arch_prefix + arch.removesuffix("+PTX").replace(".", "") for arch in label_archs)

    def label_arch(self, compiled: str) -> str:
        """An arch as torch's build names it, written as labels and compat data write it: sm_120 -> 12.0, sm_75 ->
        7.5; gfx942 stays."""
        if self.names_gfx_targets:
            return compiled
        number = compiled.removeprefix(self.arch_prefix)
        return f"{number[:-1]}.{number[-1]}"

    def environment(self, backend_version: str) -> tuple[tuple[str, str], ...]:
        major = backend_version.split(".")[0]
        return tuple((name, value.format(major=major)) for name, value in self.container_env)

    def backend_label(self, version: str) -> str:
        """CUDA 13.0, ROCm 7.2: how messages name a backend version."""
        return f"{self.backend_display} {version}"


NVIDIA = Vendor(
    name="nvidia",
    display="NVIDIA",
    backend="cuda",
    backend_display="CUDA",
    pci_vendor="0x10de",
    dnn_library="cuDNN",
    collective_library="NCCL",
    missing_arch_error="no kernel image is available for execution on the device",
    gpu_request=True,
    device_nodes=(),
    groups=(),
    security_options=(),
    # nvidia-ctk (NVIDIA Container Toolkit) writes /etc/cdi/nvidia.yaml; toolkit 1.18+ also keeps
    # /var/run/cdi/nvidia.yaml current.
    cdi_kind="nvidia.com/gpu",
    cdi_generate="sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml",
    # NVIDIA/k8s-device-plugin (resource nvidia.com/gpu); NVIDIA/k8s-dra-driver-gpu (DeviceClass gpu.nvidia.com)
    k8s_resource="nvidia.com/gpu",
    dra_device_class="gpu.nvidia.com",
    index_prefix="cu",
    index_keeps_dots=False,
    index_top_minor=9,  # a CUDA minor is one digit in a tag (cu129)
    index_majors_ahead=1,
    torch_version_field="cuda",
    torch_version_display="CUDA",
    gpu_library="torch/lib/libtorch_cuda.so",
    gpu_code_format="fatbin",
    arch_prefix="sm_",
    narrows_arch_code=False,
    builds_from_source=False,
    # What the NVIDIA container runtime reads, as in the official CUDA images. REQUIRE_CUDA names the major
    # only: torch's wheels carry their CUDA runtime and run on any driver of that major (minor version
    # compatibility), so a stricter check would refuse hosts that work.
    container_env=(("NVIDIA_VISIBLE_DEVICES", "all"), ("NVIDIA_DRIVER_CAPABILITIES", "compute,utility"), ("NVIDIA_REQUIRE_CUDA", '"cuda>={major}.0"')),
    host_driver_field="nvidia_driver",
    host_driver_loaded_field="nvidia_driver",
    driver_module="nvidia",
    driver_minimums=True,
    arch_from_kfd=False,
    jit_arch_prefix="compute_",
    k8s_affinity="gfd",
    routing_rank=1,  # a host with as many GPUs of each vendor is routed to NVIDIA, as docs/routing-and-kubernetes.md says
    # Every nvidia-* wheel torch 2.14.1+cu130 requires is py3-none-manylinux (the wheels on this machine's index:
    # nvidia_cudnn_cu13-9.24.0.43-py3-none-manylinux_2_27_x86_64.whl, nvidia_cuda_nvrtc-13.0.88-py3-none-…); the
    # ones compat `layers` does not name (nvrtc, nvshmem, curand, nvjitlink, cupti, the runtime, cufile, nvtx:
    # about 500 MB installed) go together in one layer.
    library_distributions=("nvidia-*",),
    libraries_layer="nvidia-libraries",
)
AMD = Vendor(
    name="amd",
    display="AMD",
    backend="rocm",
    backend_display="ROCm",
    pci_vendor="0x1002",
    dnn_library="MIOpen",
    collective_library="RCCL",
    missing_arch_error="hipErrorNoBinaryForGpu (invalid device function)",
    gpu_request=False,
    device_nodes=("/dev/kfd", "/dev/dri"),
    groups=("video",),
    # ROCm's runtime uses syscalls (e.g. for its memory management) that Docker's default seccomp profile
    # can refuse on some kernels; AMD's container documentation runs with the profile off.
    security_options=("seccomp=unconfined",),
    # amd-ctk (ROCm/container-toolkit) writes /etc/cdi/amd.json; its devices are amd.com/gpu=0.., =all.
    cdi_kind="amd.com/gpu",
    cdi_generate="sudo amd-ctk cdi generate --output=/etc/cdi/amd.json",
    # ROCm/k8s-device-plugin (resource amd.com/gpu); ROCm/k8s-gpu-dra-driver (DeviceClass gpu.amd.com)
    k8s_resource="amd.com/gpu",
    dra_device_class="gpu.amd.com",
    index_prefix="rocm",
    index_keeps_dots=True,
    index_top_minor=99,  # ROCm's versions have jumped (7.2 -> 7.14), so look further ahead
    index_majors_ahead=3,
    torch_version_field="hip",
    torch_version_display="HIP",
    gpu_library="torch/lib/libtorch_hip.so",
    gpu_code_format="offload-bundle",
    arch_prefix="gfx",
    narrows_arch_code=True,
    builds_from_source=True,
    container_env=(),
    host_driver_field="amdgpu_driver",
    host_driver_loaded_field="amdgpu_loaded",
    driver_module="amdgpu",
    driver_minimums=False,
    arch_from_kfd=True,
    jit_arch_prefix="",
    k8s_affinity="amd-labeller",
    routing_rank=0,
    # TheRock's ROCm wheels are py3-none-<platform> (rocm_sdk_core-7.10.0a20251020-py3-none-win_amd64.whl in
    # ROCm/TheRock#1848, rocm_sdk_libraries_gfx120x_all-7.9.0rc20251008-py3-none-linux_x86_64.whl in
    # vladmandic/sdnext#4737); rocm-sdk-core, rocm-sdk-libraries and the device packages all have layers of their
    # own, so no layer gathers the rest.
    library_distributions=("rocm-sdk-*",),
)

VENDORS = (NVIDIA, AMD)
BY_NAME = {vendor.name: vendor for vendor in VENDORS}
BY_BACKEND = {vendor.backend: vendor for vendor in VENDORS}
BY_PCI_ID = {vendor.pci_vendor: vendor for vendor in VENDORS}
BY_CDI_KIND = {vendor.cdi_kind: vendor for vendor in VENDORS}
BACKENDS = tuple(vendor.backend for vendor in VENDORS)
VENDOR_NAMES = tuple(vendor.name for vendor in VENDORS)
GFX_BACKENDS = tuple(vendor.backend for vendor in VENDORS if vendor.names_gfx_targets)  # whose archs the [gfx] table describes
# Shared memory for DataLoader workers and NCCL/RCCL: Docker's default 64 MB makes both fail.
SHM_SIZE = "8g"


def of_backend(backend: str) -> Vendor:
    return BY_BACKEND[backend]


def of_vendor(name: str) -> Vendor:
    return BY_NAME[name]
