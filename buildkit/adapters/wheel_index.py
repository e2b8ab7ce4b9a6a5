"""PyTorch's wheel index over HTTP: the links on its root page and the file names on each variant's
torch page (<index>/cu130/torch/). PEP 503 simple pages; nothing is downloaded but the pages.

Every request has a timeout, a size cap and a few retries (connection errors, 429, 5xx). A variant folder
that does not exist answers 404, or 403 from S3-backed indexes such as download.pytorch.org (S3 denies a
missing key to callers who may not list the bucket): both mean "no such variant". An index that cannot be
read is one error with exit status 1.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from posixpath import basename
from urllib.parse import unquote, urlsplit

import requests
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from buildkit.errors import Problem, UserError

MISSING = (403, 404)
MAX_PAGE_BYTES = 16 << 20  # the largest real torch page (cu118) is well under 1 MiB


class WheelIndexError(UserError):
    """The index could not be read: an environment failure, not bad input."""

    exit_code = 1


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag == "a" and href:
            self.hrefs.append(href)


def links(html: str) -> list[str]:
    parser = _Links()
    parser.feed(html)
    return parser.hrefs


def file_name(href: str) -> str:
    """torch-2.14.1+cu130-...whl from /whl/cu130/torch-2.14.1%2Bcu130-...whl#sha256=..."""
    return unquote(basename(urlsplit(href).path))


class WheelIndex:
    def __init__(self, url: str, timeout: float = 30.0, max_bytes: int = MAX_PAGE_BYTES, workers: int = 8, retries: int = 3,
                 option: str = "--index URL"):
        self.url = url.rstrip("/")
        self.option = option  # how the command names this index, for the hint in its errors
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.workers = workers
        self.session = requests.Session()
        retry = Retry(total=retries, backoff_factor=0.5, status_forcelist=(429, 500, 502, 503, 504),
                      allowed_methods=("GET",), raise_on_status=False)
        self.session.mount("http://", HTTPAdapter(max_retries=retry, pool_maxsize=workers))
        self.session.mount("https://", HTTPAdapter(max_retries=retry, pool_maxsize=workers))

    def root_folders(self) -> tuple[str, ...]:
        """The folders the root page links to (a/ -> a); none when there is no root page."""
        page = self._get(f"{self.url}/")
        if page is None:
            return ()
        return tuple(sorted({href.strip("/").rsplit("/", 1)[-1] for href in links(page) if href.endswith("/")}))

    def torch_pages(self, folders: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
        """Folder -> file names on its torch page, for the folders that have one."""
        with ThreadPoolExecutor(self.workers) as pool:
            pages = dict(zip(folders, pool.map(lambda folder: self._get(f"{self.url}/{folder}/torch/"), folders)))
        return {folder: tuple(file_name(href) for href in links(page)) for folder, page in pages.items() if page is not None}

    def project_versions(self, project: str) -> list[str]:
        """Every version a project's page offers (wheels and sdists); [] when the index has no such project."""
        page = self._get(f"{self.url}/{canonicalize_name(project)}/")
        versions = []
        for name in (file_name(href) for href in links(page or "")):
            try:
                if name.endswith(".whl"):
                    versions.append(str(parse_wheel_filename(name)[1]))
                elif name.endswith((".tar.gz", ".zip")):
                    versions.append(str(parse_sdist_filename(name)[1]))
            except (InvalidWheelFilename, InvalidSdistFilename):
                continue
        return versions

    def _get(self, url: str) -> str | None:
        """The page's text, or None when it does not exist."""
        answer = self.fetch(url)
        return None if answer is None else answer[1]

    def fetch(self, url: str, accept: str = "text/html") -> tuple[str, str] | None:
        """(Content-Type, text) of a page, or None when it does not exist."""
        try:
            with self.session.get(url, timeout=self.timeout, stream=True, headers={"Accept": accept}) as response:
                if response.status_code in MISSING:
                    return None
                if response.status_code != 200:
                    raise WheelIndexError(Problem(self.url, f"GET {url}: the index answered {response.status_code}; try again later, or pass {self.option}"))
                body = bytearray()
                for chunk in response.iter_content(1 << 16):
                    body += chunk
                    if len(body) > self.max_bytes:
                        raise WheelIndexError(Problem(self.url, f"GET {url}: the page is over {self.max_bytes >> 20} MiB; is this a wheel index?"))
                return response.headers.get("Content-Type", ""), body.decode("utf-8", errors="replace")
        except requests.RequestException as error:
            raise WheelIndexError(Problem(self.url, f"cannot read the wheel index ({type(error).__name__}); check the address and the "
                                                    f"network, or pass {self.option}")) from None


# pip's own default index, asked of pip in a child process: importing pip here would switch off setuptools'
# distutils shim for the rest of this process (Python < 3.12), and torch.utils.cpp_extension then fails to import
_PIP_DEFAULT_INDEX = "from pip._internal.models.index import PyPI; print(PyPI.simple_url)"


def default_package_index() -> str:
    """The index pip installs from on this machine: $PIP_INDEX_URL, pip's configured index-url, else pip's
    own default (read from pip, so no index is written into buildkit)."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"].split()[0]
    for ask in (["-m", "pip", "config", "get", "global.index-url"], ["-c", _PIP_DEFAULT_INDEX]):
        try:
            answer = subprocess.run([sys.executable, *ask], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if answer.returncode == 0 and answer.stdout.strip():
            return answer.stdout.split()[0]
    raise WheelIndexError(Problem("pip", "cannot tell which package index pip uses here (pip did not answer); "
                                         "set PIP_INDEX_URL or pass the index explicitly"))
