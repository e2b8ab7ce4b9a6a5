"""The entrypoint helper on this machine's real CPU torch, and on CUDA/ROCm answers it must tell apart."""

from __future__ import annotations

import torch

from buildkit.image.torch_backend import torch_backend


def test_cpu_build_is_not_usable_and_says_why():
    status = torch_backend()
    assert torch.version.cuda is None and torch.version.hip is None  # this machine carries the CPU wheel
    assert (status.backend, status.usable, status.devices) == ("cpu", False, 0)
    assert "is a CPU build" in status.reason


def test_rocm_is_told_by_hip_not_by_device_availability(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", "7.2.26015", raising=False)
    monkeypatch.setattr(torch.version, "cuda", None)
    status = torch_backend()
    assert (status.backend, status.version, status.usable) == ("rocm", "7.2.26015", False)
    assert "sees no AMD GPU" in status.reason and "/dev/kfd" in status.reason


def test_cuda_build_without_a_gpu(monkeypatch):
    monkeypatch.setattr(torch.version, "hip", None, raising=False)
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    status = torch_backend()
    assert (status.backend, status.usable) == ("cuda", False) and "--gpus all" in status.reason
