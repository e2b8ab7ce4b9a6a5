"""Routing a host to the image that uses its GPU: detect, run and doctor share these steps."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import docker
import docker.errors

from buildkit.adapters import engine
from buildkit.adapters.host import read_host
from buildkit.core.host import Choice, HostFacts, best_target, primary_vendor
from buildkit.core.plan import Plan, Target
from buildkit.errors import Problem, UserError
from buildkit.app.targets import Selection


def engine_client() -> docker.DockerClient | None:
    try:
        return engine.connect()
    except UserError:
        return None


def host_facts(selection: Selection, root: Path, client: docker.DockerClient | None) -> HostFacts:
    runtimes = None
    if client is not None:
        try:
            runtimes = tuple(client.info().get("Runtimes", {}))
        except docker.errors.APIError:
            runtimes = None
    return read_host(selection.matrix.compat, root, engine_runtimes=runtimes)


def targets(selection: Selection) -> list[Target]:
    return [item.target for item in selection.rendered]


def choices(host: HostFacts, selection: Selection, python: str | None) -> dict[str, Choice]:
    plan = Plan(tuple(targets(selection)), ())
    return {vendor: best_target(host, plan, selection.matrix.compat, vendor, python) for vendor in host.vendors()}


def routed(host: HostFacts, selection: Selection, python: str | None) -> Choice | None:
    vendor = primary_vendor(host)
    return choices(host, selection, python)[vendor] if vendor else None


def twin_of(target_labels: Mapping[str, str], selection: Selection, vendor: str) -> Target | None:
    """The other vendor's twin of an image (same pair key), when the matrix has it."""
    pair = target_labels.get("dev.buildkit.pair")
    return next((t for t in targets(selection) if pair and t.pair == pair and t.vendor == vendor), None)


@dataclass(frozen=True)
class ImageInfo:
    reference: str
    labels: Mapping[str, str]


def image_info(reference: str, selection: Selection, client: docker.DockerClient | None) -> ImageInfo:
    """An image's labels: from the engine when it holds the image, else from the matrix target it names."""
    if client is not None:
        try:
            return ImageInfo(reference, dict(client.images.get(reference).labels or {}))
        except docker.errors.ImageNotFound:
            pass
    for item in selection.rendered:
        if reference in item.target.tags or reference == item.target.id:
            return ImageInfo(item.target.tags[0], dict(item.labels))
    raise UserError(Problem(reference, "not in the engine and not a target of the matrix: pull it, or name a matrix tag"))
