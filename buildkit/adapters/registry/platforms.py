"""Platforms, and picking a platform's manifest from an image index, as `docker pull --platform` does.

Platforms are written linux/amd64, linux/arm64, linux/arm/v7; the index is an OCI image index or a Docker
manifest list.

arm64 is written without its only variant (v8), as buildx and docker write it; attestation manifests that
buildx adds to an index (platform unknown/unknown, `vnd.docker.reference.type: attestation-manifest`) are
not images and are never picked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from buildkit.errors import Problem, UserError

_PART_RE = re.compile(r"[a-z0-9_.-]{1,32}")
_DEFAULT_VARIANT = {"arm64": "v8"}  # written without it


@dataclass(frozen=True)
class Platform:
    os: str
    architecture: str
    variant: str = ""

    @classmethod
    def parse(cls, text: str) -> Platform:
        parts = text.split("/")
        if not 2 <= len(parts) <= 3 or not all(_PART_RE.fullmatch(part) for part in parts):
            raise UserError(Problem("--platform", f"expected os/architecture[/variant] such as linux/amd64 or linux/arm64, got {text!r}"))
        return cls.of(*parts)

    @classmethod
    def of(cls, os: str, architecture: str, variant: str = "") -> Platform:
        return cls(os, architecture, "" if _DEFAULT_VARIANT.get(architecture) == variant else variant)

    @property
    def attestation(self) -> bool:
        return self.os == "unknown" and self.architecture == "unknown"

    def __str__(self) -> str:
        return f"{self.os}/{self.architecture}" + (f"/{self.variant}" if self.variant else "")

    def accepts(self, offered: Platform) -> bool:
        """Whether an image for `offered` serves this platform: same os and architecture, and the same
        variant where this one names a variant."""
        return (offered.os, offered.architecture) == (self.os, self.architecture) and self.variant in ("", offered.variant)


def platform_of(described: object) -> Platform | None:
    """The platform an index entry's `platform` object (or an image config) describes; None when it
    names none (not strings, or missing)."""
    if not isinstance(described, dict):
        return None
    os, architecture, variant = described.get("os"), described.get("architecture"), described.get("variant", "")
    if not all(isinstance(value, str) for value in (os, architecture, variant)) or not os or not architecture:
        return None
    return Platform.of(os, architecture, variant or "")


def image_entries(manifests: list[dict[str, Any]]) -> list[tuple[Platform, dict[str, Any]]]:
    """The entries of an index that are images for a platform: attestations and entries without a
    platform left out, in the index's order."""
    found = []
    for entry in manifests:
        platform = platform_of(entry.get("platform"))
        annotations = entry.get("annotations")
        attestation = isinstance(annotations, dict) and annotations.get("vnd.docker.reference.type") == "attestation-manifest"
        if platform is not None and not platform.attestation and not attestation:
            found.append((platform, entry))
    return found


def pick(manifests: list[dict[str, Any]], wanted: Platform) -> dict[str, Any] | None:
    """The index entry for `wanted`: an exact variant match first, else the first that accepts it."""
    candidates = [(platform, entry) for platform, entry in image_entries(manifests) if wanted.accepts(platform)]
    exact = [entry for platform, entry in candidates if platform == wanted]
    return exact[0] if exact else (candidates[0][1] if candidates else None)
