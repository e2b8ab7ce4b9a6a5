"""Where a host is routed, and what follows for an image on it.

One set of findings decides all three commands, so they can never disagree. `detect` picks the newest target
that no finding blocks, `doctor` shows the findings, and `run` refuses an image that a blocking finding keeps off
the GPU (and warns for the others).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.version import Version

from buildkit.core import labels
from buildkit.core.host.access import GpuAccess, access_findings, gpu_access
from buildkit.core.host.amd_environment import environment_findings
from buildkit.core.host.fit import Finding, arch_covered, fit_findings
from buildkit.core.labels import ImageIdentity
from buildkit.core.vendors import of_vendor

if TYPE_CHECKING:
    from buildkit.core.compat.facts import Compat
    from buildkit.core.host.facts import HostFacts
    from buildkit.core.targets.plan import Plan, Target

# --- an image on this host ------------------------------------------------------------------------------


def no_gpu_finding(subject: str) -> Finding:
    """A host without GPUs (a CI runner): images run on the CPU there, as expected, so nothing blocks; `detect`,
    `doctor` and `run` all exit 0 and say so."""
    return Finding(
        False,
        "no-gpu",
        f"this host has no GPU: {subject} on the CPU",
        "nothing to fix if that is expected (CI runners); on a GPU host, check the PCI device and its driver",
    )


def assess(host: HostFacts, compat: Compat, reference: str, identity: ImageIdentity | None, twin: str | None = None) -> list[Finding]:
    """Why this image would or would not use this host's GPUs, blocking findings first, each with its fix.
    `identity` is what its labels say it is (None: no buildkit labels); `twin` its other vendor's image."""
    if identity is None:
        return [
            Finding(
                True,
                "no-labels",
                f"{reference} carries no {labels.BACKEND} label, so its GPU backend is unknown",
                "build it with buildkit, or check it with `buildkit test`",
            )
        ]
    vendors = host.vendors()
    if not vendors:
        return [no_gpu_finding(f"{reference} runs")]
    vendor = identity.vendor
    if vendor.name not in vendors:
        other = of_vendor(vendors[0])
        hint = f"run {twin} instead" if twin else f"use its {other.backend_display} twin (`buildkit detect` names it)"
        return [
            Finding(
                True,
                "wrong-vendor",
                f"{reference} is a {vendor.backend_display} image and this host has only {other.display} GPUs: "
                f"torch will find no GPU it can use and run on the CPU; {hint}",
                "`buildkit run` picks the image that fits this host",
            )
        ]
    findings = access_findings(host, vendor, gpu_access(vendor, host)) + fit_findings(host, compat, identity)
    if vendor.arch_from_kfd:
        findings += environment_findings(host, compat)
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
class PassedOver:
    """Targets passed over for one reason (the first finding that blocks each), newest first."""

    finding: Finding
    targets: tuple[Target, ...]

    def describe(self, candidates: int = 0) -> str:
        """The reason once, then which targets it kept out: "…: /dev/kfd is missing (all 30 AMD runtime targets)"."""
        first, more = self.targets[0], len(self.targets) - 1
        if more and len(self.targets) == candidates:
            which = f"all {candidates} {first.vendor_record.display} runtime targets"
        else:
            which = first.id + (f" and {more} more" if more else "")
        return f"{self.finding.title} ({which})"


@dataclass(frozen=True)
class Choice:
    vendor: str
    target: Target | None
    passed_over: tuple[PassedOver, ...]  # the targets preferred to the one chosen (or all, when none fits), by reason
    candidates: int = 0  # the vendor's runtime targets (of the requested Python) that were considered
    uncarried: tuple[str, ...] = ()  # the host's GPU archs that no candidate's arch list has (no image carries gfx1103)

    def newer_passed_over(self) -> tuple[PassedOver, ...]:
        """The reasons that kept newer images (a newer torch or backend version than the chosen one's) off this
        host; another family's image of the same release is no loss, so it is left out."""
        if self.target is None:
            return self.passed_over
        chosen = _newness(self.target)
        newer = (PassedOver(group.finding, tuple(t for t in group.targets if _newness(t) > chosen)) for group in self.passed_over)
        return tuple(group for group in newer if group.targets)


