"""A wheel's zip structures read as untrusted data: what an index serves is parsed here, each structure checked
against the file's size and its neighbours before anything is allocated or inflated.

A wheel is a zip (PEP 427): an end record at its end gives the central directory's offset, size and entry count
(zip64 records where they do not fit in 32 bits); the directory lists each member with its method, flags, sizes and
the offset of its local header, which precedes its data. zipfile trusted those claims: a directory of 2^40 bytes
was allocated as claimed, an unknown method, an encryption flag or flag bit 5 (patched data) raised
NotImplementedError or RuntimeError, and a METADATA of 50 MB deflated from a few KB was inflated whole. Here each
claim is bounded (MAX_DIRECTORY_BYTES, MAX_MEMBERS), a member is read only if it is stored or deflated, unencrypted,
within the size its reader allows and the ratio deflate can reach, and its data is inflated no further than its
declared size, then checked against its CRC. Every refusal is a ZipError with one sentence.

Pure: bytes in, records and bytes out; adapters/index/remote_wheel.py fetches the byte ranges.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

_EOCD = struct.Struct("<4sHHHHIIH")  # signature, disk, directory's disk, entries here, entries, size, offset, comment length
_ZIP64_LOCATOR = struct.Struct("<4sIQI")  # signature, disk, offset of the zip64 end record, disks
_ZIP64_EOCD = struct.Struct("<4sQHHIIQQQQ")  # signature, record size, versions, disks, entries here, entries, size, offset
_CENTRAL = struct.Struct("<4sHHHHHHIIIHHHHHII")  # 46 bytes, then name, extra, comment
_LOCAL = struct.Struct("<4sHHHHHIIIHH")  # 30 bytes, then name, extra
_EOCD_SIGNATURE, _LOCATOR_SIGNATURE, _ZIP64_SIGNATURE = b"PK\x05\x06", b"PK\x06\x07", b"PK\x06\x06"
_CENTRAL_SIGNATURE, _LOCAL_SIGNATURE = b"PK\x01\x02", b"PK\x03\x04"
# The end record and its comment (at most 65,535 bytes), and the zip64 locator before it: the bytes at the end of
# a file that hold them.
TAIL_BYTES = _EOCD.size + 0xFFFF + _ZIP64_LOCATOR.size
MAX_DIRECTORY_BYTES = 64 << 20  # a torch wheel's directory is 2-3 MB (about 20,000 members)
MAX_MEMBERS = 200_000
MAX_RATIO = 1_100  # deflate's best is about 1032:1; a member claiming more than that is not deflate's output
STORED, DEFLATED = 0, 8
_ENCRYPTED, _PATCHED, _STRONG_ENCRYPTION, _UTF8 = 0x1, 0x20, 0x40, 0x800


class ZipError(ValueError):
    """The bytes are not a zip this reader takes; the message says what, in one sentence."""


@dataclass(frozen=True)
class Directory:
    offset: int
    size: int
    count: int


@dataclass(frozen=True)
class EndRecord:
    """What the end of the file says: the directory, or (zip64) where the record that locates it is."""

    directory: Directory | None
    zip64_at: int | None = None  # the zip64 end record's offset, when the caller must read its 56 bytes
    end_at: int = 0  # where the end record (or the zip64 locator) starts: the directory ends before it


@dataclass(frozen=True)
class Member:
    name: str
    method: int
    flags: int
    crc: int
    compressed: int
    size: int
    local_offset: int


def end_record(tail: bytes, tail_offset: int, file_size: int) -> EndRecord:
    """The end record found in the file's last bytes (`tail`, starting at `tail_offset`)."""
    at = tail.rfind(_EOCD_SIGNATURE, max(0, len(tail) - _EOCD.size - 0xFFFF))
    while at >= 0 and (at + _EOCD.size > len(tail) or at + _EOCD.size + _EOCD.unpack_from(tail, at)[7] > len(tail)):
        at = tail.rfind(_EOCD_SIGNATURE, 0, at)  # a signature inside the comment, or a record whose comment runs past the file
    if at < 0:
        raise ZipError("no end of central directory record in its last bytes: not a zip (or cut short)")
    _, disk, directory_disk, here, count, size, offset, _ = _EOCD.unpack_from(tail, at)
    absolute = tail_offset + at
    if 0xFFFF in (here, count) or 0xFFFFFFFF in (size, offset):  # zip64: the locator sits right before the record
        locator = at - _ZIP64_LOCATOR.size
        if locator < 0 or tail[locator : locator + 4] != _LOCATOR_SIGNATURE:
            raise ZipError("its end record claims zip64 sizes, but no zip64 locator precedes it")
        _, _, zip64_at, _ = _ZIP64_LOCATOR.unpack_from(tail, locator)
        if zip64_at + _ZIP64_EOCD.size > tail_offset + locator:
            raise ZipError(f"its zip64 locator points at offset {zip64_at}, past the locator itself")
        return EndRecord(None, zip64_at, tail_offset + locator)
    if disk or directory_disk or here != count:
        raise ZipError("it spans several disks, which a wheel never does")
    return EndRecord(_checked(Directory(offset, size, count), absolute, file_size), None, absolute)


