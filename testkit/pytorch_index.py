"""A stand-in for download.pytorch.org/whl on 127.0.0.1, with the real index's HTML layout.

The pages follow pytorch/test-infra s3_management/manage_v2.py, which writes the real ones:
  <prefix>/index.html          to_simple_packages_html: one `<a href="torch/">torch</a><br/>` per project
                               (download.pytorch.org/whl/ lists projects, not the cu130/ folders)
  <prefix>/<variant>/torch/    to_simple_package_html: `<h1>Links for torch</h1>`, then per file
                               `<a href="/whl/cu130/torch-2.14.1%2Bcu130-...whl#sha256=..." data-dist-info-metadata=...
                               data-core-metadata=...>torch-2.14.1+cu130-...whl</a><br/>`, and the files at the
                               index root on every variant's page too (is_obj_at_root), then a TIMESTAMP comment.
A folder that does not exist answers 403 AccessDenied, as S3 does for a missing key when the caller may
not list the bucket. Each wheel is a small double (testkit.artifacts.torch_wheel) served with byte ranges:
compat check reads its METADATA, never the whole file.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING
from urllib.parse import quote, unquote

from buildkit.core.vendors import BACKENDS
from testkit.artifacts import send_ranged, torch_wheel
from testkit.local_http import QuietHandler, serve, stop_serving

if TYPE_CHECKING:
    from pathlib import Path

    from buildkit.core.compat.facts import Compat

PREFIX = "whl"
PLATFORM_TAGS = {"linux/amd64": "manylinux_2_28_x86_64", "linux/arm64": "manylinux_2_28_aarch64"}


def torch_wheel_name(release: str, tag: str, python: str, platform: str = "linux/amd64", free_threaded: bool = False) -> str:
    """torch-2.14.1+cu130-cp311-cp311-manylinux_2_28_x86_64.whl"""
    cp = "cp" + python.replace(".", "")
    return f"torch-{release}+{tag}-{cp}-{cp}{'t' if free_threaded else ''}-{PLATFORM_TAGS.get(platform, platform)}.whl"


def wheels_from_compat(compat: Compat) -> dict[str, list[str]]:
    """Variant folder -> torch wheel names: exactly what the data says the index holds."""
    folders: dict[str, list[str]] = {}
    for minor, release in compat.torch.items():
        for backend in BACKENDS:
            for version in release.backends[backend]:
                facts = compat.backends[(backend, version)]
                for patch in release.releases:
                    for python in release.python:
                        for platform in compat.platforms(minor, backend, version):
                            folders.setdefault(facts.index_tag, []).append(torch_wheel_name(patch, facts.index_tag, python, platform))
    return folders


@dataclass
class PyTorchIndex:
    folders: dict[str, list[str]]  # variant folder (cu130) -> file names on its torch page
    root_files: list[str] = field(default_factory=list)  # files at the index root, listed on every page
    root_lists_variants: bool = False  # list the variant folders on the root page instead of the projects
    requests: list[str] = field(default_factory=list)
    real: dict[str, Path] = field(default_factory=dict)  # file name -> a real wheel served under it (else a double)

    def __post_init__(self) -> None:
        index = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                index.requests.append(self.path)
                path = unquote(self.path.split("?")[0])
                if path.endswith(".whl"):  # a real wheel, or a double whose METADATA pins what its variant pins
                    name = path.rsplit("/", 1)[-1]
                    return send_ranged(self, index.real.get(name) or torch_wheel(name))
                status, body = index._page(self.path.split("?")[0])
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/html" if status == 200 else "application/xml")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return None

        self._handler = Handler

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/{PREFIX}"

    def start(self) -> PyTorchIndex:
        self.server = serve(self._handler)
        return self

    def stop(self) -> None:
        stop_serving(self.server)

    def _page(self, path: str) -> tuple[int, str]:
        parts = [unquote(p) for p in path.split("/") if p and p != "index.html"]
        if parts == [PREFIX]:
            names = sorted(f"{folder}/" for folder in self.folders) if self.root_lists_variants else ["torch/"]
            return 200, _html([f'<a href="{name}">{name.rstrip("/")}</a><br/>' for name in names])
        if len(parts) == 2 and parts[0] == PREFIX and parts[1] in self.folders:
            return 200, _html(['<a href="torch/">torch</a><br/>'])
        if len(parts) == 3 and parts[0] == PREFIX and parts[1] in self.folders and parts[2] == "torch":
            files = [(f"{PREFIX}/{parts[1]}/{name}", name) for name in self.folders[parts[1]]]
            files += [(f"{PREFIX}/{name}", name) for name in self.root_files]
            return 200, _html(["<h1>Links for torch</h1>", *(_link(key, name) for key, name in sorted(files))])
        return 403, '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>'


def _link(key: str, name: str) -> str:
    digest = hashlib.sha256(name.encode()).hexdigest()
    meta = hashlib.sha256(digest.encode()).hexdigest()
    href = "/" + quote(key)  # the real keys carry + as %2B
    return f'<a href="{href}#sha256={digest}" data-dist-info-metadata="sha256={meta}" data-core-metadata="sha256={meta}">{name}</a><br/>'


def _html(lines: list[str]) -> str:
    body = "\n".join(f"    {line}" for line in lines)
    return f"<!DOCTYPE html>\n<html>\n  <body>\n{body}\n  </body>\n</html>\n<!--TIMESTAMP 1786000000-->"
