"""A PEP 503 simple index on 127.0.0.1, served from wheel files, for builds that must not reach the internet.

Index paths map to sets of wheels, e.g. {"cu130": [...], "rocm7.2": [...]}; a path can require HTTP basic
auth, which is how tests prove that index credentials reach pip as a BuildKit secret and nowhere else. Each
wheel's core metadata is served beside it (PEP 658), as PyPI and PyTorch's index serve it: a resolver reads
a wheel's requirements without downloading it.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
import secrets
import zipfile
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import unquote

from testkit.local_http import QuietHandler, serve, stop_serving

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler
    from pathlib import Path

_NAME_RE = re.compile(r"^(.+?)-\d")


def project_of(filename: str) -> str:
    found = _NAME_RE.match(filename)
    name = found.group(1) if found else filename
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass
class WheelIndex:
    indexes: dict[str, list[Path]]
    auth: dict[str, tuple[str, str]] = field(default_factory=dict)  # index name -> (user, password)
    flat: set[str] = field(default_factory=set)  # index names served as one page of files (pip's find-links)
    requests: list[str] = field(default_factory=list)
    host: str = "127.0.0.1"  # the address to serve on (a docker bridge's gateway reaches build containers)
    # Projects an index lacks are answered with the upstream index's page (its links are absolute), as
    # PyPI-mirroring indexes such as PyTorch's do: index name -> upstream simple index URL.
    upstream: dict[str, str] = field(default_factory=dict)
    upstream_ca: str | bool = True  # the CA bundle to trust upstream (the machine's, where it has its own)

    def __post_init__(self) -> None:
        # files are addressed per index: two indexes may hold different wheels with the same name
        self._files = {(index, path.name): path for index, paths in self.indexes.items() for path in paths}
        self._digests: dict[tuple[str, str], str] = {}
        self._metadata: dict[tuple[str, str], bytes] = {}
        # Every server gets its own path prefix, so its URLs never repeat: BuildKit keys a RUN step's cache on
        # its text, and a later index on a reused port would otherwise be answered with layers installed from
        # an earlier index's (different) wheels.
        self.prefix = f"/{secrets.token_hex(6)}"
        index = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                if not self.path.startswith(index.prefix + "/"):
                    self.send_response(404)
                    self.end_headers()
                    return
                self.path = self.path[len(index.prefix) :]
                index.requests.append(self.path)
                index._serve(self)

            do_HEAD = do_GET

        self._handler = Handler

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.server.server_address[1]}{self.prefix}"

    def start(self) -> WheelIndex:
        self.server = serve(self._handler, self.host)
        return self

    def stop(self) -> None:
        stop_serving(self.server)

    def _digest(self, key: tuple[str, str]) -> str:
        if key not in self._digests:
            sha = hashlib.sha256()
            with open(self._files[key], "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    sha.update(block)
            self._digests[key] = sha.hexdigest()
        return self._digests[key]

    def _core_metadata(self, key: tuple[str, str]) -> bytes:
        if key not in self._metadata:
            with zipfile.ZipFile(self._files[key]) as wheel:
                name = next(n for n in wheel.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA"))
                self._metadata[key] = wheel.read(name)
        return self._metadata[key]

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        parts = [unquote(p) for p in handler.path.split("?")[0].split("/") if p]
        if parts and parts[0] in self.auth:
            user, password = self.auth[parts[0]]
            expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()
            if handler.headers.get("Authorization") != expected:
                handler.send_response(401)
                handler.send_header("WWW-Authenticate", 'Basic realm="wheels"')
                handler.end_headers()
                return None
        if len(parts) == 3 and parts[0] == "files" and (parts[1], parts[2]) in self._files:
            return self._send_file(handler, self._files[(parts[1], parts[2])])
        if len(parts) == 3 and parts[0] == "files" and parts[2].endswith(".metadata") and (parts[1], parts[2][:-9]) in self._files:
            return self._send_bytes(handler, self._core_metadata((parts[1], parts[2][:-9])))
        if parts and parts[0] in self.indexes:
            wheels = self.indexes[parts[0]]
            if len(parts) == 1 and parts[0] in self.flat:
                body = "".join(f'<a href="{self.prefix}/files/{parts[0]}/{html.escape(p.name)}">{html.escape(p.name)}</a>\n' for p in wheels)
                return self._send_html(handler, body)
            if len(parts) == 1:
                names = sorted({project_of(p.name) for p in wheels})
                body = "".join(f'<a href="{n}/">{n}</a>\n' for n in names)
                return self._send_html(handler, body)
            if len(parts) == 2:
                chosen = [p for p in wheels if project_of(p.name) == parts[1]]
                if chosen:
                    body = "".join(
                        f'<a href="{self.prefix}/files/{parts[0]}/{html.escape(p.name)}#sha256={self._digest((parts[0], p.name))}"'
                        f"{self._metadata_attributes((parts[0], p.name))}>{html.escape(p.name)}</a>\n"
                        for p in chosen
                    )
                    return self._send_html(handler, body)
                if parts[0] in self.upstream:
                    return self._send_upstream(handler, f"{self.upstream[parts[0]].rstrip('/')}/{parts[1]}/", self.upstream_ca)
        handler.send_response(404)
        handler.end_headers()
        return None

    def _metadata_attributes(self, key: tuple[str, str]) -> str:
        if not key[1].endswith(".whl"):
            return ""
        digest = hashlib.sha256(self._core_metadata(key)).hexdigest()
        return f' data-dist-info-metadata="sha256={digest}" data-core-metadata="sha256={digest}"'

    @staticmethod
    def _send_bytes(handler: BaseHTTPRequestHandler, data: bytes) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if handler.command == "GET":
            handler.wfile.write(data)

    @staticmethod
    def _send_upstream(handler: BaseHTTPRequestHandler, url: str, ca: str | bool) -> None:
        import requests

        answer = requests.get(url, timeout=60, headers={"Accept": "text/html"}, verify=ca)
        handler.send_response(answer.status_code)
        handler.send_header("Content-Type", answer.headers.get("Content-Type", "text/html"))
        handler.send_header("Content-Length", str(len(answer.content)))
        handler.end_headers()
        if handler.command == "GET":
            handler.wfile.write(answer.content)

    @staticmethod
    def _send_html(handler: BaseHTTPRequestHandler, body: str) -> None:
        data = f"<!DOCTYPE html><html><body>\n{body}</body></html>\n".encode()
        handler.send_response(200)
        handler.send_header("Content-Type", "text/html")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        if handler.command == "GET":
            handler.wfile.write(data)

    @staticmethod
    def _send_file(handler: BaseHTTPRequestHandler, path: Path) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "application/octet-stream")
        handler.send_header("Content-Length", str(path.stat().st_size))
        handler.end_headers()
        if handler.command == "GET":
            with open(path, "rb") as source:
                while block := source.read(1 << 20):
                    handler.wfile.write(block)
