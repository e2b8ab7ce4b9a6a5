"""A few members of a wheel on an index, read by HTTP byte ranges instead of downloading it.

A wheel is a zip: its central directory sits at the end, and each member is found from it. Reading a
torch wheel's METADATA and torch/version.py this way costs three or four requests and some tens of KiB,
against 0.5-1.4 GB for the whole file. Every index this was tried on serves ranges (PyPI's file host,
S3 behind download.pytorch.org); one that does not is an error, since a byte budget caps what is read.
`--deep` reads one large member (libtorch_cuda.so) through the same file, in big sequential blocks,
into a temporary file.
"""

from __future__ import annotations

import io
import re
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

from buildkit.adapters.index.wheel_index import WheelIndex, WheelIndexError
from buildkit.errors import Problem

_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+)$")
SMALL_BUDGET = 8 << 20  # METADATA and version.py of any real wheel, with the central directory, fit many times over
_BLOCK = 64 << 10
_MAX_BLOCK = 16 << 20


class RangeFile(io.RawIOBase):
    """A remote file as a seekable, read-only file object; each read asks for the bytes it lacks."""

    def __init__(self, reader: WheelIndex, url: str, budget: int, name: str = ""):
        super().__init__()
        self.reader, self.url, self.budget = reader, url, budget
        self.name = name or unquote(urlsplit(url).path.rsplit("/", 1)[-1])
        self.fetched = 0  # bytes received, for the budget and for reports
        self.requests = 0
        self.position = 0
        self._block = _BLOCK
        self._cache_start, self._cache = 0, b""
        tail = self._ranged(f"bytes=-{_BLOCK}", _BLOCK)
        self.size = tail[2]
        self._cache_start, self._cache = tail[0], tail[1]

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer) -> int:
        wanted = min(len(buffer), self.size - self.position)
        if wanted <= 0:
            return 0
        cached = self.position - self._cache_start
        if cached < 0 or cached + wanted > len(self._cache):
            # reading on where the last block ended (a large member) doubles the block; a jump (a header) resets it
            self._block = min(self._block * 2, _MAX_BLOCK) if cached == len(self._cache) else _BLOCK
            end = min(self.position + max(wanted, self._block), self.size) - 1
            start, data, _total = self._ranged(f"bytes={self.position}-{end}", end - self.position + 1)
            self._cache_start, self._cache, cached = start, data, self.position - start
        chunk = self._cache[cached:cached + wanted]
        buffer[:len(chunk)] = chunk
        self.position += len(chunk)
        return len(chunk)

    def _ranged(self, byte_range: str, length: int) -> tuple[int, bytes, int]:
        """(first byte, bytes, the file's size) of one range request for at most `length` bytes."""
        self.requests += 1
        if self.fetched + length > self.budget:
            raise WheelIndexError(Problem(self.reader.shown, f"reading {self.name} needs more than {self.budget >> 20} MiB of it; "
                                                             "is it a wheel?"))
        answer = self.reader.session.get(self.url, limit=length, headers={"Range": byte_range})
        found = _CONTENT_RANGE.match(answer.headers.get("Content-Range", ""))
        if answer.status != 206 or not found:
            raise WheelIndexError(Problem(self.reader.shown, f"GET {self.name} with Range: {byte_range}: the server answered "
                                                             f"{answer.status} without a byte range; buildkit reads wheels by ranges only"))
        self.fetched += len(answer.body)
        return int(found.group(1)), answer.body, int(found.group(3))


def read_members(reader: WheelIndex, url: str, wanted: Callable[[str], bool], budget: int = SMALL_BUDGET) -> dict[str, bytes]:
    """The members of a remote wheel whose names `wanted` accepts (small ones: the budget caps the bytes)."""
    remote = RangeFile(reader, url, budget)
    try:
        with zipfile.ZipFile(remote) as wheel:
            return {info.filename: wheel.read(info) for info in wheel.infolist() if wanted(info.filename)}
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError) as error:
        raise WheelIndexError(Problem(reader.shown, f"{remote.name} is not a readable wheel: {error}")) from None


def extract_member(reader: WheelIndex, url: str, member: str, folder: Path, max_size: int | None = None) -> Path | None:
    """One member of a remote wheel copied into `folder` (its whole compressed size is read); None when the
    wheel has no such member. `max_size`: the most bytes the member may hold unpacked (a larger one is an error)."""
    remote = RangeFile(reader, url, budget=1 << 40)
    try:
        with zipfile.ZipFile(remote) as wheel:
            names = set(wheel.namelist())
            if member not in names:
                return None
            size = wheel.getinfo(member).file_size
            if max_size is not None and size > max_size:
                raise WheelIndexError(Problem(reader.shown, f"{remote.name}: {member} says it holds {size} bytes, more than the "
                                                            f"{max_size} a torch wheel's does; is it a wheel?"))
            target = Path(tempfile.mkstemp(dir=folder, suffix=".so")[1])
            with wheel.open(member) as source, open(target, "wb") as copy:
                shutil.copyfileobj(source, copy, 8 << 20)
            return target
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError) as error:
        raise WheelIndexError(Problem(reader.shown, f"{remote.name} is not a readable wheel: {error}")) from None
