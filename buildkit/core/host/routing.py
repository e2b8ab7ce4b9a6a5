"""Where a host is routed, and what follows for an image on it: one set of findings decides all three
commands, so they can never disagree. `detect` picks the newest target that no finding blocks, `doctor`
shows the findings, and `run` refuses an image that a blocking finding keeps off the GPU (and warns for the
others).
"""

from __future__ import annotations

from dataclasses import dataclass

from packaging.version import Version

from buildkit.core import labels
from buildkit.core.compat import Compat
from buildkit.core.host.access import GpuAccess, access_findings, gpu_access
from buildkit.core.host.facts import HostFacts
from buildkit.core.host.fit import Finding, arch_covered, fit_findings
from buildkit.core.labels import ImageIdentity
from buildkit.core.plan import Plan, Target
from buildkit.core.vendors import of_vendor

# --- an image on this host ------------------------------------------------------------------------------


def no_gpu_finding(subject: str) -> Finding:
    return Finding(True, "no-gpu", f"this host has no GPU: {subject} on the CPU",
                   "nothing to fix if that is expected (CI runners); on a GPU host, check the PCI device and its driver")


def assess(host: HostFacts, compat: Compat, reference: str, identity: ImageIdentity | None, twin: str | None = None) -> list[Finding]:
    """Why this image would or would not use this host's GPUs, blocking findings first, each with its fix.
    `identity` is what its labels say it is (None: no buildkit labels); `twin` its other vendor's image."""
    if identity is None:
        return [Finding(True, "no-labels", f"{reference} carries no {labels.BACKEND} label, so its GPU backend is unknown",
                        "build it with buildkit, or check it with `buildkit test`")]
    vendors = host.vendors()
    if not vendors:
        return [no_gpu_finding(f"{reference} runs")]
    vendor = identity.vendor
    if vendor.name not in vendors:
        other = of_vendor(vendors[0])
        hint = f"run {twin} instead" if twin else f"use its {other.backend_display} twin (`buildkit detect` names it)"
        return [Finding(
            True, "wrong-vendor", f"{reference} is a {vendor.backend_display} image and this host has only {other.display} GPUs: "
            f"torch will find no GPU it can use and run on the CPU; {hint}",
            "`buildkit run` picks the image that fits this host",
        )]
    findings = access_findings(host, vendor, gpu_access(vendor, host)) + fit_findings(host, compat, identity)
    return sorted(findings, key=lambda f: not f.blocking)


@dataclass(frozen=True)
class RunVerdict:
    """What `run` does with an image's findings: refuse for the blocking ones where the host has a GPU the image
    would miss; on a host without GPUs every image runs on the CPU, as expected there, so they are warnings."""

    refusals: tuple[Finding, ...]
    warnings: tuple[Finding, ...]


def run_verdict(host: HostFacts, findings: list[Finding]) -> RunVerdict:
    if not host.gpus:
        return RunVerdict((), tuple(findings))
    return RunVerdict(tuple(f for f in findings if f.blocking), tuple(f for f in findings if not f.blocking))


# --- the best target for this host ------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    vendor: str
    target: Target | None
    reasons: tuple[str, ...]  # why other targets were passed over (newest first), or why none fits
    first_blocker: Finding | None = None  # what kept the newest candidate off the GPU, when none fits
    uncarried: tuple[str, ...] = ()  # the host's GPU archs that no candidate's arch list has (no image carries gfx1103)


def best_target(host: HostFacts, plan: Plan, compat: Compat, vendor: str, python: str | None = None) -> Choice:
    """Newest torch that no fit finding blocks (the driver runs its backend, its arch list covers every GPU of
    the vendor); runtime flavor; the pair's twin before other backend versions; the requested (else newest) Python."""
    candidates = [t for t in plan.targets if t.vendor == vendor and t.flavor == "runtime" and (python is None or t.python == python)]
    candidates.sort(key=lambda t: (Version(t.torch), t.pair is not None, Version(t.backend_version), Version(t.python)), reverse=True)
    reasons: list[str] = []
    first: Finding | None = None
    for target in candidates:
        blockers = [f for f in fit_findings(host, compat, ImageIdentity.of_target(target)) if f.blocking]
        if not blockers:
            return Choice(vendor, target, tuple(reasons))
        first = first or blockers[0]
        if len(reasons) < 5:
            reasons.append(f"{target.id}: {blockers[0].title}")
    if not candidates:
        reasons.append(f"the matrix has no {of_vendor(vendor).display} runtime target{f' for Python {python}' if python else ''}")
    uncarried = sorted({gpu.arch for gpu in host.gpus_of(vendor)
                        if gpu.arch and candidates and not any(arch_covered(gpu.arch, t.archs) for t in candidates)})
    return Choice(vendor, None, tuple(reasons), first, tuple(uncarried))


def primary_vendor(host: HostFacts) -> str | None:
    """The vendor a host is routed to: the one with more GPUs (NVIDIA on a tie); None without GPUs."""
    vendors = host.vendors()
    if not vendors:
        return None
    return max(vendors, key=lambda v: (len(host.gpus_of(v)), of_vendor(v).routing_rank))


@dataclass(frozen=True)
class Routing:
    """Where this host is routed, and what doctor says about it: what `detect`, `doctor` and `run` all show."""

    vendor: str | None
    choices: dict[str, Choice]  # per vendor present: the fitting target, or why none fits
    access: dict[str, GpuAccess]  # per vendor present: what a container needs
    findings: tuple[Finding, ...]  # blocking first

    @property
    def target(self) -> Target | None:
        return self.choices[self.vendor].target if self.vendor else None

    @property
    def blocking(self) -> bool:
        return any(f.blocking for f in self.findings)


def route(host: HostFacts, plan: Plan, compat: Compat, python: str | None = None) -> Routing:
    choices = {vendor: best_target(host, plan, compat, vendor, python) for vendor in host.vendors()}
    access = {vendor: gpu_access(of_vendor(vendor), host) for vendor in host.vendors()}
    vendor = primary_vendor(host)
    if vendor is None:
        return Routing(None, choices, access, (no_gpu_finding("every image runs"),))
    record, choice = of_vendor(vendor), choices[vendor]
    findings = access_findings(host, record, access[vendor])
    if choice.target is None:
        blocker = choice.first_blocker
        if choice.uncarried:  # every candidate lacks the same archs: say that, not the same reason per target
            why = (f"no {record.display} image of the matrix carries {', '.join(choice.uncarried)}, this host's GPU arch "
                   f"(kernels fail with {record.missing_arch_error})")
        else:
            why = f"no {record.display} image of the matrix fits this host: {'; '.join(choice.reasons)}"
        findings.append(Finding(
            True, "no-fitting-image", why,
            blocker.fix if blocker else f"add a {record.backend_display} runtime target to the matrix",
        ))
    else:
        findings += [f for f in fit_findings(host, compat, ImageIdentity.of_target(choice.target)) if not f.blocking]
    return Routing(vendor, choices, access, tuple(sorted(findings, key=lambda f: not f.blocking)))