def _newness(target: Target) -> tuple[Version, Version]:
    return Version(target.torch), Version(target.backend_version)


def _runtime_candidates(plan: Plan, vendor: str, python: str | None) -> list[Target]:
    """The vendor's runtime targets in the order routing prefers them: newest torch; the pair's twin before other
    backend versions; the newest backend version; the requested (else newest) Python."""
    candidates = [t for t in plan.targets if t.vendor == vendor and t.flavor == "runtime" and (python is None or t.python == python)]
    return sorted(candidates, key=lambda t: (Version(t.torch), t.pair is not None, Version(t.backend_version), Version(t.python)), reverse=True)


def best_target(host: HostFacts, plan: Plan, compat: Compat, vendor: str, python: str | None = None) -> Choice:
    """The first runtime candidate (in routing's order) that no fit finding blocks: the driver runs its backend,
    its arch list covers every GPU of the vendor."""
    candidates = _runtime_candidates(plan, vendor, python)
    groups: dict[str, tuple[Finding, list[Target]]] = {}
    chosen: Target | None = None
    for target in candidates:
        blockers = [f for f in fit_findings(host, compat, ImageIdentity.of_target(target)) if f.blocking]
        if not blockers:
            chosen = target
            break
        groups.setdefault(blockers[0].title, (blockers[0], []))[1].append(target)
    passed_over = tuple(PassedOver(finding, tuple(targets)) for finding, targets in groups.values())
    uncarried = sorted(
        {
            gpu.arch
            for gpu in host.gpus_of(vendor)
            if gpu.arch and chosen is None and candidates and not any(arch_covered(gpu.arch, t.archs) for t in candidates)
        }
    )
    return Choice(vendor, chosen, passed_over, len(candidates), tuple(uncarried))


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
    cpu_target: Target | None = None  # on a host without GPUs: the image `run` starts there (on the CPU)

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
        return Routing(None, choices, access, (no_gpu_finding("every image runs"),), cpu_target(plan, python))
    record, choice = of_vendor(vendor), choices[vendor]
    findings = access_findings(host, record, access[vendor])
    if choice.target is None:
        blocker = choice.passed_over[0].finding if choice.passed_over else None
        if choice.uncarried:  # every candidate lacks the same archs: say that, not the same reason per target
            why = (
                f"no {record.display} image of the matrix carries {', '.join(choice.uncarried)}, this host's GPU arch "
                f"(kernels fail with {record.missing_arch_error})"
            )
        elif blocker is None:
            why = f"the matrix has no {record.display} runtime target{f' for Python {python}' if python else ''}"
        else:
            why = f"no {record.display} image of the matrix fits this host: {'; '.join(g.describe(choice.candidates) for g in choice.passed_over)}"
        findings.append(
            Finding(
                True,
                "no-fitting-image",
                why,
                blocker.fix if blocker else f"add a {record.backend_display} runtime target to the matrix",
            )
        )
    else:
        findings += [f for f in fit_findings(host, compat, ImageIdentity.of_target(choice.target)) if not f.blocking]
        newer = choice.newer_passed_over()
        if newer:
            findings.append(
                Finding(
                    False,
                    "newer-images-passed-over",
                    f"{choice.target.id} is picked because newer {record.display} images do not "
                    f"fit this host: {'; '.join(group.describe() for group in newer)}",
                    "; ".join(dict.fromkeys(group.finding.fix for group in newer)),
                )
            )
    findings += environment_findings(host, compat)
    return Routing(vendor, choices, access, tuple(sorted(findings, key=lambda f: not f.blocking)))


def cpu_target(plan: Plan, python: str | None = None) -> Target | None:
    """What `run` starts on a host without GPUs, where every image runs on the CPU: the target a CUDA host would
    get (NVIDIA first, as on a tie: PyPI's torch for Linux is a CUDA build too), else the AMD one."""
    for vendor in sorted({t.vendor for t in plan.targets}, key=lambda v: -of_vendor(v).routing_rank):
        candidates = _runtime_candidates(plan, vendor, python)
        if candidates:
            return candidates[0]
    return None
