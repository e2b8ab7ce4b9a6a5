"""Which backend is this torch, and can it use a GPU here? For users' entrypoints.

    from buildkit.image.torch_backend import torch_backend
    status = torch_backend()
    if not status.usable:
        raise SystemExit(f"refusing to train on the CPU: {status.reason}")

The backend comes from how torch was built: torch.version.hip for ROCm (there is no torch.backends.rocm),
torch.version.cuda for CUDA, neither for a CPU build. Only then does device availability say whether that
backend can work on this host. The module needs nothing but torch, so it can be copied into an image.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BackendStatus:
    backend: str  # "cuda", "rocm" or "cpu": what this torch was built for
    version: str  # CUDA or HIP version ("" for cpu)
    devices: int  # GPUs torch can see
    usable: bool  # built for a GPU backend and sees at least one GPU
    reason: str  # one sentence a person can act on


def torch_backend() -> BackendStatus:
    import torch

    hip, cuda = getattr(torch.version, "hip", None), getattr(torch.version, "cuda", None)
    if hip is not None:
        backend, version, vendor = "rocm", str(hip), "AMD"
    elif cuda is not None:
        backend, version, vendor = "cuda", str(cuda), "NVIDIA"
    else:
        return BackendStatus("cpu", "", 0, False, f"torch {torch.__version__} is a CPU build: it cannot use any GPU")
    devices = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if devices:
        return BackendStatus(backend, version, devices, True, f"{backend} {version} build sees {devices} GPU(s)")
    hint = "pass --device /dev/kfd --device /dev/dri and the render group" if backend == "rocm" else "run with --gpus all"
    return BackendStatus(
        backend, version, 0, False,
        f"torch is a {backend} {version} build but sees no {vendor} GPU: this host has none, or the container "
        f"was not given it ({hint}); `buildkit doctor` explains which",
    )
