"""An OCI distribution-spec client on requests: what publishing needs and nothing that needs a daemon.

Ping, anonymous / basic / bearer-token auth (from the WWW-Authenticate challenge, tokens cached per scope),
manifests in all four media types, an image's config labels for a platform without pulling layers (OCI
image indexes and Docker manifest lists included), tags with pagination, tagging by PUT of an existing
manifest (no layer is pushed again), DELETE by digest.

Every answer is treated as hostile until checked: bodies are capped (a manifest is at most 4 MiB by the
distribution spec's guidance), each request has a total deadline and the run a budget
(transport.py), credentials go only where credentials.py allows, every digest is checked against
the bytes it names, and anything malformed is one RegistryError naming the registry and the request.
Connection errors, 429 and 5xx are retried with exponential backoff and jitter, honouring Retry-After.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from buildkit.adapters.registry.credentials import Credentials, load_credentials, may_receive_credentials
from buildkit.adapters.registry.platforms import Platform, image_entries, pick, platform_of
from buildkit.adapters.registry.transport import RegistryError, Reply, Transport, UnsafeUrl, parse_url
from buildkit.errors import Problem, printable

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

__all__ = [
    "Credentials",
    "DeletionUnsupported",
    "Manifest",
    "Registry",
    "RegistryError",
    "Resolved",
    "annotated",
    "load_credentials",
]

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = (OCI_MANIFEST, DOCKER_MANIFEST, OCI_INDEX, DOCKER_LIST)
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)
MANIFEST_LIMIT = 4 * 1024 * 1024  # the distribution spec: registries SHOULD accept manifests up to 4 MiB
CONFIG_LIMIT = 8 * 1024 * 1024  # an image config is kilobytes; its history grows with layers, not data
TOKEN_LIMIT = 256 * 1024  # a token answer is a JWT or two: kilobytes
LISTING_LIMIT = 4 * 1024 * 1024  # one page of tags
# Tags of one repository, all pages together: busy CI repositories hold tens of thousands. Past this a listing is
# a registry that misbehaves (a page of 380,000 tags linking another, 232 times, once cost `publish --keep` 44 s
# of CPU before the page cap).
MAX_TAGS = 500_000
SMALL_LIMIT = 64 * 1024  # answers whose body is not used (ping, PUT, DELETE)
MAX_INDEX_IMAGES = 64  # platforms of one image index: buildx's own list of platforms has about a dozen
DEFAULT_PLATFORM = "linux/amd64"

_CHALLENGE_RE = re.compile(r'(\w+)="([^"]*)"')
_DIGEST_RE = re.compile(r"sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128}")
_REPOSITORY_RE = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")
_TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}")
_TOKEN_RE = re.compile(r"[\x21-\x7e]+")  # one header-safe word


class DeletionUnsupported(RegistryError):
    """The registry does not allow the distribution API's manifest DELETE (405 or UNSUPPORTED)."""


@dataclass(frozen=True)
class Manifest:
    digest: str
    media_type: str
    body: bytes

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEX_TYPES


@dataclass(frozen=True)
class Resolved:
    """What a reference names for one platform: `digest` (an index, or a single-platform manifest) and
    `platform_digest`, the image manifest for the platform (the same digest for a single manifest)."""

    digest: str
    platform_digest: str
    platform: str


@dataclass(frozen=True)
class RegistryImage:
    """One platform's image as the registry holds it: `digest` is the reference's own (an index's, for a
    multi-platform image), `manifest` the platform's image manifest and `config` its checked config."""

    digest: str
    manifest: dict[str, Any]
    config: dict[str, Any]

    @property
    def labels(self) -> dict[str, str]:
        return _labels(self.config)


def annotated(manifest: Manifest, annotations: dict[str, str]) -> Manifest:
    """A copy of a manifest with annotations added: the same config and layers under a digest of its own,
    so a nightly date tag can be deleted later without taking the image's other tags with it."""
    document = json.loads(manifest.body)
    document["annotations"] = {**document.get("annotations", {}), **annotations}
    body = json.dumps(document, separators=(",", ":")).encode()
    return Manifest(_sha256(body), manifest.media_type, body)


