"""A URL's credentials never reach an output: a token is planted in each source of URLs (an option's index
URL, $PIP_INDEX_URL, pip's configuration, a proxy variable, a registry's bearer realm, cosign's output, the
build's index options), the CLI runs as a user runs it, and every output (stdout, stderr) and every file it
wrote is searched for the token. Messages still name the URL, with `****@` for its user-info."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from buildkit.adapters import bounded_http
from buildkit.adapters.files.bundled import COMPAT_DATA, compat_data
from buildkit.core.compat.facts import compat_from_data
from testkit.fake_registry import Answer, FakeOrigin, FakeRegistry
from testkit.pytorch_index import PyTorchIndex, torch_wheel_name, wheels_from_compat

# compat check reads only the index under test: PyPI and the layout indexes of the data are left out
OFFLINE = ("--pypi", "none", "--layout-index", "amd-whl-next=none")

TOKEN = "tok-5ec7e7-planted"
USERINFO = f"robot:{TOKEN}"
DIGEST = "sha256:" + "c" * 64
PAGE = "<!DOCTYPE html><html><body>{}</body></html>"


@pytest.fixture(autouse=True)
def no_waits(monkeypatch):
    monkeypatch.setattr(bounded_http, "wait", lambda seconds: None)


def assert_no_token(result, folder: Path, *inputs: Path) -> None:
    """The token in no output and no file below `folder` but the inputs it was planted in."""
    assert "Traceback" not in result.err, result.err
    assert TOKEN not in result.out and TOKEN not in result.err, (result.out[-2000:], result.err[-2000:])
    assert "robot" not in result.out + result.err
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink() and path not in inputs:
            assert TOKEN.encode() not in path.read_bytes(), f"{path} holds the token"


def matrix_with_range(folder: Path, base: str = f"python@{DIGEST}") -> Path:
    path = folder / "matrix.toml"
    path.write_text(
        f'extends = "default"\nruntime_base = "{base}"\ninclude = [{{ torch = "2.14.1", python = "3.12", flavor = "runtime" }}]\npackages = ["timm>=1.0"]\n'
    )
    return path


@pytest.fixture
def simple_index():
    with FakeOrigin() as origin:
        origin.on("GET", r"/simple/timm/", Answer(200, {}, PAGE.format('<a href="timm-1.0.9-py3-none-any.whl">x</a>').encode()))
        yield origin


@pytest.mark.slow
def test_compat_check_index_option(cli, tmp_path):
    folders = wheels_from_compat(compat_from_data(compat_data()))
    folders["cu126"] += [torch_wheel_name("2.12.2", "cu126", "3.12")]  # a difference: the report and --write have work
    data = tmp_path / "compat.toml"
    data.write_text(COMPAT_DATA.read_text())
    server = PyTorchIndex(folders).start()
    try:
        url = server.url.replace("http://", f"http://{USERINFO}@")
        for options in (("--json",), (), ("--write", "--data", data)):
            result = cli("compat", "check", *OFFLINE, "--index", url, *options)
            assert result.code in (0, 3), result.err
            assert "http://****@127.0.0.1" in result.out
            assert_no_token(result, tmp_path)
    finally:
        server.stop()


def test_compat_check_index_that_fails(cli, tmp_path):
    with FakeOrigin() as origin:
        origin.on("GET", r"/whl/", Answer(500, {}, f"upstream said {USERINFO}".encode()))
        result = cli("compat", "check", *OFFLINE, "--index", f"http://{USERINFO}@{origin.address}/whl")
    assert result.code == 1 and f"http://****@{origin.address}/whl" in result.err
    assert_no_token(result, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("source", ["option", "PIP_INDEX_URL", "pip.conf", "pip.conf [install]"])
def test_lock_package_index_from_each_source(cli, tmp_path, monkeypatch, simple_index, source):
    """`lock` reads releases where pip install would: an [install] index-url comes before the [global] one
    (which here names a port nothing listens on)."""
    url = f"http://{USERINFO}@{simple_index.address}/simple"
    options: tuple[str, ...] = ()
    inputs = []
    if source == "option":
        options = ("--package-index", url)
    elif source == "PIP_INDEX_URL":
        monkeypatch.setenv("PIP_INDEX_URL", url)
    else:
        monkeypatch.delenv("PIP_INDEX_URL", raising=False)
        conf = tmp_path / "config" / "pip" / "pip.conf"  # the user's pip configuration, as `pip config` reads it
        conf.parent.mkdir(parents=True)
        conf.write_text(
            f"[global]\nindex-url = {url}\n" if source == "pip.conf" else f"[global]\nindex-url = http://127.0.0.1:9/simple\n\n[install]\nindex-url = {url}\n"
        )
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
        inputs.append(conf)
    matrix = matrix_with_range(tmp_path)
    ok = cli("lock", "--matrix", matrix, *options)
    assert ok.code == 0, ok.err
    assert_no_token(ok, tmp_path, *inputs)
    simple_index.on("GET", r"/simple/timm/", Answer(200, {}, PAGE.format('<a href="timm-0.9.0-py3-none-any.whl">x</a>').encode()))
    none = cli("lock", "--matrix", matrix, *options)
    assert none.code == 2 and f"no release on http://****@{simple_index.address}/simple satisfies it" in none.err
    assert_no_token(none, tmp_path, *inputs)
    simple_index.on("GET", r"/simple/timm/", Answer(503, {"Retry-After": "2"}))
    failing = cli("lock", "--matrix", matrix, *options)
    assert failing.code == 1 and "retrying in 2 s" in failing.err
    assert_no_token(failing, tmp_path, *inputs)


def test_a_proxy_variable_with_credentials(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", f"http://{USERINFO}@127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "")
    result = cli("compat", "check", *OFFLINE, "--index", "http://127.0.0.1:9/whl")
    assert result.code == 1
    assert_no_token(result, tmp_path)


def test_a_registry_bearer_realm_with_credentials(cli, tmp_path):
    """A realm is refused when it carries user-info: the message quotes it, without the credentials."""
    with FakeRegistry() as registry:
        registry.add_image("python", "3.12-slim", {})
        registry.require_bearer(f"http://{USERINFO}@{registry.address}/token")
        result = cli("lock", "--matrix", matrix_with_range(tmp_path, f"{registry.address}/python:3.12-slim"), "--package-index", "http://127.0.0.1:9/simple")
    assert result.code == 2 and f"http://****@{registry.address}/token" in result.err, result.err
    assert_no_token(result, tmp_path)


COSIGN = """#!/bin/sh
echo "Error: {said} https://{userinfo}@sigstore.example/v2/" >&2
exit 1
"""


@pytest.mark.parametrize(
    "said",
    [
        "GET: UNAUTHORIZED: authentication required at",  # an error: the message says it
        "no matching signatures: a signature that is not trusted, fetched from",  # a finding: the report says it
    ],
)
def test_cosign_output_with_credentials(cli, tmp_path, monkeypatch, said):
    cosign = tmp_path / "cosign"
    cosign.write_text(COSIGN.format(said=said, userinfo=USERINFO))
    cosign.chmod(cosign.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("BUILDKIT_COSIGN", str(cosign))
    key = tmp_path / "cosign.pub"
    key.write_text("-----BEGIN PUBLIC KEY-----\n")
    with FakeRegistry() as registry:
        registry.add_image("team/app", "1.0", {})
        for options in (("--json",), ()):
            result = cli("verify", f"{registry.address}/team/app:1.0", "--key", key, *options)
            assert "https://****@sigstore.example/v2/" in result.out + result.err, (result.out, result.err)
            assert_no_token(result, tmp_path, cosign)


@pytest.mark.slow
def test_build_index_options(tmp_path):
    """The index options become a pip.conf secret; with no engine to build on, nothing says them either."""
    from testkit.runner import run_buildkit

    out = tmp_path / "out"
    result = run_buildkit(
        "build",
        "--select",
        "id=2.14.1-cuda13.0-py3.12-runtime",
        "--out",
        out,
        "--index-url",
        f"https://{USERINFO}@pypi.example/simple/",
        "--extra-index-url",
        f"https://{USERINFO}@extra.example/",
        env={**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"},
    )
    assert result.returncode in (1, 2)
    assert TOKEN not in result.stdout + result.stderr
    assert not out.exists() or all(TOKEN.encode() not in path.read_bytes() for path in out.rglob("*") if path.is_file())
