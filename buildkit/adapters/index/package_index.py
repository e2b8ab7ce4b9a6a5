"""A project's files on a simple package index (PEP 503 HTML or PEP 691 JSON), as `compat check` reads them.

PyPI answers PEP 691 JSON when asked (`Accept: application/vnd.pypi.simple.v1+json`), with each file's
upload time (PEP 700) and Requires-Python; PyTorch's and AMD's indexes answer HTML, whose anchors carry
data-requires-python. Either way one page per project is read, never a wheel: wheels are read by
byte ranges (adapters/index/remote_wheel.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from html.parser import HTMLParser
from urllib.parse import urljoin

from packaging.utils import canonicalize_name

from buildkit.adapters.index.wheel_index import WheelIndex, WheelIndexError, file_name
from buildkit.errors import Problem, printable, redact_urls

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
ACCEPT = f"{JSON_TYPE}, text/html;q=0.1"
# What a project page may hold: PyPI's torch page lists about 2,000 files, a PyTorch variant's a few hundred. A page
# past MAX_FILES is not a package index's; a file whose name, URL or Requires-Python is past its length is no
# release's and is left out.
MAX_FILES = 20_000
MAX_NAME_CHARS = 255
MAX_URL_CHARS = 2_048
MAX_REQUIRES_PYTHON_CHARS = 256


@dataclass(frozen=True)
class IndexFile:
    filename: str
    url: str
    uploaded: str = ""  # the upload date (YYYY-MM-DD), where the index says (PEP 700)
    requires_python: str = ""
    size: int | None = None


class _Anchors(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, str]] = []  # href, data-requires-python

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "a" and values.get("href"):
            self.found.append((values["href"] or "", values.get("data-requires-python") or ""))


class TooManyFiles(ValueError):
    """A project page listing more than MAX_FILES files."""


def parse_project_page(page_url: str, content_type: str, body: str) -> list[IndexFile]:
    """The files a project page lists, with URLs made absolute against the page (TooManyFiles past MAX_FILES)."""
    if content_type.split(";")[0].strip() == JSON_TYPE:
        document = json.loads(body)
        files = document.get("files", []) if isinstance(document, dict) else []
        if not isinstance(files, list):
            files = []
        listed = [
            (
                str(entry.get("filename", "")),
                str(entry.get("url", "")),
                str(entry.get("upload-time") or "")[:10],
                str(entry.get("requires-python") or ""),
                entry.get("size") if type(entry.get("size")) is int else None,
            )
            for entry in files[: MAX_FILES + 1]
            if isinstance(entry, dict) and entry.get("filename") and entry.get("url")
        ]
    else:
        parser = _Anchors()
        parser.feed(body)
        listed = [(file_name(href), href, "", requires, None) for href, requires in parser.found[: MAX_FILES + 1]]
    if len(listed) > MAX_FILES:
        raise TooManyFiles(f"it lists more than {MAX_FILES:,} files, more than a project's page holds")
    return [
        IndexFile(name, urljoin(page_url, url), uploaded, requires_python if len(requires_python) <= MAX_REQUIRES_PYTHON_CHARS else "", size)
        for name, url, uploaded, requires_python, size in listed
        if len(name) <= MAX_NAME_CHARS and len(url) <= MAX_URL_CHARS
    ]


class PackageIndex:
    """One simple index (https://host/simple): each project's files."""

    def __init__(self, url: str, reader: WheelIndex | None = None) -> None:
        self.url = url.rstrip("/")
        self.reader = reader or WheelIndex(self.url)

    def files(self, project: str) -> list[IndexFile] | None:
        """The project's files; None when the index has no such project."""
        page_url = f"{self.url}/{canonicalize_name(project)}/"
        answer = self.reader.fetch(page_url, accept=ACCEPT)
        if answer is None:
            return None
        content_type, body = answer
        try:
            return parse_project_page(page_url, content_type, body)
        except TooManyFiles as error:
            raise WheelIndexError(Problem(self.reader.shown, f"GET {redact_urls(page_url)}: {error}; is this a package index?")) from None
        except (ValueError, RecursionError) as error:  # json.JSONDecodeError; JSON nested thousands deep
            why = "nested too deeply" if isinstance(error, RecursionError) else printable(str(error))
            raise WheelIndexError(
                Problem(self.reader.shown, f"GET {redact_urls(page_url)}: the answer is not a PEP 691 project page ({why}); is this a package index?")
            ) from None
