"""Routing a host to the image that uses its GPU: `detect`, `run` and `doctor`.

Host facts come from /sys, /proc and /dev (below --host-root); the decisions (the fitting target, the run
flags, the refusal of a wrong-vendor image, doctor's findings) are buildkit.core.host's. A --host-root
other than / describes another host (a mounted root or a test fixture): the live engine is then never
asked anything, since its answers would be about this machine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import docker

from buildkit.adapters import buildx, engine
from buildkit.adapters.host import read_host
from buildkit.app.targets import Choices, Selection, select_targets
from buildkit.core.host import (Choice, Finding, GpuAccess, HostFacts, arch_covered, best_target, diagnose, gpu_access,
                                primary_vendor, run_refusal)
from buildkit.core.labels import ImageIdentity, image_labels
from buildkit.core.plan import Plan, Target
from buildkit.core.vendors import of_vendor
from buildkit.errors import Problem, UserError

LIVE_ROOT = Path("/")


@dataclass(frozen=True)
class Detection:
    host: HostFacts
    vendor: str | None  # the vendor this host is routed to
    choices: dict[str, Choice]  # per vendor present: the fitting target, or why none fits
    access: dict[str, GpuAccess]  # per vendor present: what a container needs


@dataclass(frozen=True)
class Image:
    reference: str
    identity: ImageIdentity | None


def _engine(root: Path) -> docker.DockerClient | None:
    if root != LIVE_ROOT:
        return None
    try:
        return engine.connect()
    except UserError:
        return None


def _host(selection: Selection, root: Path, client: docker.DockerClient | None) -> HostFacts:
    return read_host(selection.matrix.compat, root, engine_runtimes=engine.runtimes(client) if client else None)


def _choices(host: HostFacts, selection: Selection, python: str | None) -> dict[str, Choice]:
    plan = Plan(selection.targets, ())
    return {vendor: best_target(host, plan, selection.matrix.compat, vendor, python) for vendor in host.vendors()}


def detect(choices: Choices, root: Path, python: str | None) -> Detection:
    selection = select_targets(choices)
    host = read_host(selection.matrix.compat, root)
    return Detection(
        host, primary_vendor(host), _choices(host, selection, python),
        {vendor: gpu_access(of_vendor(vendor), host) for vendor in host.vendors()},
    )


def _twin(identity: ImageIdentity | None, selection: Selection, vendor: str, host: HostFacts) -> Target | None:
    """The other vendor's twin of an image (same pair key) that serves this host's GPUs: of a pair with one
    ROCm image per family, the family image whose arch list covers them."""
    if identity is None or not identity.pair:
        return None
    twins = [t for t in selection.targets if t.pair == identity.pair and t.vendor == vendor]
    gpus = host.gpus_of(vendor)
    return next((t for t in twins if all(arch_covered(gpu.arch, t.archs) for gpu in gpus)), twins[0] if twins else None)


def _image(reference: str, selection: Selection, client: docker.DockerClient | None) -> Image:
    """An image's identity: from the engine when it holds the image, else from the matrix target it names."""
    if client is not None:
        labels = engine.image_labels(client, reference)
        if labels is not None:
            return Image(reference, ImageIdentity.read(labels))
    for target in selection.targets:
        if reference in target.tags or reference == target.id:
            return Image(target.tags[0], ImageIdentity.read(image_labels(target, selection.matrix.source)))
    where = "not in the engine and not" if client is not None else "not"
    raise UserError(Problem(reference, f"{where} a target of the matrix: pull it, or name a matrix tag"))


@dataclass(frozen=True)
class RunCommand:
    argv: list[str]
    note: str = ""


def run_command(choices: Choices, reference: str | None, root: Path, python: str | None, command: list[str]) -> RunCommand:
    """The `docker run` command for an image (or the matrix target that fits this host) with its vendor's
    GPU flags; refuses an image that would silently run on the CPU here, naming the twin that would not."""
    selection = select_targets(choices)
    client = _engine(root)
    host = _host(selection, root, None)
    if reference is None:
        vendor = primary_vendor(host)
        choice = _choices(host, selection, python).get(vendor) if vendor else None
        if choice is None or choice.target is None:
            reasons = "; ".join(choice.reasons) if choice else "this host has no GPU"
            raise UserError(f"no matrix target fits this host ({reasons}); name an image to run it anyway")
        reference = choice.target.tags[0]
    image = _image(reference, selection, client)
    flags: list[str] = []
    note = ""
    if image.identity is not None and host.vendors():
        other = host.vendors()[0]
        twin = _twin(image.identity, selection, other, host) or _choices(host, selection, python)[other].target
        refusal = run_refusal(image.reference, image.identity, host, twin.tags[0] if twin else None)
        if refusal:
            raise UserError(refusal)
        flags = gpu_access(image.identity.vendor, host).docker_flags()
    elif not host.vendors():
        note = "this host has no GPU; the container runs on the CPU"
    docker_cli = os.environ.get(buildx.DOCKER_ENV, "docker")
    interactive = ["-it"] if os.isatty(0) and os.isatty(1) else []
    return RunCommand([docker_cli, "run", "--rm", *interactive, *flags, image.reference, *command], note)


@dataclass(frozen=True)
class DoctorReport:
    host: HostFacts
    image: str | None
    findings: list[Finding]
    engine_checked: bool

    @property
    def blocking(self) -> bool:
        return any(f.blocking for f in self.findings)


def doctor(choices: Choices, reference: str | None, root: Path) -> DoctorReport:
    selection = select_targets(choices)
    client = _engine(root)
    host = _host(selection, root, client)
    image = _image(reference, selection, client) if reference else None
    twin = None
    if image is not None and image.identity is not None and host.vendors():
        found = _twin(image.identity, selection, host.vendors()[0], host)
        twin = found.tags[0] if found else None
    findings = diagnose(host, selection.matrix.compat, image.reference if image else "", image.identity if image else None, twin)
    return DoctorReport(host, image.reference if image else None, findings, client is not None)