def zip64_directory(record: bytes, end: EndRecord, file_size: int) -> Directory:
    """The directory a zip64 end record (the 56 bytes at end.zip64_at) gives."""
    if len(record) < _ZIP64_EOCD.size or record[:4] != _ZIP64_SIGNATURE:
        raise ZipError(f"no zip64 end record at offset {end.zip64_at}, where its locator points")
    _, _, _, _, disk, directory_disk, here, count, size, offset = _ZIP64_EOCD.unpack_from(record)
    if disk or directory_disk or here != count:
        raise ZipError("it spans several disks, which a wheel never does")
    return _checked(Directory(offset, size, count), end.zip64_at or 0, file_size)


def _checked(directory: Directory, end_at: int, file_size: int) -> Directory:
    if directory.size > MAX_DIRECTORY_BYTES:
        raise ZipError(f"its central directory claims {directory.size:,} bytes, more than the {MAX_DIRECTORY_BYTES >> 20} MiB a wheel's takes")
    if directory.count > MAX_MEMBERS or directory.count * _CENTRAL.size > directory.size:
        raise ZipError(f"its central directory claims {directory.count:,} members in {directory.size:,} bytes")
    if directory.offset + directory.size > min(end_at, file_size):
        raise ZipError(f"its central directory (offset {directory.offset:,}, {directory.size:,} bytes) runs past the end record at {end_at:,}")
    return directory


def members(data: bytes, directory: Directory) -> list[Member]:
    """The members the central directory (`data`, its `directory.size` bytes) lists, each checked to lie before it."""
    if len(data) != directory.size:
        raise ZipError(f"its central directory was {len(data):,} bytes, not the {directory.size:,} its end record claims")
    found: list[Member] = []
    position = 0
    for _ in range(directory.count):
        if position + _CENTRAL.size > len(data) or data[position : position + 4] != _CENTRAL_SIGNATURE:
            raise ZipError(f"its central directory holds {len(found):,} members, not the {directory.count:,} its end record claims")
        (_, _, _, flags, method, _, _, crc, compressed, size, name_length, extra_length, comment_length, _, _, _, local_offset) = _CENTRAL.unpack_from(
            data, position
        )
        start = position + _CENTRAL.size
        position = start + name_length + extra_length + comment_length
        if position > len(data):
            raise ZipError(f"a member's name and fields run past the central directory (member {len(found) + 1})")
        raw = data[start : start + name_length]
        name = raw.decode("utf-8", "replace") if flags & _UTF8 else raw.decode("cp437")
        if 0xFFFFFFFF in (compressed, size, local_offset):
            size, compressed, local_offset = _zip64_sizes(data[start + name_length : start + name_length + extra_length], size, compressed, local_offset, name)
        if local_offset + _LOCAL.size + compressed > directory.offset:
            raise ZipError(f"{_shown(name)}: its data (offset {local_offset:,}, {compressed:,} bytes) runs into the central directory")
        found.append(Member(name, method, flags, crc, compressed, size, local_offset))
    if position != len(data):
        raise ZipError(f"its central directory holds {len(data) - position:,} bytes after its {directory.count:,} members")
    return found


