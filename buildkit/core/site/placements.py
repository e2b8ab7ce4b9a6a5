"""Where Kubernetes runs each runtime image, as `buildkit kube` writes its Job (core/host/kube.py): the container's
GPU request and the node affinity that keeps it on GPUs it has code for.

Both follow from the vendor and the arch list, not from the image: the CUDA 13.0 images of a torch release
share them, and often every CUDA 13.0 image does. So each distinct placement is written once (the site's
Kubernetes page) and images refer to it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from buildkit.core.host.kube import KubeOptions, workload
from buildkit.core.site.chooser import backend_label

if TYPE_CHECKING:
    from collections.abc import Mapping

    from buildkit.core.compat.facts import Compat
    from buildkit.core.targets.plan import Target

PATH = "kubernetes.html"


@dataclass(frozen=True)
class Placement:
    anchor: str  # its id on the Kubernetes page
    uses: tuple[tuple[str, tuple[str, ...]], ...]  # (backend, the torch releases whose images of it are placed so)
    spec: Mapping[str, Any]  # the container's resources and the pod's affinity

    @property
    def title(self) -> str:
        return "; ".join(f"{backend} (torch {', '.join(torches)})" for backend, torches in self.uses)


class Placements:
    """Each distinct affinity once, in the order images first use it."""

    def __init__(self, compat: Compat) -> None:
        self.compat = compat
        self.found: dict[str, tuple[str, Mapping[str, Any], dict[str, list[str]]]] = {}  # spec as JSON -> anchor, spec, uses

    def of(self, target: Target) -> str:
        """The link to the image's placement on the site's Kubernetes page."""
        objects, _ = workload(target, target.tags[0], KubeOptions(), self.compat)
        pod = objects[-1]["spec"]["template"]["spec"]
        spec = {"resources": pod["containers"][0]["resources"], **({"affinity": pod["affinity"]} if "affinity" in pod else {})}
        key = json.dumps(spec, sort_keys=True)
        if key not in self.found:
            self.found[key] = (self._anchor(target), spec, {})
        anchor, _, uses = self.found[key]
        torches = uses.setdefault(backend_label(target), [])
        if target.torch not in torches:
            torches.append(target.torch)
        return f"{PATH}#{anchor}"

    def _anchor(self, target: Target) -> str:
        base = re.sub(r"[^a-z0-9.]+", "-", backend_label(target).lower())
        taken = {anchor for anchor, _, _ in self.found.values()}
        return next(candidate for number in range(1, len(taken) + 2) if (candidate := base if number == 1 else f"{base}-{number}") not in taken)

    def placements(self) -> tuple[Placement, ...]:
        return tuple(
            Placement(anchor, tuple((backend, tuple(torches)) for backend, torches in uses.items()), spec) for anchor, spec, uses in self.found.values()
        )
