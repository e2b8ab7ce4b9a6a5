"""Indexes and platforms: the client picks a platform's image from an OCI index or a Docker manifest list
(attestations ignored), reports labels per platform, and resolves digests for pinning."""

from __future__ import annotations

import json

import pytest

from buildkit.adapters.registry.client import DOCKER_LIST, DOCKER_MANIFEST, Registry, RegistryError, Resolved
from buildkit.adapters.registry.platforms import Platform, pick
from buildkit.errors import UserError
from testkit.fake_registry import FakeRegistry, digest_of


@pytest.fixture
def registry():
    with FakeRegistry() as fake:
        yield fake


@pytest.fixture
def multi(registry):
    """team/app:1.0, an index of amd64 and arm64 images plus a buildx attestation."""
    amd = registry.add_image("team/app", None, {"arch": "amd64"}, "linux/amd64")
    arm = registry.add_image("team/app", None, {"arch": "arm64"}, "linux/arm64")
    index = registry.add_index("team/app", "1.0", {"linux/amd64": amd, "linux/arm64": arm})
    return index, amd, arm


def client(fake):
    return Registry(fake.address, retries=0, timeout=5)


def test_image_labels_pick_the_platform_and_keep_the_index_digest(registry, multi):
    index, _, _ = multi
    reg = client(registry)
    assert reg.image_labels("team/app", "1.0") == (index, {"arch": "amd64"})
    assert reg.image_labels("team/app", "1.0", platform="linux/arm64") == (index, {"arch": "arm64"})
    assert reg.image_labels("team/app", "1.0", platform="linux/arm64/v8") == (index, {"arch": "arm64"})
    assert reg.image_labels("team/app", "1.0", platform="linux/s390x") is None
    assert reg.image_labels("team/app", "2.0") is None


def test_labels_per_platform_leave_attestations_out(registry, multi):
    _, amd, arm = multi
    assert client(registry).platform_labels("team/app", "1.0") == {
        "linux/amd64": (amd, {"arch": "amd64"}),
        "linux/arm64": (arm, {"arch": "arm64"}),
    }
    assert client(registry).platform_labels("team/app", "nope") is None


def test_resolve_digest_gives_the_index_and_the_platform_manifest(registry, multi):
    index, amd, arm = multi
    reg = client(registry)
    assert reg.resolve_digest("team/app", "1.0", "linux/arm64") == Resolved(index, arm, "linux/arm64")
    assert reg.resolve_digest("team/app", index) == Resolved(index, amd, "linux/amd64")
    with pytest.raises(RegistryError, match="no image for linux/riscv64; it has linux/amd64, linux/arm64"):
        reg.resolve_digest("team/app", "1.0", "linux/riscv64")
    with pytest.raises(RegistryError, match="not found"):
        reg.resolve_digest("team/app", "2.0")


def test_a_single_platform_image_serves_only_its_own_platform(registry):
    digest = registry.add_image("team/app", "1.0", {"arch": "arm64"}, "linux/arm64", media_type=DOCKER_MANIFEST)
    reg = client(registry)
    assert reg.image_labels("team/app", "1.0", "linux/arm64") == (digest, {"arch": "arm64"})
    assert reg.image_labels("team/app", "1.0") is None  # amd64 asked, arm64 offered
    assert reg.platform_labels("team/app", "1.0") == {"linux/arm64": (digest, {"arch": "arm64"})}
    assert reg.resolve_digest("team/app", "1.0", "linux/arm64") == Resolved(digest, digest, "linux/arm64")
    with pytest.raises(RegistryError, match="no image for linux/amd64; it has linux/arm64"):
        reg.resolve_digest("team/app", "1.0")


def test_docker_manifest_lists_read_like_oci_indexes(registry):
    amd = registry.add_image("team/app", None, {"arch": "amd64"}, media_type=DOCKER_MANIFEST)
    body = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": DOCKER_LIST,
            "manifests": [
                {"mediaType": DOCKER_MANIFEST, "digest": amd, "size": 1, "platform": {"os": "linux", "architecture": "amd64"}},
            ],
        }
    ).encode()
    registry.add_manifest("team/app", "1.0", DOCKER_LIST, body)
    assert client(registry).image_labels("team/app", "1.0") == (digest_of(body), {"arch": "amd64"})


def test_an_index_inside_an_index_is_an_error(registry, multi):
    index, _, _ = multi
    body = json.dumps({"schemaVersion": 2, "manifests": [{"digest": index, "platform": {"os": "linux", "architecture": "amd64"}}]}).encode()
    registry.add_manifest("team/app", "2.0", "application/vnd.oci.image.index.v1+json", body)
    with pytest.raises(RegistryError, match="an index inside an index"):
        client(registry).image_labels("team/app", "2.0")


@pytest.mark.parametrize("text", ["amd64", "linux/", "linux/amd64/v1/x", "Linux/AMD64", "linux/amd64\n", ""])
def test_platform_strings_are_checked(text):
    with pytest.raises(UserError, match="expected os/architecture"):
        Platform.parse(text)


def test_picking_prefers_the_exact_variant_and_skips_entries_without_a_platform():
    entries = [
        {"digest": "none"},
        {"digest": "junk", "platform": {"os": 1, "architecture": None}},
        {"digest": "v6", "platform": {"os": "linux", "architecture": "arm", "variant": "v6"}},
        {"digest": "v7", "platform": {"os": "linux", "architecture": "arm", "variant": "v7"}},
        {"digest": "att", "platform": {"os": "linux", "architecture": "amd64"}, "annotations": {"vnd.docker.reference.type": "attestation-manifest"}},
    ]
    assert pick(entries, Platform.parse("linux/arm/v7"))["digest"] == "v7"
    assert pick(entries, Platform.parse("linux/arm"))["digest"] == "v6"  # no variant asked: the first arm
    assert pick(entries, Platform.parse("linux/amd64")) is None
    assert str(Platform.parse("linux/arm64/v8")) == "linux/arm64"
