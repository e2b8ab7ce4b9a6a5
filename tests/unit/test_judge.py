"""The host-side judgment of probe reports (pure), and pair parity."""

from __future__ import annotations

import copy

import pytest

from buildkit.core.labels import ImageIdentity
from buildkit.core.release.judge import CPU_BUILD, judge
from buildkit.core.release.parity import compare

CUDA_LABELS = {"dev.buildkit.backend": "cuda", "dev.buildkit.backend-version": "13.0", "dev.buildkit.gpu-archs": "8.0;9.0;12.0+PTX"}
ROCM_LABELS = {"dev.buildkit.backend": "rocm", "dev.buildkit.backend-version": "7.2", "dev.buildkit.gpu-archs": "gfx90a;gfx942"}


def passed(name, detail, seconds=0.01, **extra):
    return {"name": name, "passed": True, "seconds": seconds, "detail": detail, **extra}


def failed(name, error, seconds=0.01):
    return {"name": name, "passed": False, "seconds": seconds, "error": error}


CPU_CHECKS = [
    passed("torch.compile (CPU)", "inductor, C++: relative error 1.42e-07 <= 1e-04 against eager float64", 21.3),
    passed("OpenMP", "available, 8 threads", 0.0001),
    passed("numpy interop", "numpy 2.1.0: from_numpy / .numpy() round trip", 0.002),
    passed("linalg (CPU)", "svd: relative error 9.22e-07 <= 1e-04", 0.08),
]
NO_COMPILER = "InvalidCxxCompiler: no working C++ compiler (g++) in the image"


def report(cuda=None, hip=None, local="", devices=(), archs=(), companions=None, checks=CPU_CHECKS):
    return {
        "probe_version": 2,
        "python": "3.12.3",
        "os": {"id": "debian", "version_id": "12"},
        "distributions": {"torch": f"2.14.1+{local}" if local else "2.14.1", "numpy": "2.1.0"},
        "torch": {"version": f"2.14.1+{local}" if local else "2.14.1", "local": local, "cuda": cuda, "hip": hip},
        "compiled_archs": list(archs),
        "devices": list(devices),
        "checks": copy.deepcopy(checks),
        "companions": companions if companions is not None else {"torchvision": {"version": f"0.29.1+{local}", "local": local}},
    }


CUDA_OK = report(cuda="13.0", local="cu130", archs=["sm_80", "sm_90", "sm_120", "compute_120"])
ROCM_OK = report(hip="7.2.26015", local="rocm7.2", archs=["gfx90a", "gfx942", "gfx1100"])
KERNELS = [{"name": "matmul_fp32", "passed": True, "error": 1e-6, "threshold": 2e-3, "seconds": 0.1}]
DEVICE_CHECKS = [
    passed("torch.compile (Triton)", "inductor, Triton: relative error 3.0e-07 <= 1e-04 against eager float64", 14.2),
    passed("linalg", "svd: relative error 1.1e-06 <= 1e-04", 0.3),
]
H200 = {"index": 0, "name": "H200", "arch": "sm_90", "arch_in_build": True, "kernels": KERNELS, "checks": DEVICE_CHECKS}
CUDA_LIBRARIES = [
    passed("DNN library", "cuDNN 9.10.2: loaded, a conv2d ran through it", 0.9, library="cuDNN", version="9.10.2"),
    passed("collective library", "NCCL 2.27.3: loaded, an all-reduce ran on cuda:0", 1.2, library="NCCL", version="2.27.3"),
]
ROCM_LIBRARIES = [
    passed("DNN library", "MIOpen 3.5.0: loaded, a conv2d ran through it", 2.0, library="MIOpen", version="3.5.0"),
    passed("collective library", "RCCL 2.26.6: loaded, an all-reduce ran on cuda:0", 1.5, library="RCCL", version="2.26.6"),
]
MI300X = {"index": 0, "name": "AMD Instinct MI300X", "arch": "gfx942", "arch_in_build": True, "kernels": KERNELS, "checks": DEVICE_CHECKS}


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


@pytest.mark.parametrize(
    "labels,probe,expected",
    [
        (ROCM_LABELS, CUDA_OK, "torch is a CUDA build (cuda 13.0) in a ROCm image: it cannot use an AMD GPU and would run on the CPU"),
        (CUDA_LABELS, ROCM_OK, "torch is a ROCm build (hip 7.2.26015) in a CUDA image: it cannot use an NVIDIA GPU"),
        (CUDA_LABELS, report(cuda="12.6", local="cu126", archs=["sm_80", "sm_90", "sm_120"]), "torch.version.cuda is 12.6, the image is labelled CUDA 13.0"),
        (ROCM_LABELS, report(hip="7.1.0", local="rocm7.1"), "torch.version.hip is 7.1.0, the image is labelled ROCm 7.2"),
    ],
)
def test_wrong_backend_builds_fail(labels, probe, expected):
    verdict = judge("img", ImageIdentity.read(labels), probe, "auto", host_has_gpu=False)
    assert not verdict.passed and any(expected in f for f in verdict.failures), verdict.failures


