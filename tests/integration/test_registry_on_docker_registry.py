"""The registry client against the real thing (Debian's docker-registry, distribution 2.8, on 127.0.0.1):
indexes and platforms, tags written by PUT of an existing manifest, deletion where it is enabled and
the clear refusal where it is not, bearer tokens from a JWT token service. No engine needed."""

from __future__ import annotations

import shutil
import uuid

import pytest

from buildkit.adapters.registry.client import Credentials, Registry, Resolved
from buildkit.adapters.registry.deletion import RetentionUnsupported, deletion_for
from testkit.registry import RegistryProcess, Seeder

pytestmark = pytest.mark.skipif(not (shutil.which("docker-registry") or shutil.which("registry")), reason="needs Debian's docker-registry")


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    process = RegistryProcess(tmp_path_factory.mktemp("client-registry"), auth="htpasswd").start()
    yield process
    process.stop()


@pytest.fixture
def repository():
    return f"client-{uuid.uuid4().hex[:8]}/app"


def client(process: RegistryProcess) -> Registry:
    return Registry(process.address, Credentials(process.user, process.password), timeout=10)


def seeder(process: RegistryProcess) -> Seeder:
    return Seeder(process.address, (process.user, process.password))


def test_an_index_is_read_per_platform(registry, repository):
    seed = seeder(registry)
    amd = seed.image(repository, "amd", {"arch": "amd64"}, "linux/amd64")
    arm = seed.image(repository, "arm", {"arch": "arm64"}, "linux/arm64")
    index = seed.index(repository, "1.0", {"linux/amd64": amd, "linux/arm64": arm})
    reg = client(registry)
    assert reg.head_manifest(repository, "1.0") == index
    assert reg.image_labels(repository, "1.0") == (index, {"arch": "amd64"})
    assert reg.image_labels(repository, "1.0", platform="linux/arm64") == (index, {"arch": "arm64"})
    assert reg.image_labels(repository, "1.0", platform="linux/ppc64le") is None
    assert reg.platform_labels(repository, "1.0") == {"linux/amd64": (amd, {"arch": "amd64"}), "linux/arm64": (arm, {"arch": "arm64"})}
    assert reg.resolve_digest(repository, "1.0", "linux/arm64") == Resolved(index, arm, "linux/arm64")
    assert reg.resolve_digest(repository, "amd") == Resolved(amd, amd, "linux/amd64")


def test_tags_and_an_absent_repository(registry, repository):
    seed = seeder(registry)
    digest = seed.image(repository, "t000", {})
    manifest = client(registry).get_manifest(repository, digest)
    reg = client(registry)
    for number in range(1, 130):
        reg.put_manifest(repository, f"t{number:03d}", manifest)
    tags = reg.list_tags(repository)  # distribution 2.8 answers in one page; paging is tested on fakes
    assert sorted(tags) == [f"t{number:03d}" for number in range(130)] and len(tags) == 130
    assert client(registry).list_tags(f"client-{uuid.uuid4().hex[:8]}/none") == []


def test_deletion_where_the_registry_allows_it(registry, repository):
    digest = seeder(registry).image(repository, "old", {})
    reg = client(registry)
    deletion_for(reg).delete(repository, digest)
    assert reg.head_manifest(repository, "old") is None


def test_a_registry_with_deletion_disabled_is_a_clear_refusal(tmp_path, repository):
    process = RegistryProcess(tmp_path / "no-delete", delete=False).start()
    try:
        digest = Seeder(process.address).image(repository, "old", {})
        with pytest.raises(RetentionUnsupported, match=r"supports no deletion.*without --keep"):
            deletion_for(Registry(process.address)).delete(repository, digest)
    finally:
        process.stop()


def test_bearer_tokens_from_a_jwt_token_service(tmp_path, repository):
    process = RegistryProcess(tmp_path / "token", auth="token").start()
    try:
        reg = Registry(process.address, Credentials(process.user, process.password))
        reg.ping()
        assert reg.list_tags(repository) == []
        assert reg.image_labels(repository, "absent") is None
        assert process.token.issued == 2  # one per scope: catalog, then the repository
    finally:
        process.stop()
