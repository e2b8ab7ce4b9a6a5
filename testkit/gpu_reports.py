"""TEST DOUBLES: smoke-test probe reports that claim runs on GPUs this machine does not have.

No AMD or NVIDIA GPU exists here, so a report of kernels that ran on an MI300X or an H100 cannot be
produced for real. These have the exact shape buildkit/image/probe.py prints (probe_version 1), and are
judged by the real buildkit.core.judge; what is invented is only the hardware they claim.
"""

from __future__ import annotations

import copy

from buildkit.image.probe import PROBE_VERSION, THRESHOLDS

# (torch build facts, device name, arch, compiled arch list) per vendor, as those GPUs report them
_CLAIMS = {
    "amd": ({"version": "2.14.1+rocm7.2", "local": "rocm7.2", "cuda": None, "hip": "7.2.26015", "rocm": "7.2.0"},
            "AMD Instinct MI300X", "gfx942", ["gfx90a", "gfx942", "gfx1100"]),
    "nvidia": ({"version": "2.14.1+cu130", "local": "cu130", "cuda": "13.0", "hip": None, "rocm": None},
               "NVIDIA H100 80GB HBM3", "sm_90", ["sm_75", "sm_80", "sm_90", "sm_120", "compute_120"]),
}
_ERRORS = {"matmul_fp32": 3.1e-7, "matmul_bf16": 2.6e-3, "elementwise_fp32": 4.2e-8, "conv2d_fp32": 2.9e-7}


def kernels(failing: str = "") -> list[dict]:
    """The four kernel checks as the probe reports them; `failing` names one whose result is wrong."""
    found = []
    for name, threshold in THRESHOLDS.items():
        error = threshold * 40 if name == failing else _ERRORS[name]
        found.append({"name": name, "threshold": threshold, "error": error, "passed": error <= threshold, "seconds": 0.0042})
    return found


def gpu_report_double(vendor: str, devices: int = 1, failing_kernel: str = "") -> dict:
    """TEST DOUBLE: a probe report claiming kernels ran on `devices` GPUs of the vendor (MI300X / H100)."""
    torch, name, arch, compiled = _CLAIMS[vendor]
    return {
        "probe_version": PROBE_VERSION, "python": "3.11.2", "os": {"id": "debian", "version_id": "12"},
        "distributions": {"torch": torch["version"], "numpy": "2.1.0"},
        "import_seconds": 1.9, "torch": copy.deepcopy(torch), "compiled_archs": list(compiled),
        "dnn": 3004000, "nccl": True, "companions": {},
        "available": True, "kernels_requested": True,
        "devices": [{"index": index, "name": name, "arch": arch, "arch_in_build": True, "seed": 1234 + index,
                     "kernels": kernels(failing_kernel)} for index in range(devices)],
    }
