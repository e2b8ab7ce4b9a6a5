"""What buildkit knows about each GPU vendor, in one frozen record per vendor.

Names, the wheel-index layout of its backend, the PCI vendor id, the libraries its torch build loads,
the error a missing GPU arch produces, and how a container is given its GPUs. The `docker run` flags,
the docker SDK arguments of the smoke test and `doctor`'s advice are all derived from these records.
"""

from __future__ import annotations

from dataclasses import dataclass


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

    def index_tag(self, version: str) -> str:
        """The wheel index folder of a backend version: cu130 for CUDA 13.0, rocm7.2 for ROCm 7.2."""
        return "cu" + version.replace(".", "") if self.backend == "cuda" else "rocm" + version

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
)

VENDORS = (NVIDIA, AMD)
BY_NAME = {vendor.name: vendor for vendor in VENDORS}
BY_BACKEND = {vendor.backend: vendor for vendor in VENDORS}
BY_PCI_ID = {vendor.pci_vendor: vendor for vendor in VENDORS}
BY_CDI_KIND = {vendor.cdi_kind: vendor for vendor in VENDORS}
BACKENDS = tuple(vendor.backend for vendor in VENDORS)
VENDOR_NAMES = tuple(vendor.name for vendor in VENDORS)
# Shared memory for DataLoader workers and NCCL/RCCL: Docker's default 64 MB makes both fail.
SHM_SIZE = "8g"


def of_backend(backend: str) -> Vendor:
    return BY_BACKEND[backend]


def of_vendor(name: str) -> Vendor:
    return BY_NAME[name]
