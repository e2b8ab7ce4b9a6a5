"""The host's GPUs as the kernel exposes them, read from a configurable root (tests point it at a tree)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class GpuAccess:
    """What a container needs from this host to use a vendor's GPU."""

    nvidia: bool
    amd: bool
    amd_device_gid: int | None  # group owning /dev/kfd or /dev/dri/renderD*: added to the container

    def has(self, backend: str) -> bool:
        return self.nvidia if backend == "cuda" else self.amd


def gpu_access(root: Path = Path("/")) -> GpuAccess:
    nvidia = (root / "proc/driver/nvidia/version").exists() or (root / "dev/nvidiactl").exists()
    kfd = root / "dev/kfd"
    amd = kfd.exists()
    gid = None
    for node in [kfd, *sorted((root / "dev/dri").glob("renderD*"))]:
        try:
            gid = os.stat(node).st_gid
            break
        except OSError:
            continue
    return GpuAccess(nvidia=nvidia, amd=amd, amd_device_gid=gid if amd else None)


def container_gpu_options(backend: str, access: GpuAccess) -> dict:
    """docker SDK run options that hand the vendor's GPUs to a container (none when the host has none).

    NVIDIA: --gpus all. AMD: /dev/kfd and /dev/dri, the video group and the group owning the device
    nodes (often `render`, whose gid differs between distributions). Both: shared memory for DataLoader
    workers and NCCL/RCCL.
    """
    import docker.types

    options: dict = {"shm_size": "8g"}
    if backend == "cuda" and access.nvidia:
        options["device_requests"] = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if backend == "rocm" and access.amd:
        options["devices"] = ["/dev/kfd:/dev/kfd:rwm", "/dev/dri:/dev/dri:rwm"]
        options["group_add"] = ["video"] + ([str(access.amd_device_gid)] if access.amd_device_gid is not None else [])
        options["security_opt"] = ["seccomp=unconfined"]
    return options
