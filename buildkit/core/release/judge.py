"""Judging a probe's report against what the image says it is (its labels). Pure: no I/O.

The expected backend comes from the labels, never from torch.cuda.is_available(): a ROCm torch also
answers True there, and a CUDA torch on an AMD host answers False and runs on the CPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from buildkit.core import labels
from buildkit.core.vendors import VENDORS, Vendor

if TYPE_CHECKING:
    from collections.abc import Mapping

    from buildkit.core.labels import ImageIdentity

GPU_MODES = ("auto", "require", "skip")
CPU_BUILD = "torch is a CPU build: this image would run on the CPU"


# The probe's library checks, by name, and which library of the vendor's each must find. A ROCm torch
# answers for MIOpen through torch.backends.cudnn and for RCCL through torch.cuda.nccl (buildkit/image/probe.py).
def _wanted_library(vendor: Vendor, check: str) -> str | None:
    return {"DNN library": vendor.dnn_library, "collective library": vendor.collective_library}.get(check)


@dataclass(frozen=True)
class Check:
    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class Verdict:
    image: str
    passed: bool
    checks: tuple[Check, ...]
    kernels: str  # "ran on N device(s)" | "skipped (...)" | "failed"
    torch: str = ""
    report: Mapping[str, Any] = field(default_factory=dict)
    reused: bool = False  # judged from the recorded report of the same image, not a new probe run

    @property
    def failures(self) -> list[str]:
        return [f"{c.name}: {c.detail}" for c in self.checks if not c.passed]


def _minor(version: str | None) -> str:
    return ".".join((version or "").split(".")[:2])


def _backend_checks(expect: ImageIdentity, torch: Mapping[str, Any]) -> list[Check]:
    """torch.version names the build: its vendor's field set (cuda, hip) and the other's unset."""
    builds = {vendor: torch.get(vendor.torch_version_field) for vendor in VENDORS}
    if all(version is None for version in builds.values()):
        return [Check("backend", False, f"{CPU_BUILD} (torch {torch.get('version')})")]
    vendor = expect.vendor
    for other, version in builds.items():
        if other is not vendor and version is not None:
            return [
                Check(
                    "backend",
                    False,
                    f"torch is a {other.backend_display} build ({other.torch_version_field} {version}) in a "
                    f"{vendor.backend_display} image: it cannot use an {vendor.display} GPU and would run on the CPU",
                )
            ]
    built = builds[vendor]
    if _minor(built) != _minor(expect.reported_backend_version):
        reports = f" (whose torch reports {vendor.torch_version_field} {expect.backend_runtime})" if expect.backend_runtime else ""
        return [
            Check(
                "backend",
                False,
                f"torch.version.{vendor.torch_version_field} is {built}, the image is labelled {vendor.backend_label(expect.backend_version)}{reports}",
            )
        ]
    others = ", ".join(other.torch_version_field.upper() for other in VENDORS if other is not vendor)
    return [Check("backend", True, f"{vendor.backend_display} ({vendor.torch_version_field} {built}), no {others}")]


def _companion_checks(report: Mapping[str, Any]) -> list[Check]:
    local = report["torch"].get("local", "")
    checks = []
    for name, info in sorted((report.get("companions") or {}).items()):
        same = info.get("local", "") == local
        detail = f"{name} {info.get('version')}" + ("" if same else f" is not the {local or 'default'} build torch is")
        checks.append(Check(f"companion {name}", same, detail))
    return checks


def _companion_ops_checks(expect: ImageIdentity, report: Mapping[str, Any]) -> list[Check]:
    """A companion whose device code the image carries (torchvision's amd-torchvision-device-<gfx>) must load its
    compiled ops: without them its GPU operators fail on every arch, whatever device packages are there. On a GPU,
    its ops then run on each device (the probe's per-device "torchvision ops" check)."""
    checks = []
    for name in expect.companion_device_code:
        info = (report.get("companions") or {}).get(name)
        if info is None:
            checks.append(Check(f"{name} ops", False, f"{name} is not installed, yet the image declares its device code"))
        elif info.get("ops") is True:
            checks.append(Check(f"{name} ops", True, f"{name} {info.get('version')}: its compiled ops load"))
        else:
            why = "do not load" if info.get("ops") is False else "cannot be asked for (no extension module)"
            checks.append(
                Check(
                    f"{name} ops", False, f"{name} {info.get('version')}: its compiled ops {why}; its GPU operators fail ({expect.vendor.missing_arch_error})"
                )
            )
    return checks


def _arch_checks(expect: ImageIdentity, report: Mapping[str, Any]) -> list[Check]:
    compiled = report.get("compiled_archs") or []
    if not compiled:
        return []  # not knowable without a device on some builds; the device check below covers GPUs
    vendor = expect.vendor
    declared = vendor.compiled_arch_names(expect.archs)
    # an arch the build JIT-compiles for (PTX: compute_120) serves it too
    jit = [vendor.jit_arch_prefix + a[len(vendor.arch_prefix) :] for a in declared] if vendor.jit_arch_prefix else [None] * len(declared)
    missing = [a for a, jitted in zip(declared, jit) if a not in compiled and jitted not in compiled]
    if missing:
        return [Check("arch list", False, f"the image declares {', '.join(missing)} but torch was built for {' '.join(compiled)}")]
    return [Check("arch list", True, f"{len(declared)} declared archs are in the build")]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _device_code_checks(expect: ImageIdentity, report: Mapping[str, Any]) -> list[Check]:
    """A thin ROCm image carries exactly the device code it declares: a declared gfx target's package
    missing means the ROCm libraries' kernels fail there (hipErrorNoBinaryForGpu); an undeclared one is
    gigabytes the image was meant to leave out."""
    if not expect.device_packages:
        return []
    installed = {_canonical(name) for name in report.get("distributions") or {}}
    declared = {_canonical(name) for name in expect.device_packages}
    prefixes = {name[: name.index("gfx")] for name in declared if "gfx" in name}
    missing = sorted(declared - installed)
    extra = sorted(name for name in installed - declared if any(name.startswith(prefix) for prefix in prefixes))
    parts = []
    if missing:
        parts.append(f"{', '.join(missing)} missing ({expect.vendor.missing_arch_error} on those GPUs)")
    if extra:
        parts.append(f"{', '.join(extra)} installed but not declared")
    if parts:
        return [Check("device code", False, "; ".join(parts))]
    return [Check("device code", True, f"{len(declared)} device packages, exactly the declared ones")]


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "time unknown"
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def named_check(entry: Mapping[str, Any], expect: ImageIdentity, label: str = "") -> Check:
    """One of the probe's named checks, its time in the detail: what passed, or what a user would hit. An
    image built with `compile = false` left the toolchain out on purpose: its failed torch.compile is
    reported, not counted."""
    passed = bool(entry.get("passed"))
    text = entry.get("detail") if passed else entry.get("error") or entry.get("detail") or "failed without a message"
    name = f"{label} {entry.get('name')}" if label else str(entry.get("name"))
    if not passed and not expect.compile and str(entry.get("name", "")).startswith("torch.compile"):
        return Check(name, True, f"not required, the image is built with compile = false: {text}")
    return Check(name, passed, f"{text} ({_duration(entry.get('seconds'))})")


def _cpu_checks(expect: ImageIdentity, report: Mapping[str, Any]) -> list[Check]:
    """torch.compile, OpenMP, numpy, linalg on the CPU: they need no GPU, so they count in every mode."""
    entries = report.get("checks")
    if entries is None:
        return [Check("CPU checks", False, f"the probe (version {report.get('probe_version')}) tried none of torch.compile, OpenMP, numpy interop and linalg")]
    return [named_check(entry, expect) for entry in entries]


def _library_checks(expect: ImageIdentity, report: Mapping[str, Any]) -> list[Check]:
    """The DNN and collective libraries: they must load, and be the image's backend's."""
    entries = report.get("gpu_checks")
    if entries is None:
        return [Check("GPU libraries", False, "the probe did not try the DNN and collective libraries")]
    checks = []
    for entry in entries:
        check = named_check(entry, expect)
        wanted, found = _wanted_library(expect.vendor, entry.get("name")), entry.get("library")
        if check.passed and wanted and found != wanted:
            check = Check(check.name, False, f"{found} {entry.get('version')} in a {expect.vendor.backend_display} image, which needs {wanted}")
        checks.append(check)
    return checks


def _device_checks(expect: ImageIdentity, report: Mapping[str, Any], kernels_ran: bool) -> tuple[list[Check], int]:
    checks = []
    for device in report.get("devices") or []:
        label = f"device {device.get('index')} ({device.get('name', '?')}, {device.get('arch', '?')})"
        if "failure" in device:
            checks.append(Check(label, False, device["failure"]))
            continue
        if not device.get("arch_in_build"):
            checks.append(Check(label, False, f"{device.get('arch')} is not in the compiled arch list ({expect.vendor.missing_arch_error})"))
        for kernel in device.get("kernels") or []:
            if kernel.get("passed"):
                detail = f"relative error {kernel['error']:.2e} <= {kernel['threshold']:.0e} in {kernel['seconds']} s"
            else:
                detail = kernel.get("failure") or f"relative error {kernel.get('error', float('nan')):.2e} > {kernel['threshold']:.0e}"
            checks.append(Check(f"{label} {kernel['name']}", bool(kernel.get("passed")), detail))
        if kernels_ran:
            if "checks" not in device:
                checks.append(Check(f"{label} torch.compile", False, "the probe tried no compiled kernel on this device"))
            checks += [named_check(entry, expect, label) for entry in device.get("checks") or []]
    return checks, len(report.get("devices") or [])


def judge(
    image: str,
    expect: ImageIdentity | None,
    report: Mapping[str, Any] | None,
    mode: str,
    host_has_gpu: bool,
    stderr_tail: str = "",
    probe_failure: str = "",
) -> Verdict:
    """Pass or fail, with every check that decided it."""
    if expect is None:
        missing = f"no {labels.BACKEND} / {labels.BACKEND_VERSION} labels: not a buildkit image"
        return Verdict(image, False, (Check("labels", False, missing),), "skipped (no labels)")
    vendor = expect.vendor.display
    if report is None:
        detail = probe_failure or "the probe printed no JSON"
        return Verdict(image, False, (Check("probe", False, f"{detail}; stderr: {stderr_tail.strip()[-800:] or '(empty)'}"),), "failed")
    if "import_error" in report:
        return Verdict(image, False, (Check("import torch", False, report["import_error"]),), "failed", report=report)
    checks = _backend_checks(expect, report["torch"]) + _companion_checks(report) + _arch_checks(expect, report)
    checks += _device_code_checks(expect, report) + _companion_ops_checks(expect, report)
    checks += _cpu_checks(expect, report)
    # GPU checks count only where the kernels ran: --gpu auto on a host without the vendor's GPU judges
    # the image by what runs on the CPU.
    kernels_ran = mode != "skip" and host_has_gpu and bool(report.get("devices"))
    device_checks, devices = _device_checks(expect, report, kernels_ran)
    checks += device_checks
    if kernels_ran:
        checks += _library_checks(expect, report)
    if mode == "skip":
        kernels = "skipped (--gpu skip)"
    elif not host_has_gpu:
        kernels = f"skipped (no {vendor} GPU on this host)"
        if mode == "require":
            checks.append(Check("gpu", False, f"--gpu require: no {vendor} GPU on this host"))
    elif not devices:
        kernels = "failed"
        checks.append(Check("gpu", False, f"the host has a {vendor} GPU but torch sees none in the container (torch.cuda.is_available() is False)"))
    else:
        kernels = f"ran on {devices} device(s)"
    passed = all(check.passed for check in checks)
    return Verdict(image, passed, tuple(checks), kernels, report["torch"].get("version", ""), report)
