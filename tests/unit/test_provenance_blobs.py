"""BuildKit's provenance read from a registry: a mode=max statement of megabytes (every build step's LLB)
is read whole, under the bound BuildKit itself writes to, not the 64 KiB of small answers."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from buildkit.adapters.registry.client import Registry, RegistryError
from buildkit.adapters.supply_chain.provenance import ATTESTATION_MANIFEST, IN_TOTO, PREDICATE_ANNOTATION, REFERENCE_TYPE, STATEMENT_LIMIT, buildkit_statements
from buildkit.core.supply_chain.provenance import read_provenance
from testkit.fake_registry import OCI_INDEX, OCI_MANIFEST, Answer, FakeRegistry, digest_of

STATEMENT = json.loads((Path(__file__).parent.parent / "fixtures" / "provenance" / "buildkit-0.13-mode-max.json").read_text())
SLSA_V02 = "https://slsa.dev/provenance/v0.2"


def large_statement(steps: int) -> bytes:
    """The real statement with its one RUN step repeated: a build of `steps` steps, as mode=max records it."""
    statement = copy.deepcopy(STATEMENT)
    definition = statement["predicate"]["buildConfig"]["llbDefinition"]
    run = definition[1]
    definition[1:2] = [{**run, "id": f"step1-{index}"} for index in range(steps)]
    return json.dumps(statement).encode()


def publish_with(registry: FakeRegistry, blob: bytes) -> str:
    """An image index with a buildx-style attestation manifest whose one layer is `blob`."""
    image = registry.add_image("team/app", None, {})
    registry.blobs[digest_of(blob)] = blob
    attestation = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": image, "size": 2},
            "layers": [{"mediaType": IN_TOTO, "digest": digest_of(blob), "size": len(blob), "annotations": {PREDICATE_ANNOTATION: SLSA_V02}}],
        }
    ).encode()
    attestation_digest = registry.add_manifest("team/app", None, OCI_MANIFEST, attestation)
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [
                {"mediaType": OCI_MANIFEST, "digest": image, "size": 1, "platform": {"os": "linux", "architecture": "amd64"}},
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": attestation_digest,
                    "size": len(attestation),
                    "platform": {"os": "unknown", "architecture": "unknown"},
                    "annotations": {REFERENCE_TYPE: ATTESTATION_MANIFEST},
                },
            ],
        }
    ).encode()
    return registry.add_manifest("team/app", "1.0", OCI_INDEX, index)


@pytest.mark.slow
def test_a_mode_max_statement_of_megabytes_is_read_whole():
    blob = large_statement(20_000)
    assert len(blob) > 100 * 64 * 1024  # a hundred times the bound it was read under
    with FakeRegistry() as registry:
        digest = publish_with(registry, blob)
        statements = buildkit_statements(Registry(registry.address, retries=0, timeout=30), "team/app", digest, (SLSA_V02,))
    assert len(statements) == 1 and len(statements[0]["predicate"]["buildConfig"]["llbDefinition"]) == 20_002
    assert read_provenance(statements[0]).build_type == "https://mobyproject.org/buildkit@v1"


def test_a_statement_declared_beyond_what_buildkit_writes_is_refused_unread():
    with FakeRegistry() as registry:
        digest = publish_with(registry, b"{}")
        registry.on("GET", r"/v2/team/app/blobs/.*", Answer(200, {}, b"", length=STATEMENT_LIMIT + 1))
        with pytest.raises(RegistryError, match=r"the answer is larger than 81920 KiB"):
            buildkit_statements(Registry(registry.address, retries=0, timeout=30), "team/app", digest, (SLSA_V02,))
