"""Every malformed answer is one RegistryError naming the registry and the request (method and path):
each case below is a fake registry on 127.0.0.1 answering one request badly."""

from __future__ import annotations

import json

import pytest

from buildkit.adapters.registry.client import Registry, RegistryError
from testkit.fake_registry import OCI_INDEX, OCI_MANIFEST, Answer, FakeRegistry, FakeTokenService, digest_of, json_answer

MANIFEST = "/v2/team/app/manifests/1.0"
GOOD_CONFIG = {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": "sha256:" + "a" * 64, "size": 2}


@pytest.fixture
def registry():
    with FakeRegistry() as fake:
        yield fake


def client(fake: FakeRegistry, credentials=None) -> Registry:
    return Registry(fake.address, credentials, retries=0, timeout=5)


def manifest_answer(document, media_type=OCI_MANIFEST, **headers) -> Answer:
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    return Answer(200, {"Content-Type": media_type, **headers}, body)


def refused(fake: FakeRegistry, call, request: str, expected: str) -> str:
    with pytest.raises(RegistryError) as caught:
        call()
    message = str(caught.value)
    assert message.startswith(f"{fake.address}: {request}: "), message
    assert expected in message, message
    assert len(caught.value.problems) == 1
    return message


@pytest.mark.parametrize(
    "answer, expected",
    [
        (
            Answer(200, {"Content-Type": "text/html"}, b"<!doctype html><html><body>Sign in to continue</body></html>"),
            "not JSON (an HTML page: a proxy or login portal in the way?)",
        ),
        (Answer(200, {"Content-Type": OCI_MANIFEST}, b'{"schemaVersion": 2, "config": {', length=5000), "cut short"),
        (Answer(200, {"Content-Type": OCI_MANIFEST}, b'{"schemaVersion": 2, "config": {'), "not JSON"),
        (Answer(200, {"Content-Type": OCI_MANIFEST}, b"\xff\xfe{}"), "not UTF-8"),
        (manifest_answer([1, 2, 3]), "a JSON list"),
        (manifest_answer("a string"), "a JSON str"),
        (manifest_answer({"schemaVersion": 2, "layers": []}), 'the manifest has no "config"'),
        (manifest_answer({"schemaVersion": 2, "config": "sha256:abc"}), 'the manifest has no "config"'),
        (manifest_answer({"schemaVersion": 2, "config": {"digest": "../../../etc/passwd"}}), "is not a sha256/sha512 digest"),
        (manifest_answer({"schemaVersion": 2}, OCI_INDEX), 'the index has no "manifests" list'),
        (manifest_answer({"schemaVersion": 2, "manifests": {"a": 1}}, OCI_INDEX), 'the index has no "manifests" list'),
        (manifest_answer({"schemaVersion": 2, "manifests": ["sha256:x"]}, OCI_INDEX), 'the index has no "manifests" list'),
        (manifest_answer({"schemaVersion": 2, "manifests": [{"digest": 7}]}, OCI_INDEX), "is not a sha256/sha512 digest"),
        (manifest_answer({"schemaVersion": 2, "config": GOOD_CONFIG}, "application/json"), "not an image manifest or index"),
        (manifest_answer({"schemaVersion": 2, "config": GOOD_CONFIG}, "text/plain"), "not an image manifest or index"),
        (
            manifest_answer({"schemaVersion": 2, "config": GOOD_CONFIG}, **{"Docker-Content-Digest": "sha256:" + "0" * 64}),
            "Docker-Content-Digest says sha256:000",
        ),
        (Answer(200, {"Content-Type": OCI_MANIFEST}, b"[" * 100_000 + b"]" * 100_000), "not JSON"),
        (Answer(500, {}, b"\x1b[31mboom\x1b]0;owned\x07"), "the registry answered 500: \\x1b[31mboom\\x1b]0;owned\\x07"),
    ],
)
def test_malformed_manifest_answers(registry, answer, expected):
    registry.on("GET", MANIFEST, answer)
    refused(registry, lambda: client(registry).find_manifest("team/app", "1.0"), f"GET {MANIFEST}", expected)


def test_missing_digest_header_is_computed_from_the_body(registry):
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": GOOD_CONFIG}).encode()
    registry.on("*", MANIFEST, Answer(200, {"Content-Type": OCI_MANIFEST}, body))
    reg = client(registry)
    assert reg.find_manifest("team/app", "1.0").digest == digest_of(body)
    assert reg.head_manifest("team/app", "1.0") == digest_of(body)  # HEAD without the header: GET and hash


def test_media_type_from_the_body_when_the_header_is_generic(registry):
    document = {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": GOOD_CONFIG}
    registry.on("GET", MANIFEST, manifest_answer(document, "application/json"))
    assert client(registry).find_manifest("team/app", "1.0").media_type == OCI_MANIFEST


def test_get_by_digest_verifies_the_bytes(registry):
    body = json.dumps({"schemaVersion": 2, "config": GOOD_CONFIG}).encode()
    asked = "sha256:" + "b" * 64
    registry.on("GET", f"/v2/team/app/manifests/{asked}", Answer(200, {"Content-Type": OCI_MANIFEST}, body))
    refused(
        registry,
        lambda: client(registry).find_manifest("team/app", asked),
        f"GET /v2/team/app/manifests/{asked}",
        f"hash to {digest_of(body)}, not the digest asked for",
    )


def test_head_with_a_foreign_digest_for_a_digest_reference_is_checked_by_get(registry):
    digest = registry.add_image("team/app", None, {})
    registry.on("HEAD", f"/v2/team/app/manifests/{digest}", Answer(200, {"Docker-Content-Digest": "sha256:" + "c" * 64}))
    assert client(registry).head_manifest("team/app", digest) == digest


@pytest.mark.parametrize(
    "config, expected",
    [
        (b"not json", "expected an image config (JSON)"),
        (b'{"config": {"Labels": ["a"]}, "os": "linux", "architecture": "amd64"}', '"config.Labels" is not a map of strings'),
        (b'{"config": {"Labels": {"a": 1}}, "os": "linux", "architecture": "amd64"}', '"config.Labels" is not a map of strings'),
        (b'{"config": "x", "os": "linux", "architecture": "amd64"}', '"config.Labels" is not a map of strings'),
        (b'{"config": {"Labels": {"a": "b"}}}', "names no platform"),
    ],
)
def test_malformed_configs(registry, config, expected):
    digest = digest_of(config)
    registry.blobs[digest] = config
    body = json.dumps({"schemaVersion": 2, "config": {"digest": digest, "size": len(config)}}).encode()
    registry.add_manifest("team/app", "1.0", OCI_MANIFEST, body)
    message = refused(registry, lambda: client(registry).platform_labels("team/app", "1.0"), f"GET /v2/team/app/blobs/{digest}", expected)
    assert "team/app" in message


def test_a_config_that_is_not_what_its_digest_names_is_refused(registry):
    registry.add_image("team/app", "1.0", {"real": "yes"})
    digest = next(iter(registry.blobs))
    registry.blobs[digest] = json.dumps({"os": "linux", "architecture": "amd64", "config": {"Labels": {"real": "no"}}}).encode()
    refused(registry, lambda: client(registry).image_labels("team/app", "1.0"), f"GET /v2/team/app/blobs/{digest}", "do not hash to its digest")


def test_labels_null_anywhere_mean_no_labels(registry):
    config = b'{"os": "linux", "architecture": "amd64", "config": {"Labels": null}}'
    registry.blobs[digest_of(config)] = config
    registry.add_manifest("team/app", "1.0", OCI_MANIFEST, json.dumps({"config": {"digest": digest_of(config)}}).encode())
    assert client(registry).image_labels("team/app", "1.0")[1] == {}


@pytest.mark.parametrize(
    "answer, expected",
    [
        (json_answer({"expires_in": 300}), 'holds no usable "token" or "access_token"'),
        (json_answer({"token": 42}), 'holds no usable "token"'),
        (json_answer({"token": "two words"}), 'holds no usable "token"'),
        (json_answer({"token": "line\r\nX-Injected: 1"}), 'holds no usable "token"'),
        (json_answer(["token"]), "a JSON list"),
        (Answer(200, {"Content-Type": "text/html"}, b"<html>maintenance</html>"), "not JSON"),
        (Answer(401), "the token service refused the credentials (401)"),
        (Answer(500, {}, b"token service down"), "answered 500: token service down"),
    ],
)
def test_malformed_token_answers(registry, answer, expected):
    with FakeTokenService(registry, None) as tokens:
        registry.require_bearer(tokens.realm)
        tokens.on("GET", r"/token", answer)
        refused(registry, lambda: client(registry).ping(), rf"GET {tokens.url}/token (token for registry:catalog:*)", expected)


@pytest.mark.parametrize(
    "challenge, why",
    [
        ('Bearer service="x"', "is not an http(s) URL"),
        ('Bearer realm="ftp://x/token"', "is not an http(s) URL"),
        ('Bearer realm=""', "is not an http(s) URL"),
        ('Bearer realm="http://127.0.0.1:1\\@127.0.0.1/t"', "holds a backslash"),
        ('Bearer realm="http://user@127.0.0.1:1/t"', "names user-info"),
    ],
)
def test_a_bearer_challenge_without_a_usable_realm(registry, challenge, why):
    registry.on("GET", r"/v2/", Answer(401, {"WWW-Authenticate": challenge}))
    message = refused(registry, lambda: client(registry).ping(), "GET /v2/", "asked for a bearer token at the realm")
    assert f"which {why}" in message and message.endswith("; not requested"), message


@pytest.mark.parametrize(
    "document, expected",
    [
        ({"tags": "1.0"}, "is not a list of names"),
        ({"tags": [1, 2]}, "is not a list of names"),
        ([], "a JSON list"),
    ],
)
def test_malformed_tag_lists(registry, document, expected):
    registry.on("GET", r"/v2/team/app/tags/list", json_answer(document))
    refused(registry, lambda: client(registry).list_tags("team/app"), "GET /v2/team/app/tags/list?n=100", expected)


def test_tags_null_is_an_empty_list(registry):
    registry.on("GET", r"/v2/team/app/tags/list", json_answer({"name": "team/app", "tags": None}))
    assert client(registry).list_tags("team/app") == []


@pytest.mark.parametrize(
    "repository, reference", [("Team/App", "1.0"), ("team/../x", "1.0"), ("team/app", "../x"), ("team/app", "1.0?x=1"), ("team/app", "sha256:short")]
)
def test_names_that_are_not_names_never_reach_a_url(registry, repository, reference):
    with pytest.raises(RegistryError, match=r"is not a repository name|is neither a tag nor a digest"):
        client(registry).find_manifest(repository, reference)
    assert registry.journal.seen == []
