"""A real registry for tests: Debian's docker-registry (distribution 2.8) on 127.0.0.1 with a temporary
storage folder, optionally behind htpasswd basic auth or bearer-token auth served by a small token
endpoint here, and a fault-injecting proxy for retry and outage tests."""

from __future__ import annotations

import base64
import datetime
import http.client
import json
import shutil
import socket
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import parse_qs, urlsplit

import requests

from testkit.local_http import QuietHandler, serve, stop_serving

if TYPE_CHECKING:
    import io
    from collections.abc import Mapping
    from http.server import BaseHTTPRequestHandler
    from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]  # an AF_INET socket's name: (host, port)
        return port


class TokenServer:
    """Issues registry JWTs (RS256, x5c) to the right user: what a registry's token service does."""

    def __init__(self, folder: Path, user: str, password: str, service: str = "buildkit-test") -> None:
        import jwt  # noqa: F401  (test extra)
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import NameOID

        self.service, self.issuer, self.user, self.password = service, "buildkit-test-issuer", user, password
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "buildkit-test-token")])
        now = datetime.datetime.now(datetime.timezone.utc)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .sign(self.key, hashes.SHA256())
        )
        self.cert_path = folder / "token-cert.pem"
        self.cert_path.write_bytes(self.cert.public_bytes(serialization.Encoding.PEM))
        self.issued = 0
        server = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                """The distribution spec's token request: Basic credentials, scopes in the query."""
                expected = "Basic " + base64.b64encode(f"{server.user}:{server.password}".encode()).decode()
                server._answer(self, self.headers.get("Authorization") == expected, parse_qs(urlsplit(self.path).query).get("scope", []))

            def do_POST(self) -> None:
                """The OAuth2 password grant that containerd (the engine's pusher) tries first: a form with
                username, password and space-separated scopes."""
                length = int(self.headers.get("Content-Length") or 0)
                form = parse_qs(self.rfile.read(length).decode() if length else "")
                given = (form.get("username", [""])[0], form.get("password", [""])[0])
                scopes = [scope for field in form.get("scope", []) for scope in field.split()]
                server._answer(self, form.get("grant_type") == ["password"] and given == (server.user, server.password), scopes)

        self.server = serve(Handler)
        self.realm = f"http://127.0.0.1:{self.server.server_address[1]}/token"

    def _answer(self, handler: BaseHTTPRequestHandler, authorized: bool, scopes: list[str]) -> None:
        import jwt
        from cryptography.hazmat.primitives import serialization

        if not authorized:
            handler.send_response(401)
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        access = []
        for scope in scopes:
            kind, name, actions = scope.split(":", 2)
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "sub": self.user,
            "aud": self.service,
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": uuid.uuid4().hex,
            "access": access,
        }
        x5c = base64.b64encode(self.cert.public_bytes(serialization.Encoding.DER)).decode()
        token = jwt.encode(claims, self.key, algorithm="RS256", headers={"x5c": [x5c]})
        self.issued += 1
        body = json.dumps({"token": token, "access_token": token}).encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def stop(self) -> None:
        stop_serving(self.server)


@dataclass
class RegistryProcess:
    folder: Path
    auth: str = "none"  # none | htpasswd | token
    user: str = "publisher"
    password: str = field(default_factory=lambda: "pw-" + uuid.uuid4().hex)
    port: int = field(default_factory=free_port)
    token: TokenServer | None = None
    delete: bool = True  # storage.delete.enabled: without it the registry answers a manifest DELETE with 405

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> RegistryProcess:
        binary = shutil.which("docker-registry") or shutil.which("registry")
        if binary is None:
            raise RuntimeError("docker-registry is not installed (Debian package docker-registry; .ci/run installs it)")
        storage = self.folder / "storage"
        storage.mkdir(parents=True, exist_ok=True)
        auth = ""
        if self.auth == "htpasswd":
            import bcrypt

            (self.folder / "htpasswd").write_text(f"{self.user}:{bcrypt.hashpw(self.password.encode(), bcrypt.gensalt(5)).decode()}\n")
            auth = f"auth:\n  htpasswd:\n    realm: buildkit-test\n    path: {self.folder / 'htpasswd'}\n"
        elif self.auth == "token":
            self.token = TokenServer(self.folder, self.user, self.password)
            auth = (
                f"auth:\n  token:\n    realm: {self.token.realm}\n    service: {self.token.service}\n"
                f"    issuer: {self.token.issuer}\n    rootcertbundle: {self.token.cert_path}\n"
            )
        config = self.folder / "config.yml"
        config.write_text(
            "version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n"
            f"    rootdirectory: {storage}\n  delete:\n    enabled: {str(self.delete).lower()}\nhttp:\n  addr: {self.address}\n{auth}"
        )
        with open(self.folder / "registry.log", "w") as log:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                requests.get(f"http://{self.address}/v2/", timeout=1)
                return self
            except requests.ConnectionError:
                time.sleep(0.1)
        raise RuntimeError(f"docker-registry did not start: {(self.folder / 'registry.log').read_text()[-2000:]}")

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        if self.token:
            self.token.stop()

    def auth_file(self, password: str | None = None) -> Path:
        path = self.folder / f"auth-{uuid.uuid4().hex[:6]}.json"
        path.write_text(json.dumps({"username": self.user, "password": password or self.password}))
        return path


