"""Passwords with '@' and ':' are redacted whole, wherever they can appear: index URLs (pip.conf, --index-url)
in logs and errors, and registry credentials in the client's errors."""

from __future__ import annotations

import pytest

from buildkit.adapters.registry.client import Credentials, Registry, RegistryError
from buildkit.adapters.secrets import IndexSettings, Redactor, build_secrets, credentials_in
from buildkit.errors import UserError
from testkit.fake_registry import Answer, FakeRegistry, FakeTokenService


@pytest.mark.parametrize("password", ["p@ss", "p@ss@word", "tok:en:x", "a:b@c:d", "x@y", "s3cr%40t", "ab"])
def test_index_url_passwords_are_redacted_whole(password):
    url = f"https://robot:{password}@pypi.example.com/simple/"
    text = f"Looking in indexes: {url}\nERROR: 401 for {url}"
    redacted = Redactor(credentials_in(text))(text)
    assert password not in redacted and "robot" not in redacted
    assert redacted.count("https://****@pypi.example.com/simple/") == 2


def test_a_decoded_password_is_redacted_too():
    """pip decodes %40 to '@': the password as pip uses it is covered as well as the URL's form."""
    redact = Redactor(credentials_in("https://robot:s3cr%40t-token@pypi.example.com/simple/"))
    assert redact("auth failed for s3cr@t-token") == "auth failed for ****"


def test_token_in_the_user_name_and_host_and_path_stay():
    redact = Redactor(credentials_in("https://gl-token-12345@gitlab.example.com/api/v4/simple"))
    assert redact("GET https://gl-token-12345@gitlab.example.com/api/v4/simple") == "GET https://****@gitlab.example.com/api/v4/simple"


@pytest.mark.parametrize(
    "content, expected",
    [
        ("index-url = https://robot:tok3n-s3cret@pypi.example.com/simple/\n", ":1: a setting before any section header"),
        ("[global]\nhttps://robot:tok3n-s3cret@pypi.example.com/simple/\n  trusted-host\n[x\n", "neither a setting"),
        (
            "[global]\nindex-url = https://robot:tok3n-s3cret@a/simple/\nindex-url = https://robot:tok3n-s3cret@b/\n",
            "setting 'index-url' appears twice in [global]",
        ),
    ],
)
def test_a_broken_pip_conf_is_reported_without_its_lines(tmp_path, content, expected):
    path = tmp_path / "pip.conf"
    path.write_text(content)
    with pytest.raises(UserError) as caught, build_secrets(IndexSettings(pip_conf=path)):
        pass
    message = str(caught.value)
    assert expected in message and str(path) in message
    assert "tok3n-s3cret" not in message and "robot" not in message


def test_registry_errors_never_carry_the_password():
    credentials = Credentials("robot", "pa:ss@w0rd-unique")
    with FakeRegistry() as registry, FakeTokenService(registry, credentials.basic) as tokens:
        registry.require_bearer(tokens.realm)
        tokens.on("GET", r"/token", lambda request: Answer(500, {}, f"echo {request.headers.get('Authorization')} {request.path}".encode()))
        with pytest.raises(RegistryError) as caught:
            Registry(registry.address, credentials, retries=0, timeout=5).ping()
    message = str(caught.value)
    assert "answered 500: echo Basic **** /token?" in message  # what the service echoed, the encoded password hidden
    assert "pa:ss@w0rd-unique" not in message and credentials.basic.split()[1] not in message
    assert "unique" not in repr(credentials)
