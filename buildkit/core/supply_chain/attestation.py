"""The GPU smoke test as an attestation: the predicate built from a Verdict, and the judge of a verified one.

Predicate type GPU_TEST_TYPE, version 1 (docs/supply-chain.md documents every field). It carries what the
smoke test saw, so an operator can tell what was tested where without trusting that a CI job ran: the
verdict and every check, the torch build, each device (model, arch) with each kernel's error and time,
the host (runner, GPU driver), the date, and the identity the image's labels declare.

Pure: the caller supplies the clock, the host name and the driver version (SmokeRun).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from buildkit.core.vendors import BY_NAME, VENDORS, of_vendor

if TYPE_CHECKING:
    from buildkit.core.host.facts import HostFacts
    from buildkit.core.labels import ImageIdentity
    from buildkit.core.release.judge import Verdict

# A URI of our own label namespace (dev.buildkit. labels): stable, versioned in its path. A change that
# older readers would misjudge gets /v2; fields may be added to v1.
GPU_TEST_TYPE = "https://buildkit.dev/attestations/gpu-smoke/v1"
PREDICATE_VERSION = 1
_KERNEL_FIELDS = ("name", "passed", "error", "threshold", "seconds", "failure")


@dataclass(frozen=True)
class SmokeRun:
    """Where and when the smoke test ran: facts from the world, handed in by the caller."""

    tested_at: str  # UTC, 2026-11-30T02:00:00Z
    runner: str  # CI runner name, else the host name
    gpu_mode: str  # auto | require | skip
    driver: str = ""  # e.g. "nvidia 580.65.06" or "amdgpu 6.12.12"
    gpus: tuple[str, ...] = ()  # the host's GPU models as the host sees them


def host_driver(host: HostFacts, vendor: str) -> str:
    """The driver that served the vendor's GPUs, as the predicate records it."""
    record = of_vendor(vendor)
    if not getattr(host, record.host_driver_loaded_field):
        return ""
    return f"{record.driver_module} {getattr(host, record.host_driver_field) or '(built into the kernel)'}"


def gpu_predicate(verdict: Verdict, identity: ImageIdentity, run: SmokeRun) -> dict[str, Any]:
    """The predicate of a smoke test's verdict: JSON-ready, keys in a stable order."""
    report = verdict.report or {}
    devices = []
    for device in report.get("devices") or []:
        entry = {key: device[key] for key in ("index", "name", "arch", "arch_in_build", "failure") if key in device}
        entry["kernels"] = [{key: kernel[key] for key in _KERNEL_FIELDS if key in kernel} for kernel in device.get("kernels") or []]
        devices.append(entry)
    return {
        "predicate_version": PREDICATE_VERSION,
        "verdict": {"passed": verdict.passed, "kernels": verdict.kernels, "failures": verdict.failures},
        "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail} for c in verdict.checks],
        "image": {
            "reference": verdict.image,
            "target": identity.target,
            "vendor": identity.vendor.name,
            "backend": identity.backend,
            "backend_version": identity.backend_version,
            "torch": identity.torch,
            "python": identity.python,
            "flavor": identity.flavor,
            "gpu_archs": list(identity.archs),
            "pair": identity.pair,
            "fingerprint": identity.fingerprint,
        },
        "torch": dict(report.get("torch") or {}),
        "compiled_archs": list(report.get("compiled_archs") or []),
        "devices": devices,
        "host": {"runner": run.runner, "driver": run.driver, "gpus": list(run.gpus)},
        "tested_at": run.tested_at,
        "gpu_mode": run.gpu_mode,
        "probe_version": report.get("probe_version"),
    }


def _device_vendor(arch: str) -> str:
    """gfx* archs are AMD's, sm_* NVIDIA's: how torch names them (gcnArchName, compute capability)."""
    return next((vendor.name for vendor in VENDORS if arch.startswith(vendor.arch_prefix)), "")


def _arch_name(vendor: str, arch: str) -> str:
    """verify --tested-arch as the probe reports it: gfx942 stays, NVIDIA's 9.0 becomes sm_90."""
    record = of_vendor(vendor)
    return arch if arch.startswith(record.arch_prefix) else record.compiled_arch_names((arch,))[0]


def _ran_kernels(device: Mapping[str, Any]) -> bool:
    kernels = device.get("kernels") or []
    return bool(kernels) and "failure" not in device and all(isinstance(k, Mapping) and k.get("passed") is True for k in kernels)


def passing_gpu_test(predicate: Any, vendor: str, tested_arch: str | None = None) -> tuple[bool, str]:
    """(ok, why): ok only when the smoke test passed every check and its kernels ran on at least one GPU
    of the image's vendor (with tested_arch: on a GPU of that arch). A CPU-only run that passed is not a GPU test."""
    display = BY_NAME[vendor].display if vendor in BY_NAME else vendor
    if not isinstance(predicate, Mapping) or not isinstance(predicate.get("verdict"), Mapping):
        return False, "not a buildkit GPU test predicate"
    if predicate.get("predicate_version") != PREDICATE_VERSION:
        return False, (
            f"GPU test predicate version {predicate.get('predicate_version')!r} is not one this buildkit reads ({PREDICATE_VERSION}); upgrade buildkit"
        )
    tested_vendor = (predicate.get("image") or {}).get("vendor")
    if tested_vendor != vendor:
        return False, f"the GPU test is for a {tested_vendor or 'unknown'} image, this image is {display}'s"
    checks = [c for c in predicate.get("checks") or [] if isinstance(c, Mapping)]
    failed = [f"{c.get('name')}: {c.get('detail')}" for c in checks if c.get("passed") is not True]
    if predicate["verdict"].get("passed") is not True or failed or not checks:
        return False, f"the smoke test failed ({failed[0] if failed else 'no passing checks recorded'})"
    devices = [d for d in predicate.get("devices") or [] if isinstance(d, Mapping)]
    ran = [d for d in devices if _ran_kernels(d) and _device_vendor(str(d.get("arch", ""))) == vendor]
    if not ran:
        return False, f"kernels did not run on any {display} GPU (kernels: {predicate['verdict'].get('kernels', 'unknown')})"
    if tested_arch:
        wanted = _arch_name(vendor, tested_arch)
        if not any(d.get("arch") == wanted for d in ran):
            seen = ", ".join(sorted({str(d.get("arch")) for d in ran}))
            return False, f"kernels ran on {seen}, not on {wanted}"
    return True, gpu_test_summary(predicate)


def gpu_test_summary(predicate: Mapping[str, Any]) -> str:
    """One line: GPU models and archs, driver, torch build, date, runner."""
    counts: dict[str, int] = {}
    for device in predicate.get("devices") or []:
        if isinstance(device, Mapping) and _ran_kernels(device):
            model = f"{device.get('name', '?')} ({device.get('arch', '?')})"
            counts[model] = counts.get(model, 0) + 1
    gpus = ", ".join(f"{count} x {model}" if count > 1 else model for model, count in counts.items()) or "no GPU"
    host = predicate.get("host") or {}
    torch = predicate.get("torch") or {}
    build = next((f"{v.torch_version_display} {torch[v.torch_version_field]}" for v in VENDORS if torch.get(v.torch_version_field)), "CPU")
    driver = host.get("driver") or "driver unknown"
    return (
        f"{gpus}; {driver}; torch {torch.get('version', '?')} ({build}); "
        f"{predicate.get('tested_at') or 'date unknown'} on {host.get('runner') or 'an unnamed runner'}"
    )