class FaultProxy:
    """Forwards to a registry; can answer buildkit's own client with 500/429 for a while, and can stop
    (refusing connections) when a request matches, as a registry that goes away mid-publish does.
    The engine's pushes pass through untouched: the faults are for buildkit's retry logic."""

    def __init__(self, upstream: str, port: int | None = None) -> None:
        self.upstream = upstream
        self.port = port or free_port()
        self.faults: list[int] = []  # statuses to answer, one per matching request, in order
        self.stop_on: str | None = None  # "PUT /v2/...": stop before forwarding the first such request
        self.seen: list[str] = []
        self.lock = threading.Lock()
        proxy = self

        class Handler(QuietHandler):
            protocol_version = "HTTP/1.1"

            def handle_one_request(self) -> None:
                # The engine tries TLS first and falls back to plain HTTP only when the answer starts with
                # "HTTP/" (containerd's HTTPFallback); http.server answers a ClientHello as HTTP/0.9, with no
                # status line, so the push failed. Answer as Go's server (docker-registry) does.
                if cast("io.BufferedReader", self.rfile).peek(1)[:1] == b"\x16":  # rfile: the socket's buffered reader
                    self.wfile.write(b"HTTP/1.1 400 Bad Request\r\nConnection: close\r\n\r\n400 Bad Request")
                    self.close_connection = True
                    return
                super().handle_one_request()

            def _handle(self) -> None:
                proxy._forward(self)

            do_GET = do_HEAD = do_PUT = do_POST = do_PATCH = do_DELETE = _handle

        self.server = serve(Handler, port=self.port)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _forward(self, handler: BaseHTTPRequestHandler) -> None:
        line = f"{handler.command} {handler.path}"
        ours = handler.headers.get("User-Agent", "").startswith("python-requests")
        with self.lock:
            self.seen.append(line)
            fault = self.faults.pop(0) if ours and self.faults else None
            stopping = ours and self.stop_on is not None and line.startswith(self.stop_on)
        if stopping:
            threading.Thread(target=self.stop, daemon=True).start()
            handler.close_connection = True
            return
        body = self._body(handler)
        if fault is not None:
            handler.send_response(fault)
            handler.send_header("Retry-After", "1")
            handler.send_header("Content-Length", "0")
            handler.end_headers()
            return
        connection = http.client.HTTPConnection(self.upstream, timeout=120)
        # the body was read whole (de-chunked): send it with a plain length, as http.client does by itself
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in ("host", "connection", "transfer-encoding", "content-length")}
        connection.request(handler.command, handler.path, body=body, headers=headers)
        response = connection.getresponse()
        data = response.read()
        handler.send_response(response.status)
        for key, value in response.getheaders():
            if key.lower() not in ("connection", "transfer-encoding", "content-length"):
                handler.send_header(key, value.replace(self.upstream, self.address))
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(data)
        connection.close()

    def stop(self) -> None:
        stop_serving(self.server)

    @staticmethod
    def _body(handler: BaseHTTPRequestHandler) -> bytes | None:
        if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks: list[bytes] = []
            while True:
                size = int(handler.rfile.readline().strip().split(b";")[0], 16)
                if size == 0:
                    handler.rfile.readline()
                    return b"".join(chunks)
                chunks.append(handler.rfile.read(size))
                handler.rfile.readline()
        length = int(handler.headers.get("Content-Length") or 0)
        return handler.rfile.read(length) if length else None


MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, "
    "application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json"
)


def _manifest(address: str, repository: str, reference: str) -> dict[str, Any]:
    response = requests.get(f"http://{address}/v2/{repository}/manifests/{reference}", headers={"Accept": MANIFEST_TYPES}, timeout=30)
    response.raise_for_status()
    document: dict[str, Any] = response.json()
    return document


