"""Scripted HTTP origins for the registry client's hostile-input tests: a registry, a token service and a
GitHub Packages API on 127.0.0.1, each its own origin (its own port, optionally TLS), all recording every
request's Authorization header in one journal, by origin.

The real docker-registry (testkit.registry) is what the client must work with; these serve what no honest
server sends: answers that trickle, stall, never end, lie about their length or their digest, challenges
that name a token service elsewhere, links and redirects to other origins.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import json
import re
import secrets
import ssl
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

if TYPE_CHECKING:
    from pathlib import Path

    from typing_extensions import Self  # typing.Self from Python 3.11

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"


def digest_of(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


@dataclass(frozen=True)
class Seen:
    origin: str
    method: str
    path: str
    authorization: str | None


class Journal:
    """Every request every fake origin received, in order."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self.lock = threading.Lock()

    def record(self, seen: Seen) -> None:
        with self.lock:
            self.seen.append(seen)

    def at(self, origin: FakeOrigin) -> list[Seen]:
        return [s for s in self.seen if s.origin == origin.url]

    def credentials_by_origin(self) -> dict[str, set[str]]:
        """Origin -> every Authorization value it received."""
        found: dict[str, set[str]] = {}
        for seen in self.seen:
            if seen.authorization:
                found.setdefault(seen.origin, set()).add(seen.authorization)
        return found


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # with the query
    headers: dict[str, str]
    body: bytes

    @property
    def route(self) -> str:
        return urlsplit(self.path).path

    @property
    def query(self) -> dict[str, str]:
        return {key: values[0] for key, values in parse_qs(urlsplit(self.path).query).items()}


