"""Registry credentials: where they come from, and where they may go.

From, first found wins: --registry-auth-file (a docker config.json or {"username", "password"}),
$BUILDKIT_REGISTRY_USER / $BUILDKIT_REGISTRY_PASSWORD, then the docker config's `auths`. A file that
cannot be used is one UserError naming the file and the entry, never the secret.

To: the registry's own origin (scheme, host, port). Another origin (a bearer challenge's token realm,
the GitHub API) only when no one on the network can have chosen it: the registry spoke over https, and
so does the other origin; or both are on this machine. A plain-http registry's challenge could have been
written by anyone on the path, so it may not send the password anywhere but back to the registry.
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from buildkit.adapters.files.inputs import read_input
from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from buildkit.adapters.registry.transport import Origin

MAX_CREDENTIALS_BYTES = 4 * 1024 * 1024  # a docker config.json with every registry a machine logs in to is kilobytes

USER_ENV, PASSWORD_ENV = "BUILDKIT_REGISTRY_USER", "BUILDKIT_REGISTRY_PASSWORD"


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)

    @property
    def basic(self) -> str:
        """The Basic Authorization value, UTF-8 encoded (requests' own encoding is Latin-1 and fails on
        other characters)."""
        return "Basic " + self.docker_auth

    @property
    def docker_auth(self) -> str:
        """base64 of user:password, UTF-8 encoded: the `auth` of a docker config.json entry."""
        return base64.b64encode(f"{self.username}:{self.password}".encode()).decode("ascii")


def may_receive_credentials(registry: Origin, target: Origin) -> bool:
    """Whether credentials for `registry` may be sent to `target` (see the module docstring)."""
    if target == registry:
        return True
    if registry.scheme == "https":
        return target.scheme == "https"
    return registry.loopback and target.loopback


def load_credentials(registry: str, auth_file: Path | None = None, environ: Mapping[str, str] = os.environ) -> Credentials | None:
    """Credentials for `registry` (a host[:port]), or None for anonymous access."""
    if auth_file is not None:
        found = _from_document(_read_json(auth_file, "--registry-auth-file"), registry, str(auth_file))
        if found is None:
            raise UserError(Problem(str(auth_file), f"holds no credentials for {registry}"))
        return found
    if environ.get(USER_ENV) and environ.get(PASSWORD_ENV):
        return Credentials(environ[USER_ENV], environ[PASSWORD_ENV])
    config = Path(environ.get("DOCKER_CONFIG") or Path.home() / ".docker") / "config.json"
    if not config.exists():
        return None
    where = "$DOCKER_CONFIG/config.json" if environ.get("DOCKER_CONFIG") else "~/.docker/config.json"
    return _from_document(_read_json(config, where), registry, str(config))


def _read_json(path: Path, option: str) -> object:
    data = read_input(path, option, MAX_CREDENTIALS_BYTES, "expected a JSON credentials file (a docker config.json)")
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise UserError(Problem(str(path), "is not UTF-8 text; expected a JSON credentials file")) from None
    except json.JSONDecodeError as error:
        raise UserError(Problem(str(path), f"is not valid JSON ({error.msg})", line=error.lineno)) from None
    except (ValueError, RecursionError):  # numbers of thousands of digits, thousands of nested arrays
        raise UserError(Problem(str(path), "is not a usable JSON credentials file")) from None


_EXPECTED = 'expected a docker config.json with "auths", or {"username": "...", "password": "..."}'


def _from_document(document: object, registry: str, where: str) -> Credentials | None:
    if not isinstance(document, dict):
        raise UserError(Problem(where, _EXPECTED))
    if "username" in document or "password" in document:
        username, password = document.get("username"), document.get("password")
        if not isinstance(username, str) or not isinstance(password, str):
            raise UserError(Problem(where, '"username" and "password" must both be strings'))
        return Credentials(username, password)
    auths = document.get("auths", {})
    if not isinstance(auths, dict):
        raise UserError(Problem(where, "must be an object of registry -> credentials", key="auths"))
    for key, entry in auths.items():
        if key.removeprefix("https://").removeprefix("http://").split("/")[0] != registry:
            continue
        found = _from_entry(entry, where, f'auths."{registry}"')
        if found is not None:
            return found
    return None


def _from_entry(entry: object, where: str, key: str) -> Credentials | None:
    """One `auths` entry: {"auth": base64("user:password")} as docker login writes it, or
    {"username", "password"}; an entry with neither (a credential helper's) gives None."""
    if not isinstance(entry, dict):
        raise UserError(Problem(where, "must be an object", key=key))
    auth = entry.get("auth")
    if auth not in (None, ""):
        if not isinstance(auth, str):
            raise UserError(Problem(where, 'must be a base64 string of "user:password"', key=f"{key}.auth"))
        try:
            raw = base64.b64decode(auth + "=" * (-len(auth) % 4), validate=True)
        except ValueError:
            raise UserError(Problem(where, 'is not base64; expected base64 of "user:password" (docker login writes it)', key=f"{key}.auth")) from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise UserError(Problem(where, "does not decode to UTF-8 text", key=f"{key}.auth")) from None
        if ":" not in text:
            raise UserError(Problem(where, 'does not hold "user:password" (no ":")', key=f"{key}.auth"))
        user, _, secret = text.partition(":")
        return Credentials(user, secret)
    username, password = entry.get("username"), entry.get("password", "")
    if username is None:
        return None
    if not isinstance(username, str) or not isinstance(password, str):
        raise UserError(Problem(where, '"username" and "password" must both be strings', key=key))
    return Credentials(username, password)