ROCM_10_LABELS = {
    "dev.buildkit.backend": "rocm",
    "dev.buildkit.backend-version": "10.0",
    "dev.buildkit.backend-runtime": "7.15",
    "dev.buildkit.gpu-archs": "gfx942",
}


def test_a_rocm_10_image_is_held_to_the_hip_version_its_torch_reports():
    """ROCm 10.0's torch reports HIP 7.15.26333 (TheRock's HIP kept its own numbering): the image's label says so, and
    a torch that reports 10.0 (or 7.14) is not that build."""
    probe = report(hip="7.15.26333", local="rocm10.0.0", archs=["gfx942"])
    assert judge("img", ImageIdentity.read(ROCM_10_LABELS), probe, "auto", host_has_gpu=False).passed
    for wrong in ("10.0.26333", "7.14.26500"):
        verdict = judge("img", ImageIdentity.read(ROCM_10_LABELS), report(hip=wrong, local="rocm10.0.0", archs=["gfx942"]), "auto", False)
        assert f"backend: torch.version.hip is {wrong}, the image is labelled ROCm 10.0 (whose torch reports hip 7.15)" in verdict.failures


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
    verdict = judge("img", ImageIdentity.read(CUDA_LABELS), {**CUDA_OK, "devices": [H200], "gpu_checks": CUDA_LIBRARIES}, "require", host_has_gpu=True)
    assert verdict.passed and verdict.kernels == "ran on 1 device(s)"
    bad = {**H200, "kernels": [{**KERNELS[0], "passed": False, "error": 0.5}]}
    verdict = judge("img", ImageIdentity.read(CUDA_LABELS), {**CUDA_OK, "devices": [bad], "gpu_checks": CUDA_LIBRARIES}, "require", host_has_gpu=True)
    assert not verdict.passed and "relative error 5.00e-01 > 2e-03" in verdict.failures[0]


def test_gpu_on_host_but_not_in_container_fails():
    verdict = judge("img", ImageIdentity.read(CUDA_LABELS), CUDA_OK, "auto", host_has_gpu=True)
    assert not verdict.passed and "torch sees none in the container" in verdict.failures[0]


def test_crash_timeout_or_garbage_is_a_failure_with_stderr():
    verdict = judge(
        "img",
        ImageIdentity.read(CUDA_LABELS),
        None,
        "auto",
        False,
        stderr_tail="Segmentation fault",
        probe_failure="the probe exited with 139 without a report",
    )
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


# ---- the named checks: what users run (torch.compile, OpenMP, numpy, linalg, the GPU libraries) ----


def test_every_named_cpu_check_is_a_check_with_its_time():
    verdict = judge("img", ImageIdentity.read(CUDA_LABELS), CUDA_OK, "auto", host_has_gpu=False)
    by_name = {c.name: c for c in verdict.checks}
    assert by_name["torch.compile (CPU)"].detail == "inductor, C++: relative error 1.42e-07 <= 1e-04 against eager float64 (21.3 s)"
    assert by_name["OpenMP"].detail == "available, 8 threads (0 ms)"
    assert by_name["linalg (CPU)"].detail == "svd: relative error 9.22e-07 <= 1e-04 (80 ms)"
    assert by_name["numpy interop"].passed


@pytest.mark.parametrize("mode,host_has_gpu", [("auto", False), ("skip", True), ("require", True)])
def test_a_failed_cpu_compile_fails_the_image_in_every_gpu_mode(mode, host_has_gpu):
    checks = [failed("torch.compile (CPU)", NO_COMPILER, 13.07), *CPU_CHECKS[1:]]
    probe = {
        **report(cuda="13.0", local="cu130", archs=["sm_80", "sm_90", "sm_120"], checks=checks),
        "devices": [H200] if host_has_gpu else [],
        "gpu_checks": CUDA_LIBRARIES,
    }
    verdict = judge("img", ImageIdentity.read(CUDA_LABELS), probe, mode, host_has_gpu)
    assert not verdict.passed
    assert verdict.failures == [f"torch.compile (CPU): {NO_COMPILER} (13.1 s)"]