def layer_media_types(address: str, repository: str, reference: str) -> set[str]:
    """The media types of the layers a reference holds: an image's, every image's of an index (attestation
    manifests aside), or a BuildKit registry cache's (whose index lists the layers themselves)."""
    document = _manifest(address, repository, reference)
    types = {layer["mediaType"] for layer in document.get("layers", [])}
    for entry in document.get("manifests", []):
        if ".layer." in entry["mediaType"]:
            types.add(entry["mediaType"])
        elif "manifest" in entry["mediaType"] and entry.get("platform", {}).get("os") != "unknown":
            types |= {layer["mediaType"] for layer in _manifest(address, repository, entry["digest"]).get("layers", [])}
    return types


def image_layers(address: str, repository: str, reference: str, platform: str = "linux/amd64") -> list[tuple[str, int]]:
    """An image's layers as the registry stores them, from the bottom: (digest, compressed bytes); of an index,
    its image for `platform`."""
    document = _manifest(address, repository, reference)
    for entry in document.get("manifests", []):
        if "/".join((entry.get("platform", {}).get("os", ""), entry.get("platform", {}).get("architecture", ""))) == platform:
            document = _manifest(address, repository, entry["digest"])
            break
    return [(layer["digest"], int(layer["size"])) for layer in document.get("layers", [])]


class Seeder:
    """Pushes small images and indexes straight through the distribution API (no engine): a config that
    carries labels and a platform, no layers; an index of such images by platform, with a buildx-style
    attestation entry."""

    OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
    OCI_INDEX = "application/vnd.oci.image.index.v1+json"

    def __init__(self, address: str, auth: tuple[str, str] | None = None) -> None:
        self.base, self.auth = f"http://{address}", auth

    def blob(self, repository: str, data: bytes) -> str:
        import hashlib

        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        start = requests.post(f"{self.base}/v2/{repository}/blobs/uploads/", auth=self.auth, timeout=30)
        start.raise_for_status()
        location = start.headers["Location"]
        location = location if location.startswith("http") else self.base + location
        requests.put(location, params={"digest": digest}, data=data, auth=self.auth, timeout=30).raise_for_status()
        return digest

    def manifest(self, repository: str, reference: str, media_type: str, document: Mapping[str, object]) -> str:
        body = json.dumps(document).encode()
        response = requests.put(
            f"{self.base}/v2/{repository}/manifests/{reference}", data=body, auth=self.auth, headers={"Content-Type": media_type}, timeout=30
        )
        response.raise_for_status()
        return response.headers["Docker-Content-Digest"]

    def image(self, repository: str, tag: str, labels: dict[str, str], platform: str = "linux/amd64") -> str:
        os_, architecture, *variant = platform.split("/")
        config = json.dumps(
            {
                "os": os_,
                "architecture": architecture,
                **({"variant": variant[0]} if variant else {}),
                "config": {"Labels": labels},
                "rootfs": {"type": "layers", "diff_ids": []},
            }
        ).encode()
        descriptor = {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": self.blob(repository, config), "size": len(config)}
        return self.manifest(repository, tag, self.OCI_MANIFEST, {"schemaVersion": 2, "mediaType": self.OCI_MANIFEST, "config": descriptor, "layers": []})

    def index(self, repository: str, tag: str, images: dict[str, str]) -> str:
        entries = []
        for platform, digest in images.items():
            os_, architecture, *variant = platform.split("/")
            entries.append(
                {
                    "mediaType": self.OCI_MANIFEST,
                    "digest": digest,
                    "size": self._size(repository, digest),
                    "platform": {"os": os_, "architecture": architecture, **({"variant": variant[0]} if variant else {})},
                }
            )
        first = next(iter(images.values()))
        entries.append(
            {
                "mediaType": self.OCI_MANIFEST,
                "digest": first,
                "size": self._size(repository, first),
                "platform": {"os": "unknown", "architecture": "unknown"},
                "annotations": {"vnd.docker.reference.type": "attestation-manifest", "vnd.docker.reference.digest": first},
            }
        )
        return self.manifest(repository, tag, self.OCI_INDEX, {"schemaVersion": 2, "mediaType": self.OCI_INDEX, "manifests": entries})

    def _size(self, repository: str, digest: str) -> int:
        response = requests.head(f"{self.base}/v2/{repository}/manifests/{digest}", auth=self.auth, timeout=30, headers={"Accept": self.OCI_MANIFEST})
        response.raise_for_status()
        return int(response.headers["Content-Length"])
