"""TEST DOUBLES: smoke-test probe reports that claim runs on GPUs this machine does not have.

No AMD or NVIDIA GPU exists here, so a report of kernels that ran on an MI300X or an H100 cannot be
produced for real. These have the exact shape buildkit/image/probe.py prints (its current version), and are
judged by the real buildkit.core.release.judge; what is invented is only the hardware they claim.
"""

from __future__ import annotations

import copy
from typing import Any

from buildkit.image.probe import PROBE_VERSION, THRESHOLDS
from testkit.builds import CUDA_13_ARCHS, ROCM_7_2_ARCHS

# (torch build facts, device name, arch, compiled arch list) per vendor, as those GPUs report them; the
# compiled lists are the official wheels' (ROCm 7.2, CUDA 13.0), as the real torch reports them
_CLAIMS = {
    "amd": (
        {"version": "2.14.1+rocm7.2", "local": "rocm7.2", "cuda": None, "hip": "7.2.26015", "rocm": "7.2.0"},
        "AMD Instinct MI300X",
        "gfx942",
        ROCM_7_2_ARCHS,
    ),
    "nvidia": ({"version": "2.14.1+cu130", "local": "cu130", "cuda": "13.0", "hip": None, "rocm": None}, "NVIDIA H100 80GB HBM3", "sm_90", CUDA_13_ARCHS),
}
_ERRORS = {"matmul_fp32": 3.1e-7, "matmul_bf16": 2.6e-3, "elementwise_fp32": 4.2e-8, "conv2d_fp32": 2.9e-7}
_LIBRARIES = {"amd": (("MIOpen", "3.5.0"), ("RCCL", "2.26.6")), "nvidia": (("cuDNN", "9.10.2"), ("NCCL", "2.27.3"))}


def _passed(name: str, detail: str, seconds: float, **extra: object) -> dict[str, object]:
    return {"name": name, "passed": True, "seconds": seconds, "detail": detail, **extra}


def kernels(failing: str = "") -> list[dict[str, object]]:
    """The four kernel checks as the probe reports them; `failing` names one whose result is wrong."""
    found = []
    for name, error in _ERRORS.items():
        threshold = THRESHOLDS[name]
        error = threshold * 40 if name == failing else error
        found.append({"name": name, "threshold": threshold, "error": error, "passed": error <= threshold, "seconds": 0.0042})
    return found


CPU_CHECKS = [
    _passed("torch.compile (CPU)", "inductor, C++: relative error 1.42e-07 <= 1e-04 against eager float64", 21.3),
    _passed("OpenMP", "available, 8 threads", 0.0001),
    _passed("numpy interop", "numpy 2.1.0: from_numpy / .numpy() round trip", 0.002),
    _passed("linalg (CPU)", "svd: relative error 9.22e-07 <= 1e-04", 0.08),
]
DEVICE_CHECKS = [
    _passed("torch.compile (Triton)", "inductor, Triton: relative error 3.0e-07 <= 1e-04 against eager float64", 14.2),
    _passed("linalg", "svd: relative error 1.1e-06 <= 1e-04", 0.3),
]


def library_checks(vendor: str) -> list[dict[str, object]]:
    (dnn, dnn_version), (collective, collective_version) = _LIBRARIES[vendor]
    return [
        _passed("DNN library", f"{dnn} {dnn_version}: loaded, a conv2d ran through it", 0.9, library=dnn, version=dnn_version),
        _passed(
            "collective library", f"{collective} {collective_version}: loaded, an all-reduce ran on cuda:0", 1.2, library=collective, version=collective_version
        ),
    ]


def gpu_report_double(vendor: str, devices: int = 1, failing_kernel: str = "") -> dict[str, Any]:
    """TEST DOUBLE: a probe report claiming kernels ran on `devices` GPUs of the vendor (MI300X / H100)."""
    torch, name, arch, compiled = _CLAIMS[vendor]
    return {
        "probe_version": PROBE_VERSION,
        "python": "3.11.2",
        "os": {"id": "debian", "version_id": "12"},
        "distributions": {"torch": torch["version"], "numpy": "2.1.0"},
        "import_seconds": 1.9,
        "torch": copy.deepcopy(torch),
        "compiled_archs": list(compiled),
        "dnn": 3004000,
        "nccl": True,
        "companions": {},
        "available": True,
        "kernels_requested": True,
        "checks": copy.deepcopy(CPU_CHECKS),
        "gpu_checks": library_checks(vendor),
        "devices": [
            {
                "index": index,
                "name": name,
                "arch": arch,
                "arch_in_build": True,
                "seed": 1234 + index,
                "kernels": kernels(failing_kernel),
                "checks": copy.deepcopy(DEVICE_CHECKS),
            }
            for index in range(devices)
        ],
    }