def _sha256(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


def _digest_of(digest: str, body: bytes) -> str:
    algorithm = digest.split(":", 1)[0]
    return f"{algorithm}:{hashlib.new(algorithm, body).hexdigest()}"


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
        budget: float = 1800.0,
        ca_bundle: Path | None = None,
        notify: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`timeout`: seconds for one request, redirects and body included; `budget`: seconds of request
        time for the whole run, measured on `clock`; `insecure`: plain http (the default for a registry on this
        machine); `notify`: where a long wait to retry is announced (stderr by default)."""
        self.registry = registry
        try:
            local = parse_url(f"http://{registry}")
        except UnsafeUrl:
            local = None
        if local is None or local.path != "/":
            raise RegistryError(Problem(registry, "is not a registry address (expected host[:port], such as ghcr.io or localhost:5000)"))
        plain = insecure if insecure is not None else local.origin.loopback
        self.base = f"{'http' if plain else 'https'}://{registry}"
        self.origin = parse_url(self.base).origin
        self.credentials = credentials
        self.transport = Transport(registry, timeout, budget, retries, backoff, sleep, str(ca_bundle) if ca_bundle else None, notify, clock)
        if credentials:
            self.transport.secrets |= {credentials.password, credentials.basic.removeprefix("Basic ")} - {""}
        self.tokens: dict[str, str] = {}  # "service|scope" -> token
        self.basic_auth = False  # set once the registry asked for basic auth: later requests send it upfront
        self.lock = threading.Lock()

    @property
    def requests(self) -> int:
        """Every HTTP request made, retries, redirects and token fetches included."""
        return self.transport.requests

    # --- auth and requests --------------------------------------------------------------------------------

    def error(self, call: str, why: str) -> RegistryError:
        return self.transport.error(call, why)

    def _authorization(self, scope: str) -> str | None:
        with self.lock:
            token = next((value for key, value in self.tokens.items() if key.endswith(f"|{scope}")), None)
        if token:
            return f"Bearer {token}"
        if self.credentials and self.basic_auth:
            return self.credentials.basic
        return None

    def request(
        self,
        method: str,
        path: str,
        scope: str,
        ok: tuple[int, ...] = (200,),
        *,
        limit: int = SMALL_LIMIT,
        headers: dict[str, str] | None = None,
        data: bytes | None = None,
    ) -> Reply:
        call = f"{method} {path}"
        url = self.base + path
        authorization = self._authorization(scope)
        reply = self._send(method, url, limit, headers, data, authorization, call)
        if reply.status == 401:
            challenge = reply.headers.get("WWW-Authenticate", "")
            kind = challenge.split(" ", 1)[0].lower()
            if kind == "bearer":
                stale = bool(authorization and authorization.startswith("Bearer "))  # expired, or too narrow
                token = self._token(challenge, scope, call, refresh=stale)
                reply = self._send(method, url, limit, headers, data, f"Bearer {token}", call)
            elif kind == "basic" and self.credentials and authorization != self.credentials.basic:
                self.basic_auth = True
                reply = self._send(method, url, limit, headers, data, self.credentials.basic, call)
        if reply.status not in ok:
            self._fail(call, reply)
        return reply

    def _send(self, method: str, url: str, limit: int, headers: dict[str, str] | None, data: bytes | None, authorization: str | None, call: str) -> Reply:
        return self.transport.send(method, url, limit=limit, headers=headers, data=data, authorization=authorization, bound_to=self.origin, call=call)

    def _token(self, challenge: str, scope: str, call: str, refresh: bool) -> str:
        params = dict(_CHALLENGE_RE.findall(challenge))
        realm = params.get("realm", "")
        key = f"{params.get('service', '')}|{scope}"
        with self.lock:
            if key in self.tokens and not refresh:
                return self.tokens[key]
        try:
            realm_url = parse_url(realm)
        except UnsafeUrl as unsafe:
            raise self.error(
                call, f"the registry asked for a bearer token at the realm {printable(realm, 120)!r}, which {unsafe.reason}; not requested"
            ) from None
        named = f"{realm_url.origin}{realm_url.path.partition('?')[0]}"
        authorization = None
        if self.credentials:
            if not may_receive_credentials(self.origin, realm_url.origin):
                raise self.error(
                    call,
                    f"refusing to send the credentials to the token service {printable(named, 160)} that the "
                    f"registry's challenge names: credentials go only to {self.origin} itself, or to a token "
                    "service over https when the registry is on https (plain http only when both are on "
                    "this machine); check the registry address",
                )
            authorization = self.credentials.basic
        token_call = f"GET {printable(named, 160)} (token for {scope})"
        query = urlencode({"service": params.get("service", ""), "scope": scope})
        token_url = self.transport.url(f"{realm_url.text}{'&' if '?' in realm_url.text else '?'}{query}", token_call)
        reply = self.transport.send("GET", token_url, limit=TOKEN_LIMIT, authorization=authorization, bound_to=realm_url.origin, call=token_call)
        if reply.status in (401, 403):
            raise self.error(
                token_call,
                f"the token service refused the credentials ({reply.status}); check --registry-auth-file, $BUILDKIT_REGISTRY_USER/PASSWORD or docker login",
            )
        if reply.status != 200:
            self._fail(token_call, reply)
        document = _json(self, token_call, reply, "a token answer")
        token = document.get("token") or document.get("access_token")
        if not isinstance(token, str) or not _TOKEN_RE.fullmatch(token):
            raise self.error(token_call, 'the token answer holds no usable "token" or "access_token"')
        with self.lock:
            self.tokens[key] = token
            self.transport.secrets.add(token)
        return token

    def _fail(self, call: str, reply: Reply) -> None:
        status = reply.status
        if status == 401:
            why = "authentication failed: give credentials with --registry-auth-file, $BUILDKIT_REGISTRY_USER/PASSWORD or docker login"
        elif status == 403:
            why = "the credentials may not do this (403): check the account's permissions on the repository"
        elif status == 404:
            why = "not found (404)"
        else:
            why = f"the registry answered {status}: {printable(reply.text)}"
        raise self.error(call, why)

    # --- API ----------------------------------------------------------------------------------------------

    def ping(self) -> None:
        self.request("GET", "/v2/", scope="registry:catalog:*")

    def head_manifest(self, repository: str, reference: str) -> str | None:
        """The digest a tag or digest resolves to, or None when the registry does not have it."""
        path = self._manifest_path(repository, reference)
        reply = self.request("HEAD", path, scope=f"repository:{repository}:pull", ok=(200, 404), headers={"Accept": ", ".join(MANIFEST_TYPES)})
        if reply.status == 404:
            return None
        digest = reply.headers.get("Docker-Content-Digest", "").strip()
        if _DIGEST_RE.fullmatch(digest) and (digest == reference or not _DIGEST_RE.fullmatch(reference)):
            return digest
        found = self.find_manifest(repository, reference)  # no usable digest header: hash the manifest itself
        return found.digest if found else None

    def get_manifest(self, repository: str, reference: str) -> Manifest:
        manifest = self.find_manifest(repository, reference)
        if manifest is None:
            raise self.error(f"GET {self._manifest_path(repository, reference)}", "not found (404)")
        return manifest

    def find_manifest(self, repository: str, reference: str) -> Manifest | None:
        """The manifest, checked: a known media type, a JSON object of the right shape, and a digest that is
        the hash of its bytes (the reference itself when it is a digest)."""
        path = self._manifest_path(repository, reference)
        call = f"GET {path}"
        reply = self.request(
            "GET", path, scope=f"repository:{repository}:pull", ok=(200, 404), limit=MANIFEST_LIMIT, headers={"Accept": ", ".join(MANIFEST_TYPES)}
        )
        if reply.status == 404:
            return None
        document = _json(self, call, reply, "a manifest")
        header_type = reply.headers.get("Content-Type", "").split(";")[0].strip()
        media_type = header_type if header_type in MANIFEST_TYPES else document.get("mediaType")
        if media_type not in MANIFEST_TYPES:
            raise self.error(call, f"the answer is not an image manifest or index (Content-Type {printable(header_type, 80)!r})")
        _check_shape(self, call, media_type, document)
        claimed = reply.headers.get("Docker-Content-Digest", "").strip()
        if _DIGEST_RE.fullmatch(reference) and _digest_of(reference, reply.body) != reference:
            raise self.error(
                call, f"the manifest's bytes hash to {_digest_of(reference, reply.body)}, not the digest asked for: the registry served other content"
            )
        if _DIGEST_RE.fullmatch(claimed) and _digest_of(claimed, reply.body) != claimed:
            raise self.error(call, f"Docker-Content-Digest says {claimed} but the manifest's bytes hash to {_digest_of(claimed, reply.body)}")
        digest = reference if _DIGEST_RE.fullmatch(reference) else claimed if _DIGEST_RE.fullmatch(claimed) else _sha256(reply.body)
        return Manifest(digest, media_type, reply.body)

    def image(self, repository: str, reference: str, platform: str = DEFAULT_PLATFORM) -> RegistryImage | None:
        """The image for `platform` (its manifest and config), without pulling layers; None when the reference
        is absent or has no image for the platform."""
        wanted = Platform.parse(platform)
        manifest = self.find_manifest(repository, reference)
        if manifest is None:
            return None
        image = self._image_for(repository, manifest, wanted)
        if image is None:
            return None
        return RegistryImage(manifest.digest, json.loads(image[0].body), image[1])

    def image_labels(self, repository: str, reference: str, platform: str = DEFAULT_PLATFORM) -> tuple[str, dict[str, str]] | None:
        """(digest, config labels) of the image for `platform` (see image())."""
        found = self.image(repository, reference, platform)
        return None if found is None else (found.digest, found.labels)

    def platform_labels(self, repository: str, reference: str) -> dict[str, tuple[str, dict[str, str]]] | None:
        """Platform ("linux/arm64") -> (its image manifest's digest, config labels), for every image of an
        index, or the one of a single manifest; None when the reference is absent."""
        manifest = self.find_manifest(repository, reference)
        return None if manifest is None else self.labels_per_platform(repository, manifest)

    def labels_per_platform(self, repository: str, manifest: Manifest, only: tuple[str, ...] | None = None) -> dict[str, tuple[str, dict[str, str]]]:
        """platform_labels of a manifest already fetched (find_manifest); of an index, only the platforms in
        `only` where given (two requests per platform: what publish needs, not what the index offers)."""
        if not manifest.is_index:
            config = self._config(repository, manifest)
            return {str(self._config_platform(repository, manifest, config)): (manifest.digest, _labels(config))}
        found: dict[str, tuple[str, dict[str, str]]] = {}
        for platform, entry in self._images(repository, manifest):
            if str(platform) not in found and (only is None or str(platform) in only):
                child = self._child(repository, entry["digest"])
                found[str(platform)] = (child.digest, _labels(self._config(repository, child)))
        return found

    def resolve_digest(self, repository: str, reference: str, platform: str = DEFAULT_PLATFORM) -> Resolved:
        """The digests a reference resolves to for `platform` (see Resolved); a RegistryError when the
        reference is absent or has no image for the platform. For pinning base images."""
        wanted = Platform.parse(platform)
        manifest = self.get_manifest(repository, reference)
        image = self._image_for(repository, manifest, wanted)
        if image is None:
            raise self.error(
                f"GET {self._manifest_path(repository, reference)}",
                f"no image for {wanted}; it has {', '.join(self._platforms(repository, manifest)) or 'none'}",
            )
        return Resolved(manifest.digest, image[0].digest, str(wanted))

    def list_tags(self, repository: str) -> list[str]:
        return list(self.iter_tags(repository))

    def iter_tags(self, repository: str) -> Iterator[str]:
        """The repository's tags, page by page as the registry lists them: a page is read, yielded and
        dropped, so a listing of hundreds of 4 MiB pages never sits in memory at once (transport.pages caps
        their number, MAX_TAGS the tags of all pages together)."""
        first = self.transport.url(f"{self.base}/v2/{self._repository(repository)}/tags/list?n=100", f"GET /v2/{repository}/tags/list")
        scope = f"repository:{repository}:pull"
        fetch = lambda url: self.request("GET", url.path, scope=scope, ok=(200, 404), limit=LISTING_LIMIT)  # noqa: E731
        listed = 0
        for page_number, reply in enumerate(self.transport.pages(first, fetch, f"GET {first.path}")):
            call = f"GET {reply.url.path}"
            if reply.status == 404:
                if page_number:
                    raise self.error(call, "a later page of the tag list is not found (404)")
                return  # no such repository (yet)
            page = _json(self, call, reply, "a tag list").get("tags")
            if page is not None and (not isinstance(page, list) or not all(isinstance(tag, str) for tag in page)):
                raise self.error(call, 'the tag list\'s "tags" is not a list of names')
            listed += len(page or ())
            if listed > MAX_TAGS:
                raise self.error(
                    call,
                    f"the tag list runs past {MAX_TAGS:,} tags over {page_number + 1} pages, more than a repository "
                    "buildkit publishes to holds; refusing to read further (is this the right repository? "
                    "prune its old tags with the registry's own tools)",
                )
            yield from page or []

    def put_manifest(self, repository: str, tag: str, manifest: Manifest) -> str:
        """Tags an existing manifest: the same bytes under another name, so no layer moves."""
        self.request(
            "PUT",
            self._manifest_path(repository, tag),
            scope=f"repository:{repository}:pull,push",
            ok=(201,),
            data=manifest.body,
            headers={"Content-Type": manifest.media_type},
        )
        return _sha256(manifest.body)

    def delete_manifest(self, repository: str, digest: str) -> None:
        """The distribution API's DELETE; DeletionUnsupported where the registry does not offer it."""
        path = self._manifest_path(repository, digest)
        reply = self.request("DELETE", path, scope=f"repository:{repository}:delete", ok=(202, 400, 405))
        if reply.status == 202:
            return
        if reply.status == 405 or "UNSUPPORTED" in _error_codes(reply):
            raise DeletionUnsupported(Problem(self.registry, f"DELETE {path}: the registry does not allow deleting manifests ({reply.status})"))
        self._fail(f"DELETE {path}", reply)

    # --- helpers ------------------------------------------------------------------------------------------

    def _repository(self, repository: str) -> str:
        if not _REPOSITORY_RE.fullmatch(repository) or len(repository) > 255:
            raise RegistryError(Problem(self.registry, f"{printable(repository, 120)!r} is not a repository name"))
        return repository

    def _manifest_path(self, repository: str, reference: str) -> str:
        if not (_TAG_RE.fullmatch(reference) or _DIGEST_RE.fullmatch(reference)):
            raise RegistryError(Problem(self.registry, f"{printable(reference, 160)!r} is neither a tag nor a digest"))
        return f"/v2/{self._repository(repository)}/manifests/{reference}"

    def _images(self, repository: str, manifest: Manifest) -> list[tuple[Platform, dict[str, Any]]]:
        """An index's image entries (attestations left out), at most MAX_INDEX_IMAGES: an index of thousands
        of platforms is no image buildkit built, and reading each would cost two requests."""
        entries = image_entries(json.loads(manifest.body)["manifests"])
        if len(entries) > MAX_INDEX_IMAGES:
            raise self.error(
                f"GET /v2/{repository}/manifests/{manifest.digest}",
                f"the index lists {len(entries)} images, more than the {MAX_INDEX_IMAGES} platforms buildkit "
                "reads from one index; is this the image it should be?",
            )
        return entries

    def _child(self, repository: str, digest: str) -> Manifest:
        """An image manifest an index points to (a nested index is not an image)."""
        child = self.get_manifest(repository, digest)
        if child.is_index:
            raise self.error(f"GET {self._manifest_path(repository, digest)}", "an index inside an index; expected an image manifest")
        return child

    def _config(self, repository: str, manifest: Manifest) -> dict[str, Any]:
        """An image's config, checked: its bytes hash to the digest the manifest names, and its labels
        (`config.Labels`, either may be null) are a map of strings."""
        digest = json.loads(manifest.body)["config"]["digest"]
        path = f"/v2/{self._repository(repository)}/blobs/{digest}"
        reply = self.request("GET", path, scope=f"repository:{repository}:pull", limit=CONFIG_LIMIT)
        if _digest_of(digest, reply.body) != digest:
            raise self.error(f"GET {path}", "the config's bytes do not hash to its digest: the registry served other content")
        config = _json(self, f"GET {path}", reply, "an image config")
        inner = config.get("config") or {}
        labels = inner.get("Labels") or {} if isinstance(inner, dict) else None
        if not isinstance(labels, dict) or not all(isinstance(value, str) for value in labels.values()):
            raise self.error(f"GET {path}", 'the image config\'s "config.Labels" is not a map of strings')
        return config

    def _config_platform(self, repository: str, manifest: Manifest, config: dict[str, Any]) -> Platform:
        platform = platform_of(config)
        if platform is None:
            raise self.error(
                f"GET /v2/{repository}/blobs/{json.loads(manifest.body)['config']['digest']}",
                'the image config names no platform ("os" and "architecture" are required)',
            )
        return platform

    def _image_for(self, repository: str, manifest: Manifest, wanted: Platform) -> tuple[Manifest, dict[str, Any]] | None:
        """(image manifest, config) serving `wanted`, or None."""
        if manifest.is_index:
            entry = pick([entry for _, entry in self._images(repository, manifest)], wanted)
            if entry is None:
                return None
            child = self._child(repository, entry["digest"])
            return child, self._config(repository, child)
        config = self._config(repository, manifest)
        return (manifest, config) if wanted.accepts(self._config_platform(repository, manifest, config)) else None

    def _platforms(self, repository: str, manifest: Manifest) -> list[str]:
        if manifest.is_index:
            return [str(platform) for platform, _ in self._images(repository, manifest)]
        return [str(self._config_platform(repository, manifest, self._config(repository, manifest)))]


def _json(registry: Registry, call: str, reply: Reply, what: str) -> dict[str, Any]:
    """The body as a JSON object, or one RegistryError saying what came instead."""
    try:
        document = json.loads(reply.body.decode("utf-8"))
    except UnicodeDecodeError:
        raise registry.error(call, f"expected {what} (JSON), got bytes that are not UTF-8 text") from None
    except (ValueError, RecursionError):
        start = printable(reply.text, 60)
        hint = " (an HTML page: a proxy or login portal in the way?)" if start.lstrip().startswith("<") else ""
        raise registry.error(call, f"expected {what} (JSON), got {len(reply.body)} bytes that are not JSON{hint}: {start!r}") from None
    if not isinstance(document, dict):
        raise registry.error(call, f"expected {what} (a JSON object), got a JSON {type(document).__name__}")
    return document


def _check_shape(registry: Registry, call: str, media_type: str, document: dict[str, Any]) -> None:
    """An image manifest has a `config` descriptor; an index has `manifests`, a list of descriptors;
    every descriptor's digest is a digest (it becomes part of a URL)."""
    if media_type in INDEX_TYPES:
        entries = document.get("manifests")
        if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
            raise registry.error(call, 'the index has no "manifests" list')
        descriptors = entries
    else:
        config = document.get("config")
        if not isinstance(config, dict):
            raise registry.error(call, 'the manifest has no "config"')
        descriptors = [config]
    for descriptor in descriptors:
        digest = descriptor.get("digest")
        if not isinstance(digest, str) or not _DIGEST_RE.fullmatch(digest):
            raise registry.error(call, f"a descriptor's digest {printable(str(digest), 80)!r} is not a sha256/sha512 digest")


def _labels(config: dict[str, Any]) -> dict[str, str]:
    """Labels of a config that Registry._config checked."""
    return dict((config.get("config") or {}).get("Labels") or {})


def _error_codes(reply: Reply) -> set[str]:
    """The distribution spec's error codes in an error answer ({"errors": [{"code": ...}]}), if any."""
    try:
        errors = json.loads(reply.body).get("errors")
        return {error["code"] for error in errors if isinstance(error.get("code"), str)}
    except (ValueError, RecursionError, AttributeError, TypeError):
        return set()