def _zip64_sizes(extra: bytes, size: int, compressed: int, offset: int, name: str) -> tuple[int, int, int]:
    """The 64-bit sizes and offset a member's zip64 extra field holds, for those its record left at 0xFFFFFFFF."""
    position = 0
    while position + 4 <= len(extra):
        kind, length = struct.unpack_from("<HH", extra, position)
        body = extra[position + 4 : position + 4 + length]
        position += 4 + length
        if kind != 1:
            continue
        values = list(struct.unpack_from(f"<{len(body) // 8}Q", body)) if len(body) >= 8 else []
        wanted = [field for field, value in (("size", size), ("compressed", compressed), ("offset", offset)) if value == 0xFFFFFFFF]
        if len(values) < len(wanted):
            break
        read = dict(zip(wanted, values))
        return read.get("size", size), read.get("compressed", compressed), read.get("offset", offset)
    raise ZipError(f"{_shown(name)}: its record claims zip64 sizes, but its zip64 field does not hold them")


def check_readable(member: Member, most: int) -> None:
    """A member this reader inflates: stored or deflated, unencrypted, at most `most` bytes, at a ratio deflate can reach."""
    name = _shown(member.name)
    if member.flags & (_ENCRYPTED | _STRONG_ENCRYPTION):
        raise ZipError(f"{name} is encrypted, which a wheel's members never are")
    if member.flags & _PATCHED:
        raise ZipError(f"{name} is compressed patched data (flag bit 5), which a wheel's members never are")
    if member.method not in (STORED, DEFLATED):
        raise ZipError(f"{name} uses compression method {member.method}; a wheel's members are stored (0) or deflated (8)")
    if member.size > most:
        raise ZipError(f"{name} is {member.size:,} bytes, more than the {most:,} read of it")
    if member.method == STORED and member.size != member.compressed:
        raise ZipError(f"{name} is stored, yet claims {member.size:,} bytes from {member.compressed:,}")
    if member.size > member.compressed * MAX_RATIO + 1024:
        raise ZipError(f"{name} claims {member.size:,} bytes from {member.compressed:,} compressed, a ratio past deflate's")


def data_offset(local_header: bytes, member: Member, directory: Directory) -> int:
    """Where a member's data starts, from its local header (the 30 bytes at its offset)."""
    if len(local_header) < _LOCAL.size or local_header[:4] != _LOCAL_SIGNATURE:
        raise ZipError(f"{_shown(member.name)}: no local header at offset {member.local_offset:,}, where its directory record points")
    name_length, extra_length = _LOCAL.unpack_from(local_header)[9:11]
    start: int = member.local_offset + _LOCAL.size + name_length + extra_length
    if start + member.compressed > directory.offset:
        raise ZipError(f"{_shown(member.name)}: its data runs into the central directory")
    return start


class Inflater:
    """A member's data inflated piece by piece (at most PIECE bytes at a time, whatever a chunk of input holds),
    never past its declared size, and checked at the end (its size and CRC): a deflate bomb stops at the size the
    directory declared, which check_readable bounded."""

    PIECE = 16 << 20

    def __init__(self, member: Member) -> None:
        self.member = member
        self.written = 0
        self._crc = 0
        self._inflate = zlib.decompressobj(-15) if member.method == DEFLATED else None

    def feed(self, compressed: bytes) -> Iterator[bytes]:
        data = compressed
        while data:
            room = min(self.member.size - self.written + 1, self.PIECE)  # one byte past the declared size shows a lie
            if self._inflate is None:
                out, data = data[:room], data[room:]
            else:
                try:
                    out = self._inflate.decompress(data, room)
                except zlib.error as error:
                    raise ZipError(f"{_shown(self.member.name)} does not inflate: {error}") from None
                data = self._inflate.unconsumed_tail
            self.written += len(out)
            if self.written > self.member.size:
                raise ZipError(f"{_shown(self.member.name)} inflates past the {self.member.size:,} bytes its directory record declares")
            self._crc = zlib.crc32(out, self._crc)
            yield out

    def finish(self) -> None:
        if self.written != self.member.size or self._crc != self.member.crc:
            raise ZipError(f"{_shown(self.member.name)} inflates to {self.written:,} bytes that do not match its directory record (size or CRC)")


def inflate(member: Member, compressed: bytes) -> bytes:
    """A member's whole data (check_readable first)."""
    inflater = Inflater(member)
    data = b"".join(inflater.feed(compressed))
    inflater.finish()
    return data


def _shown(name: str) -> str:
    return repr(name[:200])
