"""Routing a host to the image that uses its GPU: `detect`, `run` and `doctor`.

Host facts come from /sys, /proc, /dev and the CDI specs (below --host-root) and from the engine; the
decisions are buildkit.core.host.routing's, one set of findings for all three commands: `detect` shows the
routing and its findings, `doctor` the same findings (or an image's), and `run` refuses what they block. A
--host-root other than / describes another host (a mounted root or a test fixture): the live engine is then
never asked anything, since its answers would be about this machine; --engine names that host's engine.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from buildkit.adapters.engine import buildx, docker_sdk
from buildkit.adapters.host import read_host
from buildkit.app.targets import Choices, Selection, select_targets
from buildkit.core.host.access import gpu_access, run_words
from buildkit.core.host.facts import EngineFacts, HostFacts, engine_from_option
from buildkit.core.host.fit import Finding, arch_covered
from buildkit.core.host.routing import Routing, assess, route, run_verdict
from buildkit.core.labels import ImageIdentity, image_labels
from buildkit.core.targets.plan import Plan, Target
from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    import docker

LIVE_ROOT = Path("/")


@dataclass(frozen=True)
class HostChoice:
    """Which host the command is about: this machine (root /) or a host tree, and that host's engine."""

    root: Path = LIVE_ROOT
    engine: str | None = None  # --engine: docker:VERSION, podman, podman-rootless
    python: str | None = None


@dataclass(frozen=True)
class Detection:
    host: HostFacts
    routing: Routing
    cli: str  # the engine's command line tool, for the `run` lines: docker or podman


@dataclass(frozen=True)
class Image:
    reference: str
    identity: ImageIdentity | None


def _client(where: HostChoice) -> docker.DockerClient | None:
    if where.root != LIVE_ROOT:
        return None
    try:
        return docker_sdk.connect()
    except UserError:
        return None


def _engine(where: HostChoice, client: docker.DockerClient | None) -> EngineFacts | None:
    if where.engine is not None:
        return engine_from_option(where.engine)
    return docker_sdk.engine_facts(client) if client is not None else None


@dataclass(frozen=True)
class _Context:
    selection: Selection
    client: docker.DockerClient | None
    host: HostFacts
    routing: Routing


def _context(choices: Choices, where: HostChoice) -> _Context:
    """The matrix's targets, the engine (for this machine), the host's facts and where they route it."""
    selection = select_targets(choices)
    client = _client(where)
    host = read_host(selection.matrix.compat, where.root, engine=_engine(where, client))
    return _Context(selection, client, host, route(host, Plan(selection.targets, ()), selection.matrix.compat, where.python))


def detect(choices: Choices, where: HostChoice) -> Detection:
    context = _context(choices, where)
    return Detection(context.host, context.routing, engine_cli(context.host))


def _twin(identity: ImageIdentity | None, selection: Selection, routing: Routing, host: HostFacts) -> str | None:
    """The image to run instead of a wrong-vendor one: its twin (same pair key) for the host's vendor (of a
    pair with one ROCm image per family, the family image whose arch list covers the host's GPUs), else the
    target detect picks for that vendor."""
    vendor = routing.vendor
    if identity is None or vendor is None or identity.vendor.name == vendor:
        return None
    twins = [t for t in selection.targets if identity.pair and t.pair == identity.pair and t.vendor == vendor]
    covering = [t for t in twins if all(arch_covered(gpu.arch, t.archs) for gpu in host.gpus_of(vendor))]
    twin: Target | None = next(iter(covering or twins), None) or routing.choices[vendor].target
    return twin.tags[0] if twin else None


def _image(reference: str, selection: Selection, client: docker.DockerClient | None) -> Image:
    """An image's identity: from the engine when it holds the image, else from the matrix target it names."""
    if client is not None:
        labels = docker_sdk.image_labels(client, reference)
        if labels is not None:
            return Image(reference, ImageIdentity.read(labels))
    for target in selection.targets:
        if reference in target.tags or reference == target.id:
            return Image(target.tags[0], ImageIdentity.read(image_labels(target, selection.matrix.source)))
    where = "not in the engine and not" if client is not None else "not"
    raise UserError(Problem(reference, f"{where} a target of the matrix: pull it, or name a matrix tag"))


def _assessed(context: _Context, reference: str) -> tuple[Image, list[Finding]]:
    """An image and doctor's findings about it on this host."""
    image = _image(reference, context.selection, context.client)
    twin = _twin(image.identity, context.selection, context.routing, context.host)
    return image, assess(context.host, context.selection.matrix.compat, image.reference, image.identity, twin)


def _refusal(findings: tuple[Finding, ...]) -> UserError:
    return UserError([Problem("run refused", f"{finding.title}; fix: {finding.fix}") for finding in findings])


@dataclass(frozen=True)
class RunCommand:
    argv: list[str]
    warnings: tuple[Finding, ...] = ()


def run_command(choices: Choices, reference: str | None, where: HostChoice, command: list[str]) -> RunCommand:
    """The `docker run` (or `podman run`) command for an image (or the matrix target that fits this host) with
    its vendor's GPU flags; refuses what doctor blocks (an image that would silently run on the CPU here, a
    driver too old for it, a GPU arch it has no code for...), naming the fix, and carries doctor's other
    findings as warnings. On a host without GPUs nothing is refused: the image (without one, the target a CUDA
    host would get) runs on the CPU, with a warning."""
    context = _context(choices, where)
    routing = context.routing
    if reference is None:
        target = routing.target or routing.cpu_target
        blocking = tuple(f for f in routing.findings if f.blocking)
        if blocking:
            raise _refusal(blocking)
        if target is None:
            raise UserError(Problem("run", "the selected targets hold no runtime image to run here: name an image, or widen --select"))
        reference = target.tags[0]
    image, findings = _assessed(context, reference)
    verdict = run_verdict(context.host, findings)
    if verdict.refusals:
        raise _refusal(verdict.refusals)
    flags = gpu_access(image.identity.vendor, context.host).docker_flags() if image.identity is not None else []
    argv = run_words(engine_cli(context.host), flags, image.reference, command, interactive=os.isatty(0) and os.isatty(1))
    return RunCommand(argv, verdict.warnings)


def engine_cli(host: HostFacts) -> str:
    """The command line tool of the host's engine: podman for podman (whose flags, --group-add keep-groups among
    them, the docker CLI does not take), else $BUILDKIT_DOCKER or docker."""
    if host.engine is not None and host.engine.kind == "podman":
        return "podman"
    return os.environ.get(buildx.DOCKER_ENV, "docker")


@dataclass(frozen=True)
class DoctorReport:
    host: HostFacts
    image: str | None
    findings: tuple[Finding, ...]

    @property
    def blocking(self) -> bool:
        return any(f.blocking for f in self.findings)


def doctor(choices: Choices, reference: str | None, where: HostChoice) -> DoctorReport:
    context = _context(choices, where)
    if reference is None:
        return DoctorReport(context.host, None, context.routing.findings)
    image, findings = _assessed(context, reference)
    return DoctorReport(context.host, image.reference, tuple(findings))
