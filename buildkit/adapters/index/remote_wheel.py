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
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from buildkit.adapters.index import wheel_zip
from buildkit.adapters.index.wheel_index import WheelIndex, WheelIndexError
from buildkit.adapters.index.wheel_zip import Directory, Member, ZipError
from buildkit.errors import Problem, printable

if TYPE_CHECKING:
    from collections.abc import Callable

    from _typeshed import WriteableBuffer

_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+)$")
SMALL_BUDGET = 8 << 20  # METADATA and version.py of any real wheel, with the central directory, fit many times over
MAX_SMALL_MEMBER = 1 << 20  # METADATA, torch/version.py, torch/cuda/__init__.py: each tens of KB in a real wheel
MAX_LIBRARY_BYTES = 4 << 30  # --deep's GPU library (libtorch_cuda.so is about 1.5 GB)
MAX_WANTED = 16  # members one read takes (a wheel has one METADATA; a zip naming thousands alike is not a wheel)
_BLOCK = 64 << 10
_MAX_BLOCK = 16 << 20


class RangeFile(io.RawIOBase):
    """A remote file as a seekable, read-only file object; each read asks for the bytes it lacks, within the budget
    (a read is refused before anything is allocated for it)."""

    def __init__(self, reader: WheelIndex, url: str, budget: int, name: str = "") -> None:
        super().__init__()
        self.reader, self.url, self.budget = reader, url, budget
        self.name = name or unquote(urlsplit(url).path.rsplit("/", 1)[-1])
        self.fetched = 0  # bytes received, for the budget and for reports
        self.requests = 0
        self.position = 0
        self._block = _BLOCK
        self._cache_start, self._cache = 0, b""
        tail = self._ranged(f"bytes=-{wheel_zip.TAIL_BYTES}", wheel_zip.TAIL_BYTES)
        self.size = tail[2]
        self._cache_start, self._cache = tail[0], tail[1]
        if self._cache_start + len(self._cache) != self.size:
            raise WheelIndexError(Problem(self.reader.shown, f"GET {self.name}: the server answered bytes that do not end the file"))

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

    @property
    def tail(self) -> tuple[int, bytes]:
        """(offset, bytes) of the end of the file, read when it was opened."""
        return self._cache_start, self._cache

    def read_at(self, offset: int, length: int) -> bytes:
        """`length` bytes at `offset`: fewer only at the end of the file; refused past the budget before any is asked."""
        self.seek(offset)
        wanted = max(0, min(length, self.size - offset))
        if self.fetched + wanted > self.budget and not self._cached(offset, wanted):
            raise WheelIndexError(Problem(self.reader.shown, f"reading {self.name} needs more than {self.budget >> 20} MiB of it; is it a wheel?"))
        chunks = []
        while wanted > 0:
            chunk = self.read(min(wanted, _MAX_BLOCK))
            if not chunk:
                break
            chunks.append(chunk)
            wanted -= len(chunk)
        return b"".join(chunks)

    def _cached(self, offset: int, length: int) -> bool:
        return self._cache_start <= offset and offset + length <= self._cache_start + len(self._cache)

    def readinto(self, buffer: WriteableBuffer) -> int:
        with memoryview(buffer) as view:  # io hands a bytearray or a memoryview of bytes; released before io resizes it
            return self._fill(view)

    def _fill(self, view: memoryview) -> int:
        wanted = min(len(view), self.size - self.position)
        if wanted <= 0:
            return 0
        cached = self.position - self._cache_start
        if cached < 0 or cached + wanted > len(self._cache):
            # reading on where the last block ended (a large member) doubles the block; a jump (a header) resets it
            self._block = min(self._block * 2, _MAX_BLOCK) if cached == len(self._cache) else _BLOCK
            end = min(self.position + max(wanted, self._block), self.size) - 1
            start, data, _total = self._ranged(f"bytes={self.position}-{end}", end - self.position + 1)
            if start != self.position or not data:
                raise WheelIndexError(
                    Problem(self.reader.shown, f"GET {self.name} with Range: bytes={self.position}-{end}: the server answered another range (from {start})")
                )
            self._cache_start, self._cache, cached = start, data, 0
        chunk = self._cache[cached : cached + wanted]
        view[: len(chunk)] = chunk
        self.position += len(chunk)
        return len(chunk)

    def _ranged(self, byte_range: str, length: int) -> tuple[int, bytes, int]:
        """(first byte, bytes, the file's size) of one range request for at most `length` bytes."""
        self.requests += 1
        if self.fetched + length > self.budget:
            raise WheelIndexError(Problem(self.reader.shown, f"reading {self.name} needs more than {self.budget >> 20} MiB of it; is it a wheel?"))
        answer = self.reader.session.get(self.url, limit=length, headers={"Range": byte_range})
        found = _CONTENT_RANGE.match(answer.headers.get("Content-Range", ""))
        if answer.status != 206 or not found:
            raise WheelIndexError(
                Problem(
                    self.reader.shown,
                    f"GET {self.name} with Range: {byte_range}: the server answered {answer.status} without a byte range; buildkit reads wheels by ranges only",
                )
            )
        self.fetched += len(answer.body)
        return int(found.group(1)), answer.body, int(found.group(3))


