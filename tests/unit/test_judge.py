"""The host-side judgment of probe reports (pure), and pair parity."""

from __future__ import annotations

import copy

import pytest

from buildkit.core.labels import ImageIdentity
from buildkit.core.judge import CPU_BUILD, judge
from buildkit.core.parity import compare

CUDA_LABELS = {"dev.buildkit.backend": "cuda", "dev.buildkit.backend-version": "13.0", "dev.buildkit.gpu-archs": "8.0;9.0;12.0+PTX"}
ROCM_LABELS = {"dev.buildkit.backend": "rocm", "dev.buildkit.backend-version": "7.2", "dev.buildkit.gpu-archs": "gfx90a;gfx942"}


def report(cuda=None, hip=None, local="", devices=(), archs=(), companions=None):
    return {
        "probe_version": 1, "python": "3.12.3", "os": {"id": "debian", "version_id": "12"},
        "distributions": {"torch": f"2.14.1+{local}" if local else "2.14.1", "numpy": "2.1.0"},
        "torch": {"version": f"2.14.1+{local}" if local else "2.14.1", "local": local, "cuda": cuda, "hip": hip},
        "compiled_archs": list(archs), "devices": list(devices),
        "companions": companions if companions is not None else {"torchvision": {"version": f"0.29.1+{local}", "local": local}},
    }


CUDA_OK = report(cuda="13.0", local="cu130", archs=["sm_80", "sm_90", "sm_120", "compute_120"])
ROCM_OK = report(hip="7.2.26015", local="rocm7.2", archs=["gfx90a", "gfx942", "gfx1100"])
KERNELS = [{"name": "matmul_fp32", "passed": True, "error": 1e-6, "threshold": 2e-3, "seconds": 0.1}]


def test_cuda_image_passes_without_gpu_and_says_kernels_were_skipped():
    verdict = judge("img", ImageIdentity.read(CUDA_LABELS), CUDA_OK, "auto", host_has_gpu=False)
    assert verdict.passed, verdict.failures
    assert verdict.kernels == "skipped (no NVIDIA GPU on this host)"


def test_require_mode_fails_without_gpu():
    verdict = judge("img", ImageIdentity.read(ROCM_LABELS), ROCM_OK, "require", host_has_gpu=False)
    assert not verdict.passed
    assert "gpu: --gpu require: no AMD GPU on this host" in verdict.failures


def test_cpu_torch_in_a_gpu_image_fails_with_that_sentence():
    verdict = judge("img", ImageIdentity.read(CUDA_LABELS), report(local="cpu"), "auto", host_has_gpu=False)
    assert not verdict.passed
    assert CPU_BUILD in verdict.failures[0]


@pytest.mark.parametrize("labels,probe,expected", [
    (ROCM_LABELS, CUDA_OK, "torch is a CUDA build (13.0) in a ROCm image"),
    (CUDA_LABELS, ROCM_OK, "torch is a ROCm build (hip 7.2.26015) in a CUDA image"),
    (CUDA_LABELS, report(cuda="12.6", local="cu126", archs=["sm_80", "sm_90", "sm_120"]), "torch.version.cuda is 12.6, the image is labelled CUDA 13.0"),
    (ROCM_LABELS, report(hip="7.1.0", local="rocm7.1"), "torch.version.hip is 7.1.0, the image is labelled ROCm 7.2"),
])
def test_wrong_backend_builds_fail(labels, probe, expected):
    verdict = judge("img", ImageIdentity.read(labels), probe, "auto", host_has_gpu=False)
    assert not verdict.passed and any(expected in f for f in verdict.failures), verdict.failures


def test_companion_of_another_backend_fails():
    probe = copy.deepcopy(ROCM_OK)
    probe["companions"]["torchvision"] = {"version": "0.29.1", "local": ""}  # PyPI's CUDA torchvision
    verdict = judge("img", ImageIdentity.read(ROCM_LABELS), probe, "auto", host_has_gpu=False)
    assert verdict.failures == ["companion torchvision: torchvision 0.29.1 is not the rocm7.2 build torch is"]


