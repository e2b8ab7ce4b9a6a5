"""Reading BuildKit's SLSA provenance (an in-toto statement) into the few facts `verify` shows. Pure.

BuildKit writes SLSA provenance v0.2 (`--provenance=mode=max`; v1 with `version=v1`). What matters to a
user: which builder, when, from which base images (materials, with their digests) and with which labels
and build arguments (mode=max records them, buildkit's fingerprint label among them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from buildkit.core import labels

SLSA_TYPES = ("https://slsa.dev/provenance/v0.2", "https://slsa.dev/provenance/v1")


@dataclass(frozen=True)
class Provenance:
    predicate_type: str
    builder: str
    build_type: str
    finished: str
    materials: tuple[str, ...]  # uri@sha256:... of each input (base images, contexts)
    parameters: Mapping[str, str]  # mode=max: build-arg:NAME and label:KEY values

    @property
    def fingerprint(self) -> str:
        return self.parameters.get(f"label:{labels.FINGERPRINT}", "")

    def summary(self) -> str:
        base = ", ".join(self.materials) or "no materials recorded"
        builder = self.builder or self.build_type or "unknown builder"
        parts = [f"built by {builder}", f"from {base}"]
        if self.finished:
            parts.append(f"finished {self.finished}")
        if self.fingerprint:
            parts.append(f"fingerprint {self.fingerprint[:12]}")
        return "; ".join(parts)


def read_provenance(statement: Mapping[str, Any]) -> Provenance | None:
    """The facts of an SLSA provenance statement, or None when it is not one."""
    predicate_type = statement.get("predicateType", "")
    predicate = statement.get("predicate")
    if predicate_type not in SLSA_TYPES or not isinstance(predicate, Mapping):
        return None
    if predicate_type.endswith("/v1"):
        definition = predicate.get("buildDefinition") or {}
        details = predicate.get("runDetails") or {}
        return Provenance(
            predicate_type,
            (details.get("builder") or {}).get("id", ""),
            definition.get("buildType", ""),
            (details.get("metadata") or {}).get("finishedOn", ""),
            _materials(definition.get("resolvedDependencies")),
            _parameters((definition.get("externalParameters") or {}).get("request", {}).get("args")),
        )
    return Provenance(
        predicate_type,
        (predicate.get("builder") or {}).get("id", ""),
        predicate.get("buildType", ""),
        (predicate.get("metadata") or {}).get("buildFinishedOn", ""),
        _materials(predicate.get("materials")),
        _parameters((predicate.get("invocation") or {}).get("parameters", {}).get("args")),
    )


def _materials(entries: Any) -> tuple[str, ...]:
    found = []
    for entry in entries or []:
        if isinstance(entry, Mapping) and entry.get("uri"):
            digest = (entry.get("digest") or {}).get("sha256")
            found.append(f"{entry['uri']}@sha256:{digest}" if digest else str(entry["uri"]))
    return tuple(found)


def _parameters(args: Any) -> dict[str, str]:
    return {str(key): str(value) for key, value in args.items()} if isinstance(args, Mapping) else {}
