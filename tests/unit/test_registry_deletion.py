"""Retention's deletion capability: the distribution DELETE where the registry allows it, the GitHub
Packages REST API behind it (ghcr.io answers 405), a clear refusal where neither exists. A fake registry
and a fake GitHub API on 127.0.0.1 record which origin got which credentials."""

from __future__ import annotations

import pytest

from buildkit.adapters.registry.client import Credentials, Registry, RegistryError
from buildkit.adapters.registry.deletion import GITHUB_API, RetentionUnsupported, deletion_for
from testkit.fake_registry import FakeGitHubApi, FakeRegistry, Journal

TOKEN = "ghp_" + "x" * 36
CREDENTIALS = Credentials("octocat", TOKEN)


@pytest.fixture
def journal():
    return Journal()


@pytest.fixture
def registry(journal):
    with FakeRegistry(journal) as fake:
        fake.require_basic(CREDENTIALS.basic)
        yield fake


@pytest.fixture
def api(journal):
    with FakeGitHubApi(TOKEN, journal) as fake:
        yield fake


def client(fake, credentials=CREDENTIALS):
    return Registry(fake.address, credentials, retries=0, timeout=5)


def test_the_distribution_delete_where_the_registry_allows_it(registry):
    digest = registry.add_image("team/app", "old", {})
    deletion_for(client(registry)).delete("team/app", digest)
    assert ("team/app", "old") not in registry.manifests


def test_a_registry_without_deletion_is_one_clear_error_naming_the_way_out(registry):
    registry.deletable = False
    digest = registry.add_image("team/app", "old", {})
    with pytest.raises(RetentionUnsupported) as caught:
        deletion_for(client(registry)).delete("team/app", digest)
    message = str(caught.value)
    assert message.startswith(f"{registry.address}: DELETE /v2/team/app/manifests/{digest}: the registry does not allow")
    assert "supports no deletion" in message and "without --keep" in message


def test_github_packages_api_deletes_the_version_named_by_the_digest(registry, api, journal):
    registry.deletable = False
    digest = registry.add_image("octo-org/team/pytorch", "old", {})
    others = [f"sha256:{i:064x}" for i in range(150)]
    api.add_versions("orgs", "octo-org", "team/pytorch", [*others, digest])  # on the second page
    deletion = deletion_for(client(registry), github_api=api.url)
    deletion.delete("octo-org/team/pytorch", digest)
    assert api.deleted == [1150]
    listed = [s.path for s in journal.at(api) if s.method == "GET"]
    assert listed[0] == "/orgs/octo-org/packages/container/team%2Fpytorch/versions?per_page=100"
    assert len(listed) == 2
    # the token went to the API as a Bearer token, the registry saw only its own Basic credentials
    assert journal.credentials_by_origin() == {registry.url: {CREDENTIALS.basic}, api.url: {f"Bearer {TOKEN}"}}
    # the next deletion goes straight to the API
    before = len(journal.at(registry))
    deletion.delete("octo-org/team/pytorch", others[0])
    assert len(journal.at(registry)) == before and api.deleted == [1150, 1000]


def test_a_package_owned_by_a_user(registry, api):
    registry.deletable = False
    digest = registry.add_image("octocat/app", "old", {})
    api.add_versions("users", "octocat", "app", [digest])
    deletion_for(client(registry), github_api=api.url).delete("octocat/app", digest)
    assert api.deleted == [1000]


def test_a_version_the_api_does_not_list(registry, api):
    registry.deletable = False
    api.add_versions("orgs", "octo-org", "app", ["sha256:" + "1" * 64])
    with pytest.raises(RegistryError, match="the package octo-org/app has no version sha256:2222"):
        deletion_for(client(registry), github_api=api.url).delete("octo-org/app", "sha256:" + "2" * 64)


def test_a_token_without_the_right_is_named(registry, api):
    registry.deletable = False
    api.add_versions("orgs", "octo-org", "app", ["sha256:" + "1" * 64])
    api.token = "another"
    with pytest.raises(RegistryError, match=r"refused the token \(401\)") as caught:
        deletion_for(client(registry), github_api=api.url).delete("octo-org/app", "sha256:" + "1" * 64)
    assert TOKEN not in str(caught.value)


def test_no_token_no_deletion(registry, api):
    registry.require_basic(None)
    registry.deletable = False
    with pytest.raises(RegistryError, match="needs a token"):
        deletion_for(client(registry, credentials=None), github_api=api.url).delete("octo-org/app", "sha256:" + "1" * 64)


def test_the_token_never_goes_to_an_api_over_plain_http_off_this_machine(registry, journal):
    registry.deletable = False
    with pytest.raises(RegistryError, match=r"refusing to send the registry's token to http://192\.0\.2\.1:80"):
        deletion_for(client(registry), github_api="http://192.0.2.1").delete("octo-org/app", "sha256:" + "1" * 64)


def test_ghcr_gets_the_github_api_by_default():
    deletion = deletion_for(Registry("ghcr.io", CREDENTIALS))
    assert deletion.github is not None and deletion.github.api == GITHUB_API
    assert deletion_for(Registry("registry.example.com", CREDENTIALS)).github is None


def test_malformed_api_answers(registry, api):
    from testkit.fake_registry import json_answer

    registry.deletable = False
    api.on("GET", r"/orgs/octo-org/packages/container/app/versions", json_answer({"message": "not a list"}))
    with pytest.raises(RegistryError, match='expected a list of package versions, each with an integer "id"'):
        deletion_for(client(registry), github_api=api.url).delete("octo-org/app", "sha256:" + "1" * 64)
