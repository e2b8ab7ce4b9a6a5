"""An OCI distribution-spec client on requests: what publishing needs and nothing that needs a daemon.

Ping, anonymous / basic / bearer-token auth (from the WWW-Authenticate challenge, tokens cached per scope),
manifests in all four media types, an image's config labels without pulling layers, tags with pagination,
tagging by PUT of an existing manifest (no layer is pushed again), DELETE by digest. Every request has a
timeout; connection errors, 429 and 5xx are retried with exponential backoff and jitter, honouring
Retry-After. Credentials never reach a log or a message.
"""

from __future__ import annotations

import base64
import json
import os
import random
import re
import threading
import time
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import urljoin

import requests

from buildkit.errors import Problem, UserError

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST, OCI_INDEX, DOCKER_LIST)
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
_CHALLENGE_RE = re.compile(r'(\w+)="([^"]*)"')
_NEXT_RE = re.compile(r'<([^>]+)>;\s*rel="next"')
USER_ENV, PASSWORD_ENV = "BUILDKIT_REGISTRY_USER", "BUILDKIT_REGISTRY_PASSWORD"


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)


class RegistryError(UserError):
    """The registry refused or failed a request: what, which registry, and what to do."""


def load_credentials(registry: str, auth_file: Path | None = None, environ: dict | None = None) -> Credentials | None:
    """--registry-auth-file (a docker config.json or {"username","password"}), else $BUILDKIT_REGISTRY_USER /
    $BUILDKIT_REGISTRY_PASSWORD, else ~/.docker/config.json `auths`. None: anonymous."""
    environ = os.environ if environ is None else environ
    if auth_file is not None:
        try:
            document = json.loads(auth_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise UserError(Problem("--registry-auth-file", f"cannot read {auth_file} as JSON: {error}")) from None
        found = _from_document(document, registry)
        if found is None:
            raise UserError(Problem("--registry-auth-file", f"{auth_file} holds no credentials for {registry}"))
        return found
    if environ.get(USER_ENV) and environ.get(PASSWORD_ENV):
        return Credentials(environ[USER_ENV], environ[PASSWORD_ENV])
    config = Path(environ.get("DOCKER_CONFIG", Path.home() / ".docker")) / "config.json"
    try:
        return _from_document(json.loads(config.read_text(encoding="utf-8")), registry)
    except (OSError, ValueError):
        return None


def _from_document(document: dict, registry: str) -> Credentials | None:
    if "username" in document and "password" in document:
        return Credentials(document["username"], document["password"])
    for key, entry in (document.get("auths") or {}).items():
        if key.removeprefix("https://").removeprefix("http://").split("/")[0] != registry:
            continue
        if entry.get("auth"):
            username, _, password = base64.b64decode(entry["auth"]).decode().partition(":")
            return Credentials(username, password)
        if entry.get("username"):
            return Credentials(entry["username"], entry.get("password", ""))
    return None


@dataclass(frozen=True)
class Manifest:
    digest: str
    media_type: str
    body: bytes


def annotated(manifest: Manifest, annotations: dict[str, str]) -> Manifest:
    """A copy of a manifest with annotations added: the same config and layers under a digest of its own,
    so a nightly date tag can be deleted later without taking the image's other tags with it."""
    document = json.loads(manifest.body)
    document["annotations"] = {**document.get("annotations", {}), **annotations}
    body = json.dumps(document, separators=(",", ":")).encode()
    return Manifest("sha256:" + hashlib.sha256(body).hexdigest(), manifest.media_type, body)


class Registry:
    def __init__(
        self,
        registry: str,
        credentials: Credentials | None = None,
        insecure: bool | None = None,
        timeout: float = 30.0,
        retries: int = 5,
        backoff: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
    ):
        self.registry = registry
        host = registry.split(":")[0]
        plain = insecure if insecure is not None else host in ("localhost", "127.0.0.1")
        self.base = f"{'http' if plain else 'https'}://{registry}"
        self.credentials = credentials
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.sleep = sleep
        self.session = requests.Session()
        self.tokens: dict[str, str] = {}
        self.basic_auth = False  # set once the registry asked for basic auth: later requests send it upfront
        self.lock = threading.Lock()
        self.requests = 0  # every HTTP request made, retries and token fetches included

    # --- transport ----------------------------------------------------------------------------------------

    def _send(self, method: str, url: str, **kwargs) -> requests.Response:
        """One request with retries on connection errors, 429 and 5xx (backoff with jitter, Retry-After)."""
        for attempt in range(self.retries + 1):
            with self.lock:
                self.requests += 1
            try:
                response = self.session.request(method, url, timeout=self.timeout, **kwargs)
            except (requests.ConnectionError, requests.Timeout) as error:
                if attempt == self.retries:
                    raise RegistryError(Problem(self.registry, f"cannot reach the registry ({type(error).__name__}) "
                                                               f"after {self.retries + 1} attempts; check that it is up and the address is right")) from None
                self.sleep(self._delay(attempt, None))
                continue
            if response.status_code == 429 or response.status_code >= 500:
                if attempt == self.retries:
                    return response
                self.sleep(self._delay(attempt, response.headers.get("Retry-After")))
                continue
            return response
        raise AssertionError("unreachable")  # pragma: no cover

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after and retry_after.isdigit():
            return float(retry_after)
        return self.backoff * (2**attempt) * (0.5 + random.random())

    def _token(self, challenge: str, scope: str) -> str:
        params = dict(_CHALLENGE_RE.findall(challenge))
        key = f"{params.get('service')}|{scope}"
        if key in self.tokens:
            return self.tokens[key]
        auth = (self.credentials.username, self.credentials.password) if self.credentials else None
        query = {"service": params.get("service", ""), "scope": scope}
        response = self._send("GET", params.get("realm", ""), params=query, auth=auth)
        if response.status_code in (401, 403):
            raise RegistryError(Problem(self.registry, f"the token service refused the credentials ({response.status_code}); "
                                                       "check --registry-auth-file, $BUILDKIT_REGISTRY_USER/PASSWORD or docker login"))
        response.raise_for_status()
        document = response.json()
        token = document.get("token") or document.get("access_token", "")
        self.tokens[key] = token
        return token

    def request(self, method: str, path: str, scope: str, ok: tuple[int, ...] = (200,), **kwargs) -> requests.Response:
        url = urljoin(self.base, path)
        headers = dict(kwargs.pop("headers", {}))
        key = next((k for k in self.tokens if k.endswith(f"|{scope}")), None)
        if key:
            headers["Authorization"] = f"Bearer {self.tokens[key]}"
        elif self.credentials and self.basic_auth:
            kwargs["auth"] = (self.credentials.username, self.credentials.password)
        response = self._send(method, url, headers=headers, **kwargs)
        if response.status_code == 401:
            challenge = response.headers.get("WWW-Authenticate", "")
            if challenge.lower().startswith("bearer"):
                headers["Authorization"] = f"Bearer {self._token(challenge, scope)}"
                response = self._send(method, url, headers=headers, **kwargs)
            elif challenge.lower().startswith("basic") and self.credentials:
                self.basic_auth = True
                response = self._send(method, url, headers=headers, auth=(self.credentials.username, self.credentials.password), **kwargs)
        if response.status_code not in ok:
            self._fail(method, path, response)
        return response

    def _fail(self, method: str, path: str, response: requests.Response) -> None:
        status = response.status_code
        if status == 401:
            why = "authentication failed: give credentials with --registry-auth-file, $BUILDKIT_REGISTRY_USER/PASSWORD or docker login"
        elif status == 403:
            why = "the credentials may not do this (403): check the account's permissions on the repository"
        elif status == 404:
            why = "not found (404)"
        else:
            why = f"the registry answered {status}: {response.text[:200].strip()}"
        raise RegistryError(Problem(self.registry, f"{method} {path}: {why}"))

    # --- API ----------------------------------------------------------------------------------------------

    def ping(self) -> None:
        self.request("GET", "/v2/", scope="registry:catalog:*")

    def head_manifest(self, repository: str, reference: str) -> str | None:
        """The digest a tag or digest resolves to, or None when the registry does not have it."""
        response = self.request(
            "HEAD", f"/v2/{repository}/manifests/{reference}", scope=f"repository:{repository}:pull",
            ok=(200, 404), headers={"Accept": ", ".join(MANIFEST_TYPES)},
        )
        return response.headers.get("Docker-Content-Digest") if response.status_code == 200 else None

    def get_manifest(self, repository: str, reference: str) -> Manifest:
        manifest = self.find_manifest(repository, reference)
        if manifest is None:
            raise RegistryError(Problem(self.registry, f"GET /v2/{repository}/manifests/{reference}: not found (404)"))
        return manifest

    def find_manifest(self, repository: str, reference: str) -> Manifest | None:
        response = self.request(
            "GET", f"/v2/{repository}/manifests/{reference}", scope=f"repository:{repository}:pull",
            ok=(200, 404), headers={"Accept": ", ".join(MANIFEST_TYPES)},
        )
        if response.status_code == 404:
            return None
        media_type = response.headers.get("Content-Type", "").split(";")[0] or json.loads(response.content).get("mediaType", "")
        return Manifest(response.headers.get("Docker-Content-Digest", ""), media_type, response.content)

    def image_labels(self, repository: str, reference: str) -> tuple[str, dict[str, str]] | None:
        """(digest, config labels) of an image without pulling layers, in two requests; None if absent."""
        manifest = self.find_manifest(repository, reference)
        if manifest is None:
            return None
        document = json.loads(manifest.body)
        if manifest.media_type in INDEX_TYPES:
            entry = next((m for m in document.get("manifests", []) if m.get("platform", {}).get("architecture") == "amd64"),
                         (document.get("manifests") or [None])[0])
            if entry is None:
                return manifest.digest, {}
            document = json.loads(self.get_manifest(repository, entry["digest"]).body)
        blob = self.request("GET", f"/v2/{repository}/blobs/{document['config']['digest']}", scope=f"repository:{repository}:pull")
        return manifest.digest, dict((json.loads(blob.content).get("config") or {}).get("Labels") or {})

    def list_tags(self, repository: str) -> list[str]:
        tags: list[str] = []
        path: str | None = f"/v2/{repository}/tags/list?n=100"
        while path:
            response = self.request("GET", path, scope=f"repository:{repository}:pull", ok=(200, 404))
            if response.status_code == 404:
                return []
            tags.extend(response.json().get("tags") or [])
            found = _NEXT_RE.search(response.headers.get("Link", ""))
            path = found.group(1) if found else None
        return tags

    def put_manifest(self, repository: str, tag: str, manifest: Manifest) -> str:
        """Tags an existing manifest: the same bytes under another name, so no layer moves."""
        response = self.request(
            "PUT", f"/v2/{repository}/manifests/{tag}", scope=f"repository:{repository}:pull,push",
            ok=(201,), data=manifest.body, headers={"Content-Type": manifest.media_type},
        )
        return response.headers.get("Docker-Content-Digest", manifest.digest)

    def delete_manifest(self, repository: str, digest: str) -> None:
        self.request("DELETE", f"/v2/{repository}/manifests/{digest}", scope=f"repository:{repository}:delete", ok=(202,))
