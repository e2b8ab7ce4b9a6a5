"""Signatures and attestations through the cosign CLI: sign, attest, verify, verify-attestation.

Everything works offline against a registry on 127.0.0.1 with a key pair, the transparency log off
(`--tlog-upload=false` when signing, `--insecure-ignore-tlog` when verifying). A key is a file or any URI
cosign understands (awskms://, gcpkms://, azurekms://, hashivault://, env://); keyless signing (no key:
a Fulcio certificate for the OIDC identity of the GitHub workflow) always uses the public transparency log,
and keyless verification names the identity and issuer the certificate must carry.

Secrets: a key file's password is read by cosign from $COSIGN_PASSWORD and nowhere else, never passed as an
argument; registry credentials reach cosign through a private DOCKER_CONFIG folder, never an argument.
cosign's output is redacted of both before any message shows it.

Only digests are signed or verified (registry/repository@sha256:...): a tag can move between two calls.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildkit.adapters.files.inputs import describe_path
from buildkit.adapters.registry.transport import registry_is_loopback
from buildkit.adapters.secrets import Redactor
from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from buildkit.adapters.registry.client import Credentials

COSIGN_ENV = "BUILDKIT_COSIGN"  # a cosign binary other than the first on PATH
PASSWORD_ENV = "COSIGN_PASSWORD"
TIMEOUT = 300  # seconds per cosign call: each is a few registry round trips
_KEY_URI_SCHEMES = ("awskms://", "gcpkms://", "azurekms://", "hashivault://", "k8s://", "gitlab://", "env://", "pkcs11:", "https://", "http://")
# cosign's words when a signature or attestation is absent or not trusted: a finding, not an error
_NOT_SIGNED = (
    "no signatures found",
    "no matching signatures",
    "no matching attestations",
    "found no attestations",
    "none of the attestations matched",
    "no certificate found",
    "expected identity not found",
)


class CosignError(UserError):
    """cosign is missing, cannot use the key, or the registry refused it: exit 1, one message."""

    exit_code = 1


@dataclass(frozen=True)
class Signer:
    """Who signs: a private key (file or KMS URI), or keyless (key "": the OIDC identity of the CI job)."""

    key: str = ""

    @property
    def keyless(self) -> bool:
        return not self.key


@dataclass(frozen=True)
class Trust:
    """Whose signature counts: a public key (file or KMS URI), or a keyless identity and its OIDC issuer."""

    key: str = ""
    identity: str = ""  # e.g. https://github.com/ORG/REPO/.github/workflows/nightly.yml@refs/heads/main
    issuer: str = ""  # e.g. https://token.actions.githubusercontent.com
    transparency_log: bool = False  # with a key: require a Rekor entry; keyless always does

    def describe(self) -> str:
        return f"key {self.key}" if self.key else f"identity {self.identity} (issuer {self.issuer})"


@dataclass(frozen=True)
class Checked:
    ok: bool
    detail: str


@dataclass(frozen=True)
class Attestations:
    """The in-toto statements of one predicate type whose signatures the trust accepts."""

    statements: tuple[Mapping[str, Any], ...]
    missing: str = ""  # why there are none

    @property
    def predicates(self) -> list[Any]:
        return [statement.get("predicate") for statement in self.statements]


def is_key_uri(key: str) -> bool:
    return key.startswith(_KEY_URI_SCHEMES)


@dataclass
class Cosign:
    """cosign, pointed at one registry: plain HTTP for localhost (as the registry client decides) or when insecure."""

    registry: str
    credentials: Credentials | None = None
    insecure: bool = False
    executable: str = ""
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    timeout: int = TIMEOUT

    def __post_init__(self) -> None:
        explicit = self.executable or self.environ.get(COSIGN_ENV, "")
        found = shutil.which(explicit or "cosign", path=self.environ.get("PATH", os.defpath))
        if found is None:
            where = f"{explicit!r} (${COSIGN_ENV})" if explicit else "cosign on PATH"
            raise CosignError(
                Problem(
                    "cosign",
                    f"{where} not found: install cosign 2.x (Debian 13: apt-get install cosign; "
                    f"or a release from github.com/sigstore/cosign) or point ${COSIGN_ENV} at it",
                )
            )
        self.executable = found
        self.redact = Redactor([self.environ.get(PASSWORD_ENV, ""), *([self.credentials.password] if self.credentials else [])])

    # --- what buildkit does --------------------------------------------------------------------------------

    def sign(self, image: str, signer: Signer) -> None:
        """Sign a digest; the signature goes to the registry next to it (tag sha256-<hex>.sig)."""
        self._run(["sign", "--yes", *self._signing(signer), image], image, signer)

    def attest(self, image: str, predicate_type: str, predicate: Mapping[str, Any], signer: Signer) -> None:
        """Attach a signed in-toto statement (the predicate about the digest) to the registry (sha256-<hex>.att)."""
        with tempfile.TemporaryDirectory(prefix="buildkit-attest-") as folder:
            path = Path(folder) / "predicate.json"
            path.write_text(json.dumps(predicate, sort_keys=True), encoding="utf-8")
            self._run(["attest", "--yes", "--type", predicate_type, "--predicate", str(path), *self._signing(signer), image], image, signer)

    def verify(self, image: str, trust: Trust) -> Checked:
        """Whether the digest carries a signature the trust accepts."""
        result = self._run(["verify", *self._trust(trust), image], image, accept_unsigned=True)
        if result.returncode == 0:
            return Checked(True, f"signed ({trust.describe()})")
        return Checked(False, self._not_signed(result.stderr, trust, "signature"))

    def attestations(self, image: str, predicate_type: str, trust: Trust, name: str = "") -> Attestations:
        """The statements of one predicate type signed for the digest under the trust (none: why not, naming
        the attestation by name, else by its type)."""
        result = self._run(["verify-attestation", "--type", predicate_type, *self._trust(trust), image], image, accept_unsigned=True)
        if result.returncode != 0:
            return Attestations((), self._not_signed(result.stderr, trust, f"{name or predicate_type} attestation"))
        return Attestations(tuple(_statements(result.stdout)))

    def unverified_attestations(self, image: str, predicate_type: str, name: str = "") -> Attestations:
        """The statements of one predicate type attached to the digest, signatures NOT checked (cosign download)."""
        result = self._run(["download", "attestation", "--predicate-type", predicate_type, image], image, accept_unsigned=True)
        statements = tuple(_statements(result.stdout)) if result.returncode == 0 else ()
        return Attestations(statements, "" if statements else f"no {name or predicate_type} attestation is attached")

    # --- arguments ------------------------------------------------------------------------------------------

    def _registry_flags(self) -> list[str]:
        return ["--allow-insecure-registry", "--allow-http-registry"] if self._plain else []

    @property
    def _plain(self) -> bool:
        return self.insecure or registry_is_loopback(self.registry)

    def _signing(self, signer: Signer) -> list[str]:
        if signer.keyless:
            return self._registry_flags()  # Fulcio certificate for the CI job's OIDC token, recorded in Rekor
        # kept out of Rekor (see the module docstring); keyless signatures are always recorded there
        return ["--key", signer.key, "--tlog-upload=false", *self._registry_flags()]

    def _trust(self, trust: Trust) -> list[str]:
        self._check_key(trust.key, "public")
        if trust.key:
            return ["--key", trust.key, *([] if trust.transparency_log else ["--insecure-ignore-tlog"]), *self._registry_flags()]
        return ["--certificate-identity", trust.identity, "--certificate-oidc-issuer", trust.issuer, *self._registry_flags()]

    # --- running cosign -------------------------------------------------------------------------------------

    def _environment(self, folder: str) -> dict[str, str]:
        environment = dict(self.environ)
        if self.credentials is not None:
            config = {"auths": {self.registry: {"auth": self.credentials.docker_auth}}}
            Path(folder, "config.json").write_text(json.dumps(config), encoding="utf-8")
            environment["DOCKER_CONFIG"] = folder
        return environment

    def _check_key(self, key: str, kind: str) -> None:
        what = describe_path(Path(key)) if key and not is_key_uri(key) else None
        if what:  # a FIFO or device would hold cosign itself until its timeout
            what = "no such key file" if what == "no such file" else what
            raise CosignError(Problem(key, f"{what}; give the cosign {kind} key file (cosign generate-key-pair writes cosign.key and cosign.pub) or a KMS URI"))

    def _run(self, arguments: list[str], image: str, signer: Signer | None = None, accept_unsigned: bool = False) -> subprocess.CompletedProcess[str]:
        if signer is not None and signer.key and not is_key_uri(signer.key):
            self._check_key(signer.key, "private")
            if PASSWORD_ENV not in self.environ:
                raise CosignError(Problem(signer.key, f"set ${PASSWORD_ENV} to the key's password (it is read from the environment only)"))
        with tempfile.TemporaryDirectory(prefix="buildkit-cosign-") as folder:
            try:
                result = subprocess.run(
                    [self.executable, *arguments],
                    env=self._environment(folder),
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    errors="replace",
                    timeout=self.timeout,
                )
            except subprocess.TimeoutExpired:
                raise CosignError(Problem(image, f"cosign {arguments[0]} did not finish within {self.timeout} s; is the registry answering?")) from None
        if result.returncode != 0 and not (accept_unsigned and any(words in result.stderr for words in _NOT_SIGNED)):
            raise CosignError(Problem(image, self._failure(arguments[0], result.stderr, signer)))
        return result

    def _failure(self, command: str, stderr: str, signer: Signer | None) -> str:
        text = self.redact(stderr)
        if "decrypt" in text and "decryption failed" in text:
            return f"cosign {command}: ${PASSWORD_ENV} does not open the key {signer.key if signer else ''}".rstrip()
        if any(words in text for words in ("reading key", "loading public key", "PEM")):
            return f"cosign {command}: cannot use the key: {_error_line(text)}"
        if any(
            words in text
            for words in (
                "connection refused",
                "no such host",
                "UNAUTHORIZED",
                "DENIED",
                "MANIFEST_UNKNOWN",
                "NAME_UNKNOWN",
                "server gave HTTP response",
                "x509",
                "i/o timeout",
            )
        ):
            return f"the registry {self.registry} refused cosign {command}: {_error_line(text)}"
        return f"cosign {command} failed: {_error_line(text)}"

    def _not_signed(self, stderr: str, trust: Trust, what: str) -> str:
        error = _error_line(self.redact(stderr))
        if "no signatures found" in error or error.endswith("no matching attestations:"):
            return f"no {what}"
        if "none of the attestations matched" in error:
            return f"no {what} (attached: {error.partition('found: ')[2] or 'none'})"
        return f"{what} present, but none verifies with {trust.describe()} ({error})"


def _error_line(text: str) -> str:
    """cosign's own error: its `Error:` line, without the warnings around it."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [line.removeprefix("Error: ") for line in lines if line.startswith("Error:")]
    return (errors or lines or ["no output"])[-1][:400]


def _statements(stdout: str) -> list[dict[str, Any]]:
    """The in-toto statements inside cosign's DSSE envelopes (one JSON envelope per line)."""
    found = []
    for line in stdout.splitlines():
        try:
            envelope = json.loads(line)
            statement = json.loads(base64.b64decode(envelope["payload"]))
        except (ValueError, KeyError, TypeError):
            continue
        if isinstance(statement, dict):
            found.append(statement)
    return found
