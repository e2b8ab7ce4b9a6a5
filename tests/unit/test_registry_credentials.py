"""Credentials files: every unusable docker config.json or {"username","password"} file is one UserError
naming the file, never the secret; Hypothesis generates files (JSON and not) to hold the client to it."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from buildkit.adapters.registry.client import Credentials, load_credentials
from buildkit.errors import UserError

REGISTRY = "registry.example.com"
SECRET = "s3cr3t-Pa55:w@rd"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def docker_config(entry) -> dict:
    return {"auths": {f"https://{REGISTRY}": entry}}


@pytest.mark.parametrize(
    "document, expected",
    [
        (docker_config({"auth": "not base64 at all!" + SECRET}), 'auths."registry.example.com".auth: is not base64'),
        (docker_config({"auth": b64(b"\xff\xfe" + SECRET.encode())}), "does not decode to UTF-8 text"),
        (docker_config({"auth": b64(b"no-colon-" + SECRET.replace(":", "").encode())}), 'does not hold "user:password"'),
        (docker_config({"auth": 12345}), "must be a base64 string"),
        (docker_config({"auth": ["robot", SECRET]}), "must be a base64 string"),
        (docker_config({"username": "robot", "password": 1234}), '"username" and "password" must both be strings'),
        (docker_config({"username": ["robot"], "password": SECRET}), '"username" and "password" must both be strings'),
        (docker_config("robot:" + SECRET), 'auths."registry.example.com": must be an object'),
        ({"auths": ["robot", SECRET]}, "auths: must be an object"),
        ({"username": "robot", "password": None}, '"username" and "password" must both be strings'),
        ({"username": 7, "password": SECRET}, '"username" and "password" must both be strings'),
        ({"password": SECRET}, '"username" and "password" must both be strings'),
        (["robot", SECRET], "expected a docker config.json"),
        (SECRET, "expected a docker config.json"),
    ],
)
def test_unusable_credentials_are_one_user_error_naming_the_file_not_the_secret(tmp_path, document, expected):
    path = tmp_path / "auth.json"
    path.write_text(json.dumps(document))
    with pytest.raises(UserError) as caught:
        load_credentials(REGISTRY, path, environ={})
    message = str(caught.value)
    assert message.startswith(str(path)) and expected in message, message
    assert SECRET not in message and "Pa55" not in message


@pytest.mark.parametrize(
    "content, expected",
    [
        (b'{"username": "robot", "password": "' + SECRET.encode() + b'"', "is not valid JSON"),
        (b"\xff" + SECRET.encode(), "is not UTF-8 text"),
        (b"[" * 5000 + b"]" * 5000, "is not a usable JSON credentials file"),
        (b'{"n": ' + b"9" * 5000 + b"}", "is not a usable JSON credentials file"),
    ],
)
def test_files_that_are_not_json(tmp_path, content, expected):
    path = tmp_path / "auth.json"
    path.write_bytes(content)
    with pytest.raises(UserError) as caught:
        load_credentials(REGISTRY, path, environ={})
    assert str(caught.value).startswith(str(path)) and expected in str(caught.value)
    assert SECRET not in str(caught.value)


def test_a_missing_auth_file_and_one_without_this_registry(tmp_path):
    with pytest.raises(UserError, match=r"--registry-auth-file: cannot read .*missing\.json: no such file; expected a JSON credentials file"):
        load_credentials(REGISTRY, tmp_path / "missing.json", environ={})
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"auths": {"other.example.com": {"auth": b64(b"a:b")}}}))
    with pytest.raises(UserError, match=f"holds no credentials for {REGISTRY}"):
        load_credentials(REGISTRY, other, environ={})


def test_the_docker_config_is_checked_too_and_helper_entries_mean_anonymous(tmp_path):
    env = {"DOCKER_CONFIG": str(tmp_path)}
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"auths": {REGISTRY: {}}, "credsStore": "desktop"}))
    assert load_credentials(REGISTRY, environ=env) is None
    config.write_text(json.dumps(docker_config({"auth": "%%%"})))
    with pytest.raises(UserError, match=f'{config}: auths."{REGISTRY}".auth: is not base64'):
        load_credentials(REGISTRY, environ=env)
    assert load_credentials(REGISTRY, environ={"DOCKER_CONFIG": str(tmp_path / "none")}) is None


def test_good_entries_including_colons_in_the_password_and_missing_padding(tmp_path):
    env = {"DOCKER_CONFIG": str(tmp_path)}
    auth = b64(f"robot:{SECRET}".encode()).rstrip("=")
    (tmp_path / "config.json").write_text(json.dumps(docker_config({"auth": auth})))
    assert load_credentials(REGISTRY, environ=env) == Credentials("robot", SECRET)


def test_basic_header_encodes_any_password_as_utf8():
    assert Credentials("robot", "pässwörd€").basic == "Basic " + b64("robot:pässwörd€".encode())


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=8,
)
entries = st.one_of(
    json_values,
    st.fixed_dictionaries({}, optional={"auth": st.one_of(json_values, st.binary(max_size=40).map(b64)), "username": json_values, "password": json_values}),
)
documents = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "auths": st.one_of(
                json_values,
                st.dictionaries(st.sampled_from([REGISTRY, f"https://{REGISTRY}/v1/", "http://" + REGISTRY, "other.example.com"]), entries, max_size=3),
            ),
            "username": json_values,
            "password": json_values,
        },
    ),
)


@pytest.mark.slow
@settings(max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(document=documents)
def test_generated_credentials_files_never_crash(tmp_path, document):
    path = tmp_path / "auth.json"
    path.write_text(json.dumps(document))
    try:
        found = load_credentials(REGISTRY, path, environ={})
    except UserError as error:
        refused = str(error)
    else:
        assert isinstance(found, Credentials) and isinstance(found.username, str) and isinstance(found.password, str)
        return
    assert refused.startswith(str(path)) and "Traceback" not in refused


@pytest.mark.slow
@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(content=st.binary(max_size=200), password=st.text(min_size=8, max_size=20).filter(lambda p: p.strip() == p and '"' not in p))
def test_generated_bytes_never_crash_and_never_echo_the_password(tmp_path, content, password):
    path = tmp_path / "auth.json"
    path.write_bytes(content.replace(b"PW", password.encode()) + f'"{password}"'.encode())
    refused = ""
    try:
        load_credentials(REGISTRY, path, environ={})
    except UserError as error:
        refused = str(error)
    assert password not in refused