def _directory(remote: RangeFile) -> tuple[Directory, list[Member]]:
    """The wheel's central directory and its members, every claim checked (adapters/index/wheel_zip.py)."""
    tail_offset, tail = remote.tail
    end = wheel_zip.end_record(tail, tail_offset, remote.size)
    directory = end.directory
    if directory is None:  # zip64: its end record, where the locator points
        directory = wheel_zip.zip64_directory(remote.read_at(end.zip64_at or 0, 56), end, remote.size)
    return directory, wheel_zip.members(remote.read_at(directory.offset, directory.size), directory)


def _member_data(remote: RangeFile, directory: Directory, member: Member) -> int:
    """Where a member's data starts (its local header read)."""
    return wheel_zip.data_offset(remote.read_at(member.local_offset, 30), member, directory)


def read_members(reader: WheelIndex, url: str, wanted: Callable[[str], bool], budget: int = SMALL_BUDGET, most: int = MAX_SMALL_MEMBER) -> dict[str, bytes]:
    """The members of a remote wheel whose names `wanted` accepts, each at most `most` bytes once inflated (the
    budget caps the bytes fetched)."""
    remote = RangeFile(reader, url, budget)
    try:
        directory, listed = _directory(remote)
        chosen = [member for member in listed if wanted(member.name)]
        if len(chosen) > MAX_WANTED:
            raise ZipError(f"{len(chosen):,} members are named like the one read ({chosen[0].name[:100]!r}); a wheel has one")
        found = {}
        for member in chosen:
            wheel_zip.check_readable(member, most)
            start = _member_data(remote, directory, member)
            found[member.name] = wheel_zip.inflate(member, remote.read_at(start, member.compressed))
        return found
    except ZipError as error:
        raise WheelIndexError(Problem(reader.shown, f"{printable(remote.name)} is not a readable wheel: {error}")) from None


def extract_member(reader: WheelIndex, url: str, member: str, folder: Path, max_size: int | None = None) -> Path | None:
    """One member of a remote wheel copied into `folder` (its whole compressed size is read); None when the wheel
    has no such member. `max_size`: the most bytes the member may hold unpacked (at most MAX_LIBRARY_BYTES, a larger
    one is an error), and the most written."""
    most = min(max_size, MAX_LIBRARY_BYTES) if max_size is not None else MAX_LIBRARY_BYTES
    remote = RangeFile(reader, url, budget=most + wheel_zip.MAX_DIRECTORY_BYTES + (1 << 20))
    try:
        directory, listed = _directory(remote)
        found = next((entry for entry in listed if entry.name == member), None)
        if found is None:
            return None
        wheel_zip.check_readable(found, most)
        start = _member_data(remote, directory, found)
        inflater = wheel_zip.Inflater(found)
        target = Path(tempfile.mkstemp(dir=folder, suffix=".so")[1])
        with open(target, "wb") as copy:
            for offset in range(start, start + found.compressed, _MAX_BLOCK):
                copy.writelines(inflater.feed(remote.read_at(offset, min(_MAX_BLOCK, start + found.compressed - offset))))
            inflater.finish()
        return target
    except ZipError as error:
        raise WheelIndexError(Problem(reader.shown, f"{printable(remote.name)} is not a readable wheel: {error}")) from None
