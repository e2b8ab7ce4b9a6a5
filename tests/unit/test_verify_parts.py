"""The parts of `buildkit verify` that need no registry: references, BuildKit's provenance (a real statement
BuildKit 0.13 pushed), whose signature counts, and cosign's refusals before it runs."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

from buildkit.adapters.registry.client import Registry
from buildkit.adapters.supply_chain.cosign import Cosign, CosignError, Signer, Trust
from buildkit.app.verify import trust_of
from buildkit.core.reference import ImageReference
from buildkit.core.supply_chain.provenance import read_provenance
from buildkit.errors import UserError

FIXTURES = Path(__file__).parent.parent / "fixtures" / "provenance"
PYTHON_BASE = "pkg:docker/python@3.11-slim-bookworm?platform=linux%2Famd64@sha256:098dfdd6f44142ac5faa6575fb5a16167e76cbe0b61b5d0a9ed8d182fc2da3e4"


@pytest.mark.parametrize(
    "text,expected",
    [
        ("127.0.0.1:5000/team/pytorch:2.14.1-rocm7.2-py3.12-runtime", ("127.0.0.1:5000", "team/pytorch", "2.14.1-rocm7.2-py3.12-runtime", "")),
        ("ghcr.io/org/img@sha256:" + "a" * 64, ("ghcr.io", "org/img", "", "sha256:" + "a" * 64)),
        ("localhost/img:1", ("localhost", "img", "1", "")),
        ("python:3.11-slim-bookworm", ("", "python", "3.11-slim-bookworm", "")),
        ("team/pytorch", ("", "team/pytorch", "", "")),
    ],
)
def test_references_split_like_docker(text, expected):
    reference = ImageReference.parse(text)
    assert (reference.registry, reference.repository, reference.tag, reference.digest) == expected
    assert str(reference) == text


def test_bad_references_are_refused():
    assert ImageReference.parse("Not A Reference") is None
    assert ImageReference.parse("127.0.0.1:5000/img:tag").pinned("sha256:" + "b" * 64) == "127.0.0.1:5000/img@sha256:" + "b" * 64


def test_buildkit_provenance_v02_facts():
    statement = json.loads((FIXTURES / "buildkit-0.13-mode-max.json").read_text())
    provenance = read_provenance(statement)
    assert provenance.build_type == "https://mobyproject.org/buildkit@v1"
    assert provenance.materials == (PYTHON_BASE,)
    assert provenance.finished == "2026-11-30T12:39:33.565292443Z"
    assert provenance.fingerprint == ""
    assert provenance.summary().startswith(f"built by https://mobyproject.org/buildkit@v1; from {PYTHON_BASE}; finished 2026-11-30")


def test_provenance_records_the_fingerprint_label():
    statement = json.loads((FIXTURES / "buildkit-0.13-mode-max.json").read_text())
    statement["predicate"]["invocation"]["parameters"]["args"] = {"label:dev.buildkit.fingerprint": "c" * 64, "build-arg:PYTHON": "3.11"}
    provenance = read_provenance(statement)
    assert provenance.fingerprint == "c" * 64 and provenance.parameters["build-arg:PYTHON"] == "3.11"
    assert provenance.summary().endswith("fingerprint cccccccccccc")


def test_slsa_v1_provenance():
    statement = {
        "predicateType": "https://slsa.dev/provenance/v1",
        "predicate": {
            "buildDefinition": {
                "buildType": "https://mobyproject.org/buildkit@v1",
                "externalParameters": {"request": {"args": {"label:dev.buildkit.fingerprint": "d" * 64}}},
                "resolvedDependencies": [{"uri": "pkg:docker/rocm/dev-ubuntu-24.04@7.2.1-complete", "digest": {"sha256": "e" * 64}}],
            },
            "runDetails": {"builder": {"id": "https://github.com/org/repo/actions/runs/1"}, "metadata": {"finishedOn": "2026-11-30T03:00:00Z"}},
        },
    }
    provenance = read_provenance(statement)
    assert provenance.builder == "https://github.com/org/repo/actions/runs/1"
    assert provenance.materials == ("pkg:docker/rocm/dev-ubuntu-24.04@7.2.1-complete@sha256:" + "e" * 64,)
    assert provenance.fingerprint == "d" * 64


@pytest.mark.parametrize(
    "statement",
    [{}, {"predicateType": "https://cyclonedx.org/bom", "predicate": {}}, {"predicateType": "https://slsa.dev/provenance/v0.2", "predicate": "text"}],
)
def test_other_statements_are_not_provenance(statement):
    assert read_provenance(copy.deepcopy(statement)) is None


def test_trust_is_a_key_or_an_identity_with_its_issuer():
    assert trust_of("k.pub", None, None) == Trust(key="k.pub")
    assert trust_of(None, "https://github.com/o/r/.github/workflows/nightly.yml@refs/heads/main", "https://token.actions.githubusercontent.com") == Trust(
        identity="https://github.com/o/r/.github/workflows/nightly.yml@refs/heads/main",
        issuer="https://token.actions.githubusercontent.com",
        transparency_log=True,
    )
    assert trust_of(None, None, None, required=False) is None


@pytest.mark.parametrize(
    "key,identity,issuer,option",
    [
        ("k.pub", "id", "issuer", "--key"),
        (None, "id", None, "--certificate-oidc-issuer"),
        (None, None, "issuer", "--certificate-identity"),
        (None, None, None, "--key"),
    ],
)
def test_unclear_trust_is_a_usage_error(key, identity, issuer, option):
    with pytest.raises(UserError) as raised:
        trust_of(key, identity, issuer)
    assert raised.value.exit_code == 2 and str(raised.value).startswith(option)


def test_missing_cosign_is_one_message_and_exit_1(tmp_path):
    with pytest.raises(CosignError) as raised:
        Cosign("127.0.0.1:5000", environ={"BUILDKIT_COSIGN": str(tmp_path / "cosign"), "PATH": os.environ["PATH"]})
    assert raised.value.exit_code == 1
    assert "($BUILDKIT_COSIGN) not found: install cosign 2.x" in str(raised.value) and str(raised.value).endswith("point $BUILDKIT_COSIGN at it")


def test_cosign_is_found_on_path_or_refused(tmp_path):
    with pytest.raises(CosignError, match="cosign on PATH not found"):
        Cosign("127.0.0.1:5000", environ={"PATH": str(tmp_path)})


def _fake_cosign(tmp_path: Path) -> Path:
    """An executable that records that it ran: the refusals below must come before cosign is run at all."""
    script = tmp_path / "cosign"
    script.write_text(f"#!/bin/sh\ntouch {tmp_path / 'ran'}\n")
    script.chmod(0o755)
    return script


def test_signing_with_a_key_file_needs_cosign_password_in_the_environment(tmp_path):
    key = tmp_path / "cosign.key"
    key.write_text("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\n")
    cosign = Cosign("127.0.0.1:5000", executable=str(_fake_cosign(tmp_path)), environ={"PATH": os.environ["PATH"]})
    with pytest.raises(CosignError, match=r"set \$COSIGN_PASSWORD to the key's password"):
        cosign.sign("127.0.0.1:5000/img@sha256:" + "a" * 64, Signer(str(key)))
    assert not (tmp_path / "ran").exists()


def test_a_missing_key_file_is_named(tmp_path):
    cosign = Cosign("127.0.0.1:5000", executable=str(_fake_cosign(tmp_path)), environ={"PATH": os.environ["PATH"], "COSIGN_PASSWORD": "x"})
    with pytest.raises(CosignError, match="no such key file; give the cosign private key file"):
        cosign.sign("127.0.0.1:5000/img@sha256:" + "a" * 64, Signer(str(tmp_path / "nope.key")))
    with pytest.raises(CosignError, match="no such key file; give the cosign public key file"):
        cosign.verify("127.0.0.1:5000/img@sha256:" + "a" * 64, Trust(key=str(tmp_path / "nope.pub")))
    assert not (tmp_path / "ran").exists()


def test_verify_needs_a_registry_reference_and_a_trust(cli):
    result = cli("verify", "127.0.0.1:5000/img:1")
    assert result.code == 2 and result.err.startswith("error: --key: say whose signature counts")
    result = cli("verify", "python:3.11-slim-bookworm", "--key", "k.pub")
    assert result.code == 2 and "name the registry the image was published to" in result.err
    result = cli("verify", "127.0.0.1:5000/img:1", "--key", "k.pub", "--certificate-identity", "me")
    assert result.code == 2 and result.err.count("\n") == 1


@pytest.mark.parametrize("command", ["verify", "sbom"])
def test_help(cli, command):
    result = cli(command, "--help")
    assert result.code == 0 and f"usage: buildkit {command}" in result.out and "--certificate-identity" in result.out


@pytest.mark.parametrize(
    "registry", ["127.0.0.1:5000", "127.0.0.2:5000", "[::1]:5000", "localhost:5000", "10.0.0.5:5000", "ghcr.io", "localhost.example.com:5000"]
)
def test_cosign_speaks_plain_http_exactly_where_the_registry_client_does(tmp_path, registry):
    """One loopback rule: 127.0.0.0/8, ::1 and localhost are this machine for both."""
    script = tmp_path / "cosign"
    script.write_text(f'#!/bin/sh\necho "$@" > {tmp_path / "args"}\n')
    script.chmod(0o755)
    key = tmp_path / "cosign.pub"
    key.write_text("-----BEGIN PUBLIC KEY-----\n")
    Cosign(registry, executable=str(script), environ={"PATH": os.environ["PATH"]}).verify(f"{registry}/img@sha256:" + "a" * 64, Trust(key=str(key)))
    plain_for_cosign = "--allow-http-registry" in (tmp_path / "args").read_text().split()
    assert plain_for_cosign == Registry(registry).base.startswith("http://") == (registry.split(":5000")[0] in ("127.0.0.1", "127.0.0.2", "[::1]", "localhost"))
