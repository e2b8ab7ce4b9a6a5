"""`buildkit kube PAIR`: Kubernetes manifests for both twins of a pair (core/host/kube.py decides their content).

The pair is a pair key or any tag of one of its images. Each image is named by digest where the registry
has its tag (what a pod pulls then cannot move under it), else by tag, with a note saying why.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass
from typing import TYPE_CHECKING

from buildkit.adapters.registry.client import Registry
from buildkit.adapters.registry.credentials import load_credentials
from buildkit.app.targets import Choices, select_targets
from buildkit.core.host.kube import KubeOptions, Manifests, manifests
from buildkit.core.reference import ImageReference
from buildkit.errors import Problem, UserError, printable

if TYPE_CHECKING:
    from pathlib import Path

    from buildkit.core.targets.plan import Target

__all__ = ["KubeOptions", "KubeResult", "Lookup", "kube", "pair_targets"]


@dataclass(frozen=True)
class Lookup:
    """How images are named: by digest from the registry (its credentials and transport), or by tag only."""

    by_tag: bool = False
    auth_file: Path | None = None
    insecure: bool = False


def pair_targets(targets: tuple[Target, ...], subject: str) -> tuple[Target, ...]:
    """The pair's targets (a CUDA twin and its ROCm twin, or family images); a lone target for an unpaired image."""
    paired = tuple(t for t in targets if t.pair == subject)
    if paired:
        return paired
    named = next((t for t in targets if subject in t.tags or subject == t.id), None)
    if named is None:
        keys = sorted({t.pair for t in targets if t.pair})
        shown = ", ".join(keys[:5]) + (f" (and {len(keys) - 5} more)" if len(keys) > 5 else "")
        raise UserError(Problem(printable(subject), f"not a pair key or an image of the matrix; pair keys: {shown or 'none'} (`buildkit plan` lists them)"))
    return tuple(t for t in targets if t.pair == named.pair) if named.pair else (named,)


def _published(target: Target, lookup: Lookup, registries: dict[str, Registry], unreachable: dict[str, str]) -> tuple[str, str]:
    """(the reference a pod pulls, why it is a tag rather than a digest: "" for a digest). A registry that could not
    be asked once is not asked again for the other images (`unreachable`: registry -> why)."""
    tag = target.tags[0]
    if lookup.by_tag:
        return tag, ""
    reference = ImageReference.parse(tag)
    assert reference is not None and reference.registry  # a target's tag names its registry
    if reference.registry in unreachable:
        return tag, unreachable[reference.registry]
    try:
        if reference.registry not in registries:
            credentials = load_credentials(reference.registry, lookup.auth_file)
            # one short try: a digest lookup must not hold up manifests that can name the tag instead
            registries[reference.registry] = Registry(
                reference.registry, credentials, insecure=True if lookup.insecure else None, timeout=15, retries=1, budget=60
            )
        digest = registries[reference.registry].head_manifest(reference.repository, reference.tag)
    except UserError as error:  # RegistryError among them: unreachable, refused, malformed
        why = f"{reference.registry} could not be asked for their digests ({textwrap.shorten(printable(str(error), None), 300, placeholder=' …')})"
        unreachable[reference.registry] = why
        return tag, why
    if digest is None:
        return tag, f"not published in {reference.registry} yet"
    return reference.pinned(digest), ""


def _by_tag_notes(targets: tuple[Target, ...], reasons: dict[str, str]) -> list[str]:
    """One note per reason, naming the images it holds to a tag: "named by tag (not published …): a, b"."""
    held: dict[str, list[str]] = {}
    for target in targets:
        if reasons[target.id]:
            held.setdefault(reasons[target.id], []).append(target.tags[0])
    return [f"{len(tags)} image{'s' if len(tags) > 1 else ''} named by tag, {why}: {', '.join(tags)}" for why, tags in held.items()]


@dataclass(frozen=True)
class KubeResult:
    manifests: Manifests
    targets: tuple[Target, ...]


def kube(choices: Choices, subject: str, options: KubeOptions, lookup: Lookup) -> KubeResult:
    selection = select_targets(choices)
    targets = pair_targets(selection.targets, subject)
    registries: dict[str, Registry] = {}
    unreachable: dict[str, str] = {}
    images, reasons = {}, {}
    for target in targets:
        images[target.id], reasons[target.id] = _published(target, lookup, registries, unreachable)
    notes = _by_tag_notes(targets, reasons)
    if len({t.vendor for t in targets}) == 1:
        notes.append(f"{targets[0].id} has no twin in the matrix: manifests for one vendor only")
    found = manifests(targets, images, options, selection.matrix.compat)
    return KubeResult(Manifests(found.objects, (*notes, *found.notes)), targets)