@pytest.mark.parametrize("mode,host_has_gpu", [("auto", False), ("require", True)])
def test_an_image_built_with_compile_false_reports_its_failed_compiles_as_not_required(mode, host_has_gpu):
    """`compile = false` leaves the toolchain out on purpose (label torch-compile=false): the failure is shown,
    not counted; every other check still is."""
    no_triton = failed("torch.compile (Triton)", "Triton found no C compiler (CC, gcc or clang) in the image to build its launcher", 2.0)
    device = {**H200, "checks": [no_triton, DEVICE_CHECKS[1]]}
    checks = [failed("torch.compile (CPU)", NO_COMPILER, 13.07), *CPU_CHECKS[1:]]
    probe = {
        **report(cuda="13.0", local="cu130", archs=["sm_80", "sm_90", "sm_120"], checks=checks),
        "devices": [device] if host_has_gpu else [],
        "gpu_checks": CUDA_LIBRARIES,
    }
    slim = ImageIdentity.read({**CUDA_LABELS, "dev.buildkit.torch-compile": "false"})
    verdict = judge("img", slim, probe, mode, host_has_gpu)
    assert verdict.passed, verdict.failures
    notes = {c.name: c.detail for c in verdict.checks if "torch.compile" in c.name}
    assert notes["torch.compile (CPU)"] == f"not required, the image is built with compile = false: {NO_COMPILER}"
    if host_has_gpu:
        assert notes["device 0 (H200, sm_90) torch.compile (Triton)"].startswith("not required, the image is built with compile = false: Triton")
    broken_linalg = {**probe, "checks": [*checks[:3], failed("linalg (CPU)", "relative error 3.1e-01 > 1e-04")]}
    assert judge("img", slim, broken_linalg, mode, host_has_gpu).failures == ["linalg (CPU): relative error 3.1e-01 > 1e-04 (10 ms)"]
    assert not judge("img", ImageIdentity.read(CUDA_LABELS), probe, mode, host_has_gpu).passed  # the default requires it


def test_missing_python_headers_are_named():
    error = "Python.h missing: the Python headers are not installed (no /usr/include/python3.12/Python.h)"
    probe = report(hip="7.2.26015", local="rocm7.2", archs=["gfx90a", "gfx942"], checks=[failed("torch.compile (CPU)", error, 24.1)])
    assert judge("img", ImageIdentity.read(ROCM_LABELS), probe, "auto", False).failures == [f"torch.compile (CPU): {error} (24.1 s)"]


def test_numpy_not_installed_is_a_note_not_a_failure():
    skipped = {**passed("numpy interop", "skipped (numpy not installed): torch does not require it", 0.0), "skipped": True}
    probe = report(cuda="13.0", local="cu130", archs=["sm_80", "sm_90", "sm_120"], checks=[*CPU_CHECKS[:2], skipped, CPU_CHECKS[3]])
    verdict = judge("img", ImageIdentity.read(CUDA_LABELS), probe, "auto", False)
    assert verdict.passed, verdict.failures
    assert {c.name: c.detail for c in verdict.checks}["numpy interop"].startswith("skipped (numpy not installed)")


def test_openmp_missing_fails():
    probe = report(
        cuda="13.0",
        local="cu130",
        archs=["sm_80", "sm_90", "sm_120"],
        checks=[CPU_CHECKS[0], failed("OpenMP", "torch was built without OpenMP: CPU operators run on one thread")],
    )
    assert judge("img", ImageIdentity.read(CUDA_LABELS), probe, "auto", False).failures == [
        "OpenMP: torch was built without OpenMP: CPU operators run on one thread (10 ms)"
    ]


def test_a_report_without_named_checks_fails():
    probe = {key: value for key, value in CUDA_OK.items() if key != "checks"} | {"probe_version": 1}
    verdict = judge("img", ImageIdentity.read(CUDA_LABELS), probe, "auto", False)
    assert not verdict.passed and verdict.failures[0].startswith("CPU checks: the probe (version 1) tried none of torch.compile")


def test_gpu_checks_count_only_where_the_kernels_ran():
    broken = [failed("DNN library", "torch was built without cuDNN")]
    device = {**H200, "checks": [failed("torch.compile (Triton)", "Triton found no C compiler (CC, gcc or clang) in the image to build its launcher")]}
    probe = {**CUDA_OK, "devices": [device], "gpu_checks": broken}
    assert judge("img", ImageIdentity.read(CUDA_LABELS), probe, "skip", host_has_gpu=True).passed  # --gpu skip: the CPU decides
    assert judge("img", ImageIdentity.read(CUDA_LABELS), {**CUDA_OK, "gpu_checks": broken}, "auto", host_has_gpu=False).passed
    verdict = judge("img", ImageIdentity.read(CUDA_LABELS), probe, "auto", host_has_gpu=True)
    assert verdict.failures == [
        "device 0 (H200, sm_90) torch.compile (Triton): Triton found no C compiler (CC, gcc or clang) in the image to build its launcher (10 ms)",
        "DNN library: torch was built without cuDNN (10 ms)",
    ]


