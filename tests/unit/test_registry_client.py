"""Registry client pieces that need no server: credentials lookup, annotated copies, retry delays."""

from __future__ import annotations

import base64
import json

from buildkit.adapters.registry.client import DOCKER_MANIFEST, Credentials, Manifest, Registry, annotated, load_credentials
from buildkit.adapters.registry.transport import MAX_RETRY_AFTER


def test_credentials_from_docker_config(tmp_path):
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "auths": {
                    "https://registry.example.com": {"auth": base64.b64encode(b"robot:s3cret").decode()},
                    "other.example.com": {"username": "u", "password": "p"},
                }
            }
        )
    )
    env = {"DOCKER_CONFIG": str(tmp_path)}
    assert load_credentials("registry.example.com", environ=env) == Credentials("robot", "s3cret")
    assert load_credentials("other.example.com", environ=env) == Credentials("u", "p")
    assert load_credentials("nowhere.example.com", environ=env) is None


def test_environment_beats_docker_config_and_the_file_beats_both(tmp_path):
    env = {"DOCKER_CONFIG": str(tmp_path), "BUILDKIT_REGISTRY_USER": "ci", "BUILDKIT_REGISTRY_PASSWORD": "env-pw"}
    assert load_credentials("r.example.com", environ=env) == Credentials("ci", "env-pw")
    auth_file = tmp_path / "auth.json"
    auth_file.write_text(json.dumps({"username": "file", "password": "file-pw"}))
    assert load_credentials("r.example.com", auth_file, environ=env) == Credentials("file", "file-pw")


def test_password_never_shows_in_repr():
    assert "hunter2" not in repr(Credentials("me", "hunter2"))


def test_annotated_copy_has_its_own_digest_and_same_content():
    body = json.dumps({"schemaVersion": 2, "mediaType": DOCKER_MANIFEST, "config": {"digest": "sha256:c"}, "layers": []}).encode()
    original = Manifest("sha256:x", DOCKER_MANIFEST, body)
    copy = annotated(original, {"dev.buildkit.nightly": "20261130"})
    document = json.loads(copy.body)
    assert copy.digest != original.digest and copy.digest.startswith("sha256:")
    assert document["config"] == {"digest": "sha256:c"} and document["annotations"] == {"dev.buildkit.nightly": "20261130"}
    assert annotated(original, {"dev.buildkit.nightly": "20261130"}).digest == copy.digest


def test_retry_delay_honours_retry_after_and_backs_off():
    registry = Registry("127.0.0.1:1", backoff=0.5)
    assert registry.transport.delay(3, "7") == 7.0
    assert registry.transport.delay(0, "99999999") == MAX_RETRY_AFTER  # a hostile Retry-After does not hold the run
    delays = [registry.transport.delay(attempt, None) for attempt in range(4)]
    assert all(0.25 * 2**a <= d <= 0.75 * 2**a for a, d in enumerate(delays))
    assert registry.base == "http://127.0.0.1:1" and Registry("ghcr.io").base == "https://ghcr.io"
