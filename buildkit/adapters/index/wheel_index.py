"""PyTorch's wheel index over HTTP: its root page's links and each variant's torch page.

The links on its root page and the file names on each variant's torch page (<index>/cu130/torch/). PEP 503
simple pages; nothing is downloaded but the pages.

Every request is bounded by bounded_http: a timeout per exchange, a total deadline for the command, a
size cap per page, a few retries (connection errors, 429, 5xx; Retry-After read as digits or a date, and
capped). A variant folder that does not exist answers 404, or 403 from S3-backed indexes such as
download.pytorch.org (S3 denies a missing key to callers who may not list the bucket): both mean "no such
variant". At most MAX_FOLDERS variant folders are read: a root page listing thousands is not PyTorch's
index. An index that cannot be read is one error with exit status 1, naming the index without the
credentials its URL may carry.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from html.parser import HTMLParser
from posixpath import basename
from urllib.parse import unquote, urlsplit

from packaging.utils import canonicalize_name, parse_sdist_filename, parse_wheel_filename

from buildkit.adapters.bounded_http import BoundedSession, RemoteFailure
from buildkit.errors import Problem, redact_urls

MISSING = (403, 404)
MAX_PAGE_BYTES = 16 << 20  # the largest real torch page (cu118) is well under 1 MiB
MAX_FOLDERS = 500  # variant folders read per check: PyTorch's index has a few dozen, a check probes about 60


class WheelIndexError(RemoteFailure):
    """The index could not be read: an environment failure (exit 1), not bad input."""


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
    def __init__(
        self,
        url: str,
        timeout: float | None = None,
        max_bytes: int = MAX_PAGE_BYTES,
        workers: int = 8,
        retries: int = 3,
        deadline: float | None = None,
        option: str = "--index URL",
    ) -> None:
        """`timeout`, `deadline`: bounded_http's DEFAULT_TIMEOUT and DEFAULT_DEADLINE unless given; `option`: how
        the command names this index, for the hint in its errors."""
        self.url = url.rstrip("/")
        self.shown = redact_urls(self.url)  # how messages and reports name it
        self.option = option
        self.max_bytes = max_bytes
        self.workers = workers
        self.session = BoundedSession(self.url, timeout=timeout, deadline=deadline, retries=retries, pool_size=workers, failure=WheelIndexError)

    def root_folders(self) -> tuple[str, ...]:
        """The folders the root page links to (a/ -> a); none when there is no root page."""
        page = self._get(f"{self.url}/")
        if page is None:
            return ()
        return tuple(sorted({href.strip("/").rsplit("/", 1)[-1] for href in links(page) if href.endswith("/")}))

    def torch_pages(self, folders: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
        """Folder -> file names on its torch page, for the folders that have one."""
        if len(folders) > MAX_FOLDERS:
            raise WheelIndexError(
                Problem(
                    self.shown,
                    f"{len(folders)} variant folders to read, more than the {MAX_FOLDERS} a "
                    "wheel index can have (its root page lists them); is this a PyTorch "
                    "wheel index? Pass --index URL",
                )
            )
        with ThreadPoolExecutor(self.workers) as pool:
            pages = dict(zip(folders, pool.map(lambda folder: self._get(f"{self.url}/{folder}/torch/"), folders)))
        return {folder: tuple(file_name(href) for href in links(page)) for folder, page in pages.items() if page is not None}

    def project_versions(self, project: str) -> list[str]:
        """Every version a project's page offers (wheels and sdists); [] when the index has no such project.
        A file name that is no valid name (a version of 5,000 digits, which packaging cannot even hold) is
        not a release of the project."""
        page = self._get(f"{self.url}/{canonicalize_name(project)}/")
        versions = []
        for name in (file_name(href) for href in links(page or "")):
            try:
                if name.endswith(".whl"):
                    versions.append(str(parse_wheel_filename(name)[1]))
                elif name.endswith((".tar.gz", ".zip")):
                    versions.append(str(parse_sdist_filename(name)[1]))
            except ValueError:  # InvalidWheelFilename, InvalidSdistFilename, and int()'s limit on digits
                continue
        return versions

    def _get(self, url: str) -> str | None:
        """The page's text, or None when it does not exist."""
        answer = self.fetch(url)
        return None if answer is None else answer[1]

    def fetch(self, url: str, accept: str = "text/html") -> tuple[str, str] | None:
        """(Content-Type, text) of a page, or None when it does not exist."""
        answer = self.session.get(url, limit=self.max_bytes, headers={"Accept": accept})
        if answer.status in MISSING:
            return None
        if answer.status != 200:
            raise WheelIndexError(Problem(self.shown, f"GET {redact_urls(url)}: the index answered {answer.status}; try again later, or pass {self.option}"))
        return answer.headers.get("Content-Type", ""), answer.text


# The index pip install reads, asked of pip in one child process: its configuration's index-url, the [install]
# section's before the [global] one, else pip's own default. Importing pip here would switch off setuptools'
# distutils shim for the rest of this process (Python < 3.12), and torch.utils.cpp_extension then fails to import.
_PIP_INDEX = """
from pip._internal.configuration import Configuration, ConfigurationError
from pip._internal.models.index import PyPI
configuration = Configuration(isolated=False)
configuration.load()
for key in ("install.index-url", "global.index-url"):
    try:
        print(configuration.get_value(key))
        break
    except ConfigurationError:
        pass
else:
    print(PyPI.simple_url)
"""


def default_package_index() -> str:
    """The index `pip install` uses on this machine: $PIP_INDEX_URL, pip's configured index-url (its [install]
    section's before its [global] one, as pip install reads them), else pip's own default (read from pip, so no
    index is written into buildkit)."""
    if os.environ.get("PIP_INDEX_URL"):
        return os.environ["PIP_INDEX_URL"].split()[0]
    try:
        answer = subprocess.run([sys.executable, "-c", _PIP_INDEX], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        answer = None
    if answer is not None and answer.returncode == 0 and answer.stdout.strip():
        return answer.stdout.split()[0]
    raise WheelIndexError(Problem("pip", "cannot tell which package index pip uses here (pip did not answer); set PIP_INDEX_URL or pass the index explicitly"))