def test_declared_arch_missing_from_the_build_fails():
    labels = {**ROCM_LABELS, "dev.buildkit.gpu-archs": "gfx942;gfx950"}
    verdict = judge("img", ImageIdentity.read(labels), ROCM_OK, "auto", host_has_gpu=False)
    assert "arch list: the image declares gfx950 but torch was built for gfx90a gfx942 gfx1100" in verdict.failures


def test_gpu_not_in_the_compiled_list_is_the_field_failure():
    device = {"index": 0, "name": "Radeon RX 7900 XTX", "arch": "gfx1101", "arch_in_build": False, "kernels": []}
    verdict = judge("img", ImageIdentity.read(ROCM_LABELS), {**ROCM_OK, "devices": [device]}, "auto", host_has_gpu=True)
    assert not verdict.passed and "hipErrorNoBinaryForGpu" in verdict.failures[0]


def test_kernels_on_a_gpu_are_judged():
    good = {"index": 0, "name": "H200", "arch": "sm_90", "arch_in_build": True, "kernels": KERNELS}
    verdict = judge("img", ImageIdentity.read(CUDA_LABELS), {**CUDA_OK, "devices": [good]}, "require", host_has_gpu=True)
    assert verdict.passed and verdict.kernels == "ran on 1 device(s)"
    bad = {**good, "kernels": [{**KERNELS[0], "passed": False, "error": 0.5}]}
    verdict = judge("img", ImageIdentity.read(CUDA_LABELS), {**CUDA_OK, "devices": [bad]}, "require", host_has_gpu=True)
    assert not verdict.passed and "relative error 5.00e-01 > 2e-03" in verdict.failures[0]


def test_gpu_on_host_but_not_in_container_fails():
    verdict = judge("img", ImageIdentity.read(CUDA_LABELS), CUDA_OK, "auto", host_has_gpu=True)
    assert not verdict.passed and "torch sees none in the container" in verdict.failures[0]


def test_crash_timeout_or_garbage_is_a_failure_with_stderr():
    verdict = judge("img", ImageIdentity.read(CUDA_LABELS), None, "auto", False, stderr_tail="Segmentation fault", probe_failure="the probe exited with 139 without a report")
    assert not verdict.passed and "Segmentation fault" in verdict.failures[0] and "139" in verdict.failures[0]


def test_import_error_is_reported():
    verdict = judge("img", ImageIdentity.read(CUDA_LABELS), {"probe_version": 1, "import_error": "ImportError: libcudart.so.13"}, "auto", False)
    assert verdict.failures == ["import torch: ImportError: libcudart.so.13"]


def test_unlabelled_image_cannot_be_judged():
    verdict = judge("img", ImageIdentity.read({}), CUDA_OK, "auto", False)
    assert not verdict.passed and "not a buildkit image" in verdict.failures[0]


def test_parity_ignores_local_tags_and_vendor_runtimes_only():
    cuda = {**CUDA_OK, "distributions": {"torch": "2.14.1+cu130", "numpy": "2.1.0", "nvidia-cublas": "13.1", "triton": "3.8.0"}}
    rocm = {**ROCM_OK, "distributions": {"torch": "2.14.1+rocm7.2", "numpy": "2.1.0", "rocm-sdk-core": "7.14", "pytorch-triton-rocm": "3.8.0"}}
    vendor = ["nvidia-*", "triton", "pytorch-triton-rocm", "rocm-sdk-*"]
    assert compare("a", cuda, "b", rocm, vendor).passed
    rocm["distributions"]["einops"] = "0.8.1"
    rocm["distributions"]["numpy"] = "2.2.0"
    result = compare("a", cuda, "b", rocm, vendor)
    assert result.differences == ("einops 0.8.1 only in b", "numpy: 2.1.0 in a vs 2.2.0 in b")
    assert compare("a", cuda, "b", {**rocm, "python": "3.11.9"}, vendor).differences[0] == "Python: 3.12.3 vs 3.11.9"