@dataclass
class Answer:
    """What to send. `length`: the Content-Length to declare ("auto": the body's; None: none, the end of
    the body is the end of the connection; any other value is sent as it is, "-1" or "abc" included)."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes | Callable[[], Iterable[bytes]] = b""
    length: int | str | None = "auto"
    pause: float = 0.0  # seconds between body chunks: a trickle
    head_pause: float = 0.0  # seconds between the bytes of the status line and headers
    stall: bool = False  # read the request, then answer nothing until the origin stops


def json_answer(document: object, status: int = 200, **headers: str) -> Answer:
    return Answer(status, {"Content-Type": "application/json", **headers}, json.dumps(document).encode())


Handler = Callable[[Request], Answer]


class SelfSignedCert:
    """A self-signed certificate for 127.0.0.1, for origins served over TLS."""

    def __init__(self, folder: Path) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "buildkit-test-origin")])
        now = datetime.datetime.now(datetime.timezone.utc)
        cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256())
        )
        folder.mkdir(parents=True, exist_ok=True)
        self.cert = folder / "origin-cert.pem"
        self.key = folder / "origin-key.pem"
        self.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        self.key.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        return context


class FakeOrigin:
    """One origin on 127.0.0.1 answering from routes (method, path regex -> Answer or handler); the
    latest matching route wins, so a test overrides a default behaviour by adding a route."""

    def __init__(self, journal: Journal | None = None, tls: SelfSignedCert | None = None) -> None:
        self.journal = journal or Journal()
        self.routes: list[tuple[str, re.Pattern[str], Answer | Handler]] = []
        self.stopping = threading.Event()
        self.sent_bytes = 0  # body bytes written, all answers together
        origin = self

        class RequestHandler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def handle_one_request(self) -> None:
                try:
                    super().handle_one_request()
                except (ConnectionError, ssl.SSLError, OSError):
                    self.close_connection = True

            def _handle(self) -> None:
                origin._answer(self)

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), RequestHandler)
        self.server.daemon_threads = True
        if tls is not None:
            self.server.socket = tls.server_context().wrap_socket(self.server.socket, server_side=True, do_handshake_on_connect=False)
        self.scheme = "https" if tls else "http"
        threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.address}"

    def on(self, method: str, pattern: str, answer: Answer | Handler) -> None:
        self.routes.append((method, re.compile(pattern), answer))

    def stop(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _answer(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        request = Request(handler.command, handler.path, dict(handler.headers.items()), body)
        self.journal.record(Seen(self.url, request.method, request.path, handler.headers.get("Authorization")))
        route = next(
            (answer for method, pattern, answer in reversed(self.routes) if method in (request.method, "*") and pattern.fullmatch(request.route)), None
        )
        answer = Answer(404) if route is None else route if isinstance(route, Answer) else route(request)
        try:
            self._send(handler, request, answer)
        except (ConnectionError, ssl.SSLError, OSError):
            handler.close_connection = True  # the client went away: the test is about exactly that

    def _send(self, handler: BaseHTTPRequestHandler, request: Request, answer: Answer) -> None:
        if answer.stall:
            self.stopping.wait(120)
            handler.close_connection = True
            return
        length = len(answer.body) if answer.length == "auto" and isinstance(answer.body, bytes) else answer.length
        head = [f"HTTP/1.1 {answer.status} {_reason(answer.status)}"]
        head += [f"{key}: {value}" for key, value in answer.headers.items()]
        if length not in (None, "auto"):
            head.append(f"Content-Length: {length}")
        # No length, a length that is not the body's, or a body framed by the test's own headers: the end of
        # the connection is the end of the body (a keep-alive client would otherwise wait for the rest).
        honest = isinstance(length, int) and isinstance(answer.body, bytes) and length == len(answer.body)
        if not honest or "Transfer-Encoding" in answer.headers:
            head.append("Connection: close")
            handler.close_connection = True
        data = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")
        if answer.head_pause:
            for index in range(len(data)):
                if self.stopping.is_set():
                    return
                handler.wfile.write(data[index : index + 1])
                handler.wfile.flush()
                time.sleep(answer.head_pause)
            data = b""
        if request.method == "HEAD":
            handler.wfile.write(data)
            return
        if isinstance(answer.body, bytes) and not answer.pause:
            # one write: a head and a body in two small writes meet Nagle and delayed ACKs (40 ms each)
            handler.wfile.write(data + answer.body)
            self.sent_bytes += len(answer.body)
            return
        handler.wfile.write(data)
        for chunk in [answer.body] if isinstance(answer.body, bytes) else answer.body():
            if self.stopping.is_set():
                return
            handler.wfile.write(chunk)
            handler.wfile.flush()
            self.sent_bytes += len(chunk)
            if answer.pause:
                time.sleep(answer.pause)


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Whatever"


def trickle(data: bytes, size: int = 1) -> Callable[[], Iterator[bytes]]:
    return lambda: (data[i : i + size] for i in range(0, len(data), size))


def endless(total: int, chunk: int = 1 << 20) -> Callable[[], Iterator[bytes]]:
    """`total` bytes of JSON-looking filler, produced lazily as they are sent."""

    def chunks() -> Iterator[bytes]:
        yield b'{"schemaVersion": 2, "pad": "'
        for _ in range(total // chunk):
            yield b"x" * chunk

    return chunks


class FakeRegistry(FakeOrigin):
    """A distribution-API registry that serves the images and indexes a test adds, behind no auth, basic
    auth or bearer tokens from a FakeTokenService, with a deletable switch."""

    def __init__(self, journal: Journal | None = None, tls: SelfSignedCert | None = None) -> None:
        super().__init__(journal, tls)
        self.blobs: dict[str, bytes] = {}
        self.manifests: dict[tuple[str, str], tuple[str, bytes]] = {}  # (repository, tag or digest) -> (type, body)
        self.basic: str | None = None  # the Authorization value a basic-auth registry accepts
        self.bearer: tuple[str, str] | None = None  # (realm, service)
        self.tokens: set[str] = set()
        self.deletable = True
        self.on("GET", r"/v2/", self.guarded(lambda _request: json_answer({})))
        self.on("*", r"/v2/(?P<name>.+)/manifests/(?P<reference>[^/]+)", self.guarded(self._manifest))
        self.on("GET", r"/v2/(?P<name>.+)/blobs/(?P<digest>[^/]+)", self.guarded(self._blob))
        self.on("GET", r"/v2/(?P<name>.+)/tags/list", self.guarded(self._tags))

    # --- content ---

    def add_image(self, repository: str, tag: str | None, labels: dict[str, str], platform: str = "linux/amd64", media_type: str = OCI_MANIFEST) -> str:
        os, architecture, *variant = platform.split("/")
        config = json.dumps(
            {
                "os": os,
                "architecture": architecture,
                **({"variant": variant[0]} if variant else {}),
                "config": {"Labels": labels},
                "rootfs": {"type": "layers", "diff_ids": []},
            }
        ).encode()
        self.blobs[digest_of(config)] = config
        manifest = json.dumps(
            {"schemaVersion": 2, "mediaType": media_type, "config": {"mediaType": OCI_CONFIG, "digest": digest_of(config), "size": len(config)}, "layers": []}
        ).encode()
        return self.add_manifest(repository, tag, media_type, manifest)

    def add_index(self, repository: str, tag: str, images: dict[str, str], attestation: bool = True) -> str:
        """An index of platform -> image digest, with a buildx-style attestation entry."""
        entries = []
        for platform, digest in images.items():
            os, architecture, *variant = platform.split("/")
            entries.append(
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": digest,
                    "size": 1,
                    "platform": {"os": os, "architecture": architecture, **({"variant": variant[0]} if variant else {})},
                }
            )
        if attestation:
            entries.append(
                {
                    "mediaType": OCI_MANIFEST,
                    "digest": next(iter(images.values())),
                    "size": 1,
                    "platform": {"os": "unknown", "architecture": "unknown"},
                    "annotations": {"vnd.docker.reference.type": "attestation-manifest"},
                }
            )
        body = json.dumps({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}).encode()
        return self.add_manifest(repository, tag, OCI_INDEX, body)

    def add_manifest(self, repository: str, tag: str | None, media_type: str, body: bytes) -> str:
        digest = digest_of(body)
        self.manifests[(repository, digest)] = (media_type, body)
        if tag:
            self.manifests[(repository, tag)] = (media_type, body)
        return digest

    # --- auth ---

    def require_basic(self, authorization: str) -> None:
        self.basic = authorization

    def require_bearer(self, realm: str, service: str = "fake-registry") -> None:
        self.bearer = (realm, service)

    def guarded(self, handler: Handler) -> Handler:
        def guarded(request: Request) -> Answer:
            given = request.headers.get("Authorization", "")
            if self.basic and given != self.basic:
                return Answer(401, {"WWW-Authenticate": 'Basic realm="fake"'})
            if self.bearer and given.removeprefix("Bearer ") not in self.tokens:
                realm, service = self.bearer
                return Answer(401, {"WWW-Authenticate": f'Bearer realm="{realm}",service="{service}"'})
            return handler(request)

        return guarded

    # --- API ---

    def _match(self, request: Request, pattern: str) -> dict[str, str]:
        found = re.fullmatch(pattern, request.route)
        assert found is not None, f"{request.route} is routed here by {pattern}"
        return found.groupdict()

    def _manifest(self, request: Request) -> Answer:
        found = self._match(request, r"/v2/(?P<name>.+)/manifests/(?P<reference>[^/]+)")
        key = (found["name"], found["reference"])
        if request.method == "PUT":
            media_type = request.headers.get("Content-Type", OCI_MANIFEST)
            digest = self.add_manifest(found["name"], found["reference"], media_type, request.body)
            return Answer(201, {"Docker-Content-Digest": digest})
        if request.method == "DELETE":
            if not self.deletable:
                return json_answer({"errors": [{"code": "UNSUPPORTED", "message": "The operation is unsupported."}]}, 405)
            if key not in self.manifests:
                return Answer(404)
            _, body = self.manifests[key]
            for other in [k for k, (_, b) in self.manifests.items() if b == body and k[0] == found["name"]]:
                del self.manifests[other]
            return Answer(202)
        if key not in self.manifests:
            return json_answer({"errors": [{"code": "MANIFEST_UNKNOWN"}]}, 404)
        media_type, body = self.manifests[key]
        return Answer(200, {"Content-Type": media_type, "Docker-Content-Digest": digest_of(body)}, body)

    def _blob(self, request: Request) -> Answer:
        digest = self._match(request, r"/v2/(?P<name>.+)/blobs/(?P<digest>[^/]+)")["digest"]
        if digest not in self.blobs:
            return Answer(404)
        return Answer(200, {"Content-Type": "application/octet-stream"}, self.blobs[digest])

    def _tags(self, request: Request) -> Answer:
        name = self._match(request, r"/v2/(?P<name>.+)/tags/list")["name"]
        tags = sorted(ref for repo, ref in self.manifests if repo == name and not ref.startswith("sha256:"))
        if not tags:
            return Answer(404)
        return json_answer({"name": name, "tags": tags})


class FakeTokenService(FakeOrigin):
    """Issues opaque tokens that `registry` accepts, to callers presenting `expected` (an Authorization
    value) or to anyone when it is None."""

    def __init__(self, registry: FakeRegistry, expected: str | None, journal: Journal | None = None, tls: SelfSignedCert | None = None) -> None:
        super().__init__(journal or registry.journal, tls)
        self.registry, self.expected, self.issued = registry, expected, 0
        self.on("GET", r"/token", self._issue)

    @property
    def realm(self) -> str:
        return f"{self.url}/token"

    def _issue(self, request: Request) -> Answer:
        if self.expected is not None and request.headers.get("Authorization") != self.expected:
            return Answer(401)
        token = secrets.token_urlsafe(16)
        self.registry.tokens.add(token)
        self.issued += 1
        return json_answer({"token": token, "expires_in": 300})


class FakeGitHubApi(FakeOrigin):
    """The GitHub Packages endpoints that retention uses: list the versions of a container package owned
    by an organization or a user (paginated, Link rel="next"), delete one; only with the right Bearer token."""

    def __init__(self, token: str, journal: Journal | None = None, tls: SelfSignedCert | None = None) -> None:
        super().__init__(journal, tls)
        self.token = token
        self.versions: dict[tuple[str, str, str], list[dict[str, object]]] = {}  # (orgs|users, owner, package) -> versions
        self.deleted: list[int] = []
        self.on("GET", r"/(?P<kind>orgs|users)/(?P<owner>[^/]+)/packages/container/(?P<package>[^/]+)/versions", self._list)
        self.on("DELETE", r"/(?P<kind>orgs|users)/(?P<owner>[^/]+)/packages/container/(?P<package>[^/]+)/versions/(?P<id>\d+)", self._delete)

    def add_versions(self, kind: str, owner: str, package: str, digests: list[str]) -> None:
        self.versions[(kind, owner, package)] = [
            {"id": 1000 + index, "name": digest, "metadata": {"package_type": "container", "container": {"tags": []}}} for index, digest in enumerate(digests)
        ]

    def _key(self, request: Request, pattern: str) -> tuple[tuple[str, str, str], dict[str, str]]:
        from urllib.parse import unquote

        matched = re.fullmatch(pattern, request.route)
        assert matched is not None, f"{request.route} is routed here by {pattern}"
        found = matched.groupdict()
        return (found["kind"], found["owner"], unquote(found["package"])), found

    def _authorized(self, request: Request) -> bool:
        return request.headers.get("Authorization") == f"Bearer {self.token}"

    def _list(self, request: Request) -> Answer:
        if not self._authorized(request):
            return json_answer({"message": "Requires authentication"}, 401)
        key, _ = self._key(request, r"/(?P<kind>orgs|users)/(?P<owner>[^/]+)/packages/container/(?P<package>[^/]+)/versions")
        if key not in self.versions:
            return json_answer({"message": "Package not found."}, 404)
        per_page, page = int(request.query.get("per_page", 30)), int(request.query.get("page", 1))
        versions = self.versions[key]
        headers = {}
        if page * per_page < len(versions):
            headers["Link"] = f'<{self.url}{request.route}?per_page={per_page}&page={page + 1}>; rel="next"'
        return json_answer(versions[(page - 1) * per_page : page * per_page], 200, **headers)

    def _delete(self, request: Request) -> Answer:
        if not self._authorized(request):
            return json_answer({"message": "Requires authentication"}, 401)
        key, found = self._key(request, r"/(?P<kind>orgs|users)/(?P<owner>[^/]+)/packages/container/(?P<package>[^/]+)/versions/(?P<id>\d+)")
        versions = self.versions.get(key, [])
        if not any(v["id"] == int(found["id"]) for v in versions):
            return json_answer({"message": "Not Found"}, 404)
        self.versions[key] = [v for v in versions if v["id"] != int(found["id"])]
        self.deleted.append(int(found["id"]))
        return Answer(204, length=0)
