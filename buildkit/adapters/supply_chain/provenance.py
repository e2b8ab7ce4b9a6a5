"""BuildKit's own attestations in a registry: the in-toto statements stored beside an image.

The SLSA provenance and SBOMs that `docker buildx build --push --provenance=mode=max` stores next to the image in
its OCI index.

The index lists, per platform, an attestation manifest (annotation vnd.docker.reference.type:
attestation-manifest, platform unknown/unknown) whose layers are in-toto statements. They are not signed
by themselves: signing the index digest covers them, since the index names their digests.

Every manifest and blob is checked against its digest. Uses only the registry client's public
find_manifest / get_manifest / request.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from buildkit.adapters.registry.client import INDEX_TYPES, Registry

REFERENCE_TYPE = "vnd.docker.reference.type"
ATTESTATION_MANIFEST = "attestation-manifest"
IN_TOTO = "application/vnd.in-toto+json"
PREDICATE_ANNOTATION = "in-toto.io/predicate-type"
# A mode=max statement carries every build step's LLB and the Dockerfile's source map: megabytes for a large
# build. BuildKit itself refuses to write an attestation above 80 MiB (moby/buildkit#7104; 40 MiB before),
# so that is the bound on what it can have stored.
STATEMENT_LIMIT = 80 * 1024 * 1024


def buildkit_statements(registry: Registry, repository: str, digest: str, predicate_types: tuple[str, ...]) -> list[dict[str, Any]]:
    """The statements of the given predicate types attached by BuildKit to an image index; [] for a plain
    manifest (built without attestations, or pushed by an engine that dropped them)."""
    index = registry.find_manifest(repository, digest)
    if index is None or index.media_type not in INDEX_TYPES or not _matches(index.body, digest):
        return []
    scope = f"repository:{repository}:pull"
    statements = []
    for entry in json.loads(index.body).get("manifests") or []:
        if (entry.get("annotations") or {}).get(REFERENCE_TYPE) != ATTESTATION_MANIFEST:
            continue
        body = registry.get_manifest(repository, entry["digest"]).body
        if not _matches(body, entry["digest"]):
            continue
        manifest = json.loads(body)
        for layer in manifest.get("layers") or []:
            annotations = layer.get("annotations") or {}
            if layer.get("mediaType") != IN_TOTO or annotations.get(PREDICATE_ANNOTATION) not in predicate_types:
                continue
            blob = registry.request("GET", f"/v2/{repository}/blobs/{layer['digest']}", scope=scope, limit=STATEMENT_LIMIT)
            if not _matches(blob.body, layer["digest"]):
                continue
            try:
                statements.append(json.loads(blob.body))
            except ValueError:
                continue  # not JSON: not a statement we can read; verify then reports no provenance
    return statements


def _matches(body: bytes, digest: str) -> bool:
    """Content addressing checked here: the signature covers the index digest, and through it these bytes
    only if each one hashes to the digest that names it."""
    return digest == "sha256:" + hashlib.sha256(body).hexdigest()