def test_gpu_checks_are_judged_with_their_times():
    verdict = judge("img", ImageIdentity.read(ROCM_LABELS), {**ROCM_OK, "devices": [MI300X], "gpu_checks": ROCM_LIBRARIES}, "require", host_has_gpu=True)
    assert verdict.passed, verdict.failures
    details = {c.name: c.detail for c in verdict.checks}
    assert details["device 0 (AMD Instinct MI300X, gfx942) torch.compile (Triton)"].endswith("against eager float64 (14.2 s)")
    assert details["DNN library"] == "MIOpen 3.5.0: loaded, a conv2d ran through it (2.0 s)"
    assert details["collective library"] == "RCCL 2.26.6: loaded, an all-reduce ran on cuda:0 (1.5 s)"


@pytest.mark.parametrize(
    "labels,probe,device,libraries,expected",
    [
        (
            ROCM_LABELS,
            ROCM_OK,
            MI300X,
            CUDA_LIBRARIES,
            ["DNN library: cuDNN 9.10.2 in a ROCm image, which needs MIOpen", "collective library: NCCL 2.27.3 in a ROCm image, which needs RCCL"],
        ),
        (
            CUDA_LABELS,
            CUDA_OK,
            H200,
            ROCM_LIBRARIES,
            ["DNN library: MIOpen 3.5.0 in a CUDA image, which needs cuDNN", "collective library: RCCL 2.26.6 in a CUDA image, which needs NCCL"],
        ),
    ],
)
def test_the_libraries_must_be_the_backends_own(labels, probe, device, libraries, expected):
    verdict = judge("img", ImageIdentity.read(labels), {**probe, "devices": [device], "gpu_checks": libraries}, "require", host_has_gpu=True)
    assert verdict.failures == expected


def test_kernels_without_library_or_compile_checks_fail():
    device = {key: value for key, value in H200.items() if key != "checks"}
    verdict = judge("img", ImageIdentity.read(CUDA_LABELS), {**CUDA_OK, "devices": [device]}, "require", host_has_gpu=True)
    assert verdict.failures == [
        "device 0 (H200, sm_90) torch.compile: the probe tried no compiled kernel on this device",
        "GPU libraries: the probe did not try the DNN and collective libraries",
    ]


# --- a companion's device code (AMD's whl-next: amd-torchvision-device-<gfx>) ----------------------------------

WHL_NEXT_LABELS = {
    **ROCM_LABELS,
    "dev.buildkit.backend-version": "10.1",
    "dev.buildkit.gpu-archs": "gfx942",
    "dev.buildkit.device-packages": "amd-torch-device-gfx942,amd-torchvision-device-gfx942",
    "dev.buildkit.companion-device-code": "torchvision",
}


def whl_next_report(ops):
    probe = report(
        hip="10.1.26500", local="rocm10.1.0", archs=["gfx942"], companions={"torchvision": {"version": "0.29.0+rocm10.1.0", "local": "rocm10.1.0", "ops": ops}}
    )
    probe["distributions"].update({"amd-torch-device-gfx942": "2.14.0+rocm10.1.0", "amd-torchvision-device-gfx942": "0.29.0+rocm10.1.0"})
    return probe


@pytest.mark.parametrize(
    "ops, passes, detail",
    [
        (True, True, "torchvision 0.29.0+rocm10.1.0: its compiled ops load"),
        (False, False, "its compiled ops do not load; its GPU operators fail (hipErrorNoBinaryForGpu"),
        (None, False, "its compiled ops cannot be asked for (no extension module)"),
    ],
)
def test_an_image_declaring_torchvision_s_device_code_needs_its_ops_to_load(ops, passes, detail):
    verdict = judge("img", ImageIdentity.read(WHL_NEXT_LABELS), whl_next_report(ops), "auto", host_has_gpu=False)
    (check,) = [c for c in verdict.checks if c.name == "torchvision ops"]
    assert check.passed is passes and detail in check.detail and verdict.passed is passes


def test_images_without_companion_device_code_do_not_ask_for_its_ops():
    verdict = judge("img", ImageIdentity.read(ROCM_LABELS), ROCM_OK, "auto", host_has_gpu=False)
    assert verdict.passed and not [c for c in verdict.checks if c.name == "torchvision ops"]


def test_torchvision_s_ops_on_each_gpu_are_judged_with_the_device():
    device = {**MI300X, "checks": [*DEVICE_CHECKS, failed("torchvision ops", "HIP error: invalid device function")]}
    probe = {**whl_next_report(True), "devices": [device], "gpu_checks": ROCM_LIBRARIES}
    verdict = judge("img", ImageIdentity.read(WHL_NEXT_LABELS), probe, "require", host_has_gpu=True)
    assert not verdict.passed and any("torchvision ops" in failure and "invalid device function" in failure for failure in verdict.failures)
