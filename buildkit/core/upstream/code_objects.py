"""Which GPU architectures a shared library carries code for, read from its bytes (no CUDA or ROCm toolkit).

CUDA: nvcc links every translation unit's fat binary into the ELF section .nv_fatbin. Each fat binary is
a header (magic 0xBA55ED50, version, header size, payload size) and entries, each with its kind (1 PTX,
2 SASS), sizes and target (smXY as the integer XY at offset 28); the entries' payloads may be compressed,
their headers never are. The layout is the one `cuobjdump --list-elf/--list-ptx` reads; it was checked
against cuobjdump's listing of torch 2.14.1+cu130's libtorch_cuda.so (DESIGN.md section 6) and against
objects nvcc builds in the tests.

ROCm: clang writes the device code objects of a HIP library into the ELF section .hip_fatbin as offload
bundles: "__CLANG_OFFLOAD_BUNDLE__", an entry count, then per entry offset, size and a target id such as
hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-. With --offload-compress (the default for ROCm >= 6.2's
hipcc in some builds) each bundle is wrapped as "CCOB": version, method (0 zlib, 1 zstd), sizes, a hash,
then the compressed bundle (clang/lib/Driver/OffloadBundler.cpp, CompressedOffloadBundle).

Pure: bytes in, architectures out.
"""

from __future__ import annotations

import functools
import re
import struct
import zlib
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import zstandard

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

FATBIN_MAGIC = 0xBA55ED50
_FATBIN_HEADER = struct.Struct("<IHHQ")  # magic, version, header size, size of the entries that follow
_ENTRY_HEAD = struct.Struct("<HHIQ")  # kind, version, header size, payload size
_ENTRY_ARCH_OFFSET = 28
PTX, SASS = 1, 2
BUNDLE_MAGIC = b"__CLANG_OFFLOAD_BUNDLE__"
COMPRESSED_MAGIC = b"CCOB"
_GFX = re.compile(r"--(gfx[0-9a-f]+)")
_FATBIN_AT = re.compile(re.escape(struct.pack("<I", FATBIN_MAGIC)))
_BUNDLE_AT = re.compile(re.escape(BUNDLE_MAGIC) + b"|" + re.escape(COMPRESSED_MAGIC))
# Bounds on what a library's headers claim (each checked against the bytes that are there too): a compressed bundle's
# declared size, the part of it inflated (its header: the targets; the code objects after it are never needed),
# entries per fat binary and per bundle, and a target id's length (hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-).
MAX_BUNDLE_BYTES = 1 << 30  # a decompressed bundle larger than this is not a real library's
MAX_ENTRIES = 4096
MAX_TARGET_ID = 1024
MAX_BUNDLE_HEADER = 32 + MAX_ENTRIES * (24 + MAX_TARGET_ID)  # all a bundle's header can hold within those bounds


class CodeObjectError(ValueError):
    """The bytes are not an ELF shared library, or its GPU code sections are malformed."""


@dataclass(frozen=True)
class CudaCode:
    """What a library's fat binaries carry: for each sm_XY, in how many of them SASS (and PTX) is present."""

    fatbins: int
    sass: Counter[str]
    ptx: Counter[str]

    def sass_archs(self, share: float = 0.5) -> tuple[str, ...]:
        """The archs whose SASS at least `share` of the fat binaries carry: the build's arch list, without
        the archs a few kernels alone are compiled for (sm_89, sm_103, sm_121 in torch's)."""
        return _common(self.sass, self.fatbins, share)

    def partial_sass_archs(self, share: float = 0.5) -> tuple[str, ...]:
        return tuple(arch for arch in _ordered(self.sass) if arch not in self.sass_archs(share))

    def ptx_archs(self) -> tuple[str, ...]:
        return _ordered(self.ptx)


@dataclass(frozen=True)
class RocmCode:
    """The gfx targets a library's offload bundles carry code objects for, with how many bundles carry each."""

    bundles: int
    gfx: Counter[str]

    def archs(self) -> tuple[str, ...]:
        return tuple(sorted(self.gfx, key=lambda name: (len(name), name)))


def _ordered(counts: Counter[str]) -> tuple[str, ...]:
    return tuple(sorted(counts, key=lambda arch: int(arch.removeprefix("sm_"))))


def _common(counts: Counter[str], total: int, share: float) -> tuple[str, ...]:
    return tuple(arch for arch in _ordered(counts) if total and counts[arch] >= share * total)


def elf_sections(data: bytes | memoryview) -> dict[str, tuple[int, int]]:
    """Section name -> (offset, size) of a 64-bit little-endian ELF file, every header checked against the file."""
    view = memoryview(data)
    if len(view) < 0x40 or bytes(view[:4]) != b"\x7fELF":
        raise CodeObjectError("not an ELF file")
    if view[4] != 2 or view[5] != 1:
        raise CodeObjectError("not a 64-bit little-endian ELF file")
    (shoff,) = struct.unpack_from("<Q", view, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", view, 0x3A)
    if shnum == 0 or shoff == 0:
        raise CodeObjectError("it has no section headers (stripped of them, or more than 65,279), so its GPU code cannot be found")
    if shentsize < 0x40 or shoff + shnum * shentsize > len(view):
        raise CodeObjectError("its section headers lie outside the file")
    if shstrndx >= shnum:  # SHN_UNDEF is 0 and in range; SHN_XINDEX (0xffff) and anything past the headers are not
        raise CodeObjectError(f"its section name table is section {shstrndx}, of {shnum}: the section names cannot be read")
    headers = [struct.unpack_from("<IIQQQQ", view, shoff + i * shentsize) for i in range(shnum)]
    names_at, names_size = headers[shstrndx][4], headers[shstrndx][5]
    if names_at + names_size > len(view):
        raise CodeObjectError("its section name table runs past the end of the file")
    names = bytes(view[names_at : names_at + names_size])
    sections = {}
    for name, kind, _flags, _addr, offset, size in headers:
        end = names.find(b"\0", name)
        if name >= len(names) or end < 0:
            raise CodeObjectError(f"a section's name lies outside its name table (at {name} of {len(names)} bytes)")
        if kind == 8:  # SHT_NOBITS: no bytes in the file
            continue
        sections[names[name:end].decode("ascii", "replace")] = (offset, size)
    return sections


def _section(data: bytes | memoryview, name: str) -> memoryview:
    view = memoryview(data)
    sections = elf_sections(view)
    if name not in sections:
        raise CodeObjectError(f"it has no {name} section, so no GPU code to read")
    offset, size = sections[name]
    if offset + size > len(view):
        raise CodeObjectError(f"section {name} runs past the end of the file")
    return view[offset : offset + size]


def cuda_code(data: bytes | memoryview) -> CudaCode:
    """The SASS and PTX targets of every fat binary in a library's .nv_fatbin section."""
    try:
        return _cuda_code(data)
    except struct.error:
        raise CodeObjectError("its .nv_fatbin section is cut short") from None


def _cuda_code(data: bytes | memoryview) -> CudaCode:
    fatbins, sass, ptx = 0, Counter[str](), Counter[str]()
    for entries in _fatbins(_section(data, ".nv_fatbin")):
        fatbins += 1
        kinds = {(kind, arch) for kind, arch in entries}
        for kind, arch in kinds:
            (sass if kind == SASS else ptx)[f"sm_{arch}"] += 1
    return CudaCode(fatbins, sass, ptx)


def _fatbins(section: memoryview) -> Iterator[list[tuple[int, int]]]:
    """(kind, arch) of each entry, per fat binary. Fat binaries sit at 8-byte aligned offsets with padding
    between them: the scan jumps from one magic number to the next (a search in C, not a step of 8 bytes at a time)."""
    position, end = 0, len(section)
    while position + _FATBIN_HEADER.size <= end:
        found = _FATBIN_AT.search(section, position)
        if found is None:
            return
        if found.start() % 8:
            position = found.start() + 1
            continue
        position = found.start()
        _magic, _version, header_size, size = _FATBIN_HEADER.unpack_from(section, position)
        entry, stop = position + header_size, position + header_size + size
        if stop > end or header_size < _FATBIN_HEADER.size:
            raise CodeObjectError(f"a fat binary at offset {position} of .nv_fatbin runs past the section")
        entries: list[tuple[int, int]] = []
        while entry + _ENTRY_ARCH_OFFSET + 4 <= stop:
            kind, _version, entry_header, payload = _ENTRY_HEAD.unpack_from(section, entry)
            (arch,) = struct.unpack_from("<I", section, entry + _ENTRY_ARCH_OFFSET)
            if entry_header < _ENTRY_ARCH_OFFSET + 4:
                raise CodeObjectError(f"an entry of the fat binary at offset {position} has a header of {entry_header} bytes, too short to hold its target")
            if len(entries) == MAX_ENTRIES:
                raise CodeObjectError(f"the fat binary at offset {position} has more than {MAX_ENTRIES} entries")
            entries.append((kind, arch))
            entry += entry_header + payload
        yield entries
        position = stop


def rocm_code(data: bytes | memoryview) -> RocmCode:
    """The gfx targets of every offload bundle in a library's .hip_fatbin section (compressed or not)."""
    try:
        return _rocm_code(data)
    except struct.error:
        raise CodeObjectError("its .hip_fatbin section is cut short") from None


def _rocm_code(data: bytes | memoryview) -> RocmCode:
    section = _section(data, ".hip_fatbin")
    bundles, gfx = 0, Counter[str]()
    for first in _bundles(section):
        bundles += 1
        for target in _bundle_gfx(first):
            gfx[target] += 1
    return RocmCode(bundles, gfx)


def _bundles(section: memoryview) -> Iterator[Callable[[int], bytes]]:
    """Per offload bundle in the section, a reader of its first n bytes (decompressed where it is wrapped): the
    targets are in a bundle's header, and the code objects after it are never needed. Bundles are aligned (4096
    bytes in torch's libraries), and the scan jumps from one magic to the next (a search in C)."""
    position = 0
    while True:
        found = _BUNDLE_AT.search(section, position)
        if found is None:
            return
        start = found.start()
        if found.group() == BUNDLE_MAGIC:
            yield functools.partial(_plain, section, start)
            position = start + len(BUNDLE_MAGIC)
        else:
            first, length = _compressed(section, start)
            yield first
            position = start + max(length, len(COMPRESSED_MAGIC))


def _plain(section: memoryview, start: int, wanted: int) -> bytes:
    return bytes(section[start : start + wanted])


def _compressed(raw: memoryview, start: int) -> tuple[Callable[[int], bytes], int]:
    """A reader of the beginning of a CCOB wrapper's bundle, and the wrapper's length in the section (0 when the
    format has no total)."""
    version, method = struct.unpack_from("<HH", raw, start + 4)
    if version == 1:
        total, (size, _hash), header = 0, struct.unpack_from("<IQ", raw, start + 8), 20
    elif version == 2:
        total, size, _hash = struct.unpack_from("<IIQ", raw, start + 8)
        header = 24
    elif version == 3:
        total, size, _hash = struct.unpack_from("<QQQ", raw, start + 8)
        header = 32
    else:
        raise CodeObjectError(f"a compressed offload bundle of version {version}, which this reader does not know")
    if size > MAX_BUNDLE_BYTES:
        raise CodeObjectError(f"a compressed offload bundle claims {size} bytes")
    if total and (total < header or start + total > len(raw)):
        raise CodeObjectError(f"a compressed offload bundle at offset {start} claims {total} bytes, past the section")
    if method not in (0, 1):
        raise CodeObjectError(f"a compressed offload bundle with method {method}, neither zlib nor zstd")
    payload = raw[start + header : start + total] if total else raw[start + header :]

    def first(wanted: int) -> bytes:
        wanted = min(wanted, size)  # never past what the wrapper declares, whatever the stream holds
        try:
            if method == 0:
                return zlib.decompressobj().decompress(payload, wanted)
            with zstandard.ZstdDecompressor().stream_reader(payload) as reader:
                return reader.read(wanted)
        except (zlib.error, zstandard.ZstdError) as error:
            raise CodeObjectError(f"a compressed offload bundle does not decompress: {error}") from None

    return first, total


class _CutShort(Exception):
    """A bundle's header runs past the bytes read of it."""


def _bundle_gfx(first: Callable[[int], bytes]) -> set[str]:
    """The gfx targets of one bundle, reading (decompressing) as much of its beginning as its header takes: 64 KiB,
    then more, at most MAX_BUNDLE_HEADER."""
    wanted = 64 << 10
    while True:
        head = first(wanted)
        try:
            return set(_bundle_targets(memoryview(head)))
        except _CutShort:
            if len(head) < wanted or wanted >= MAX_BUNDLE_HEADER:
                raise CodeObjectError("an offload bundle's header runs past the bundle") from None
            wanted = min(wanted * 8, MAX_BUNDLE_HEADER)


def _bundle_targets(bundle: memoryview) -> list[str]:
    if bytes(bundle[: len(BUNDLE_MAGIC)]) != BUNDLE_MAGIC:
        return []
    if len(bundle) < len(BUNDLE_MAGIC) + 8:
        raise _CutShort
    (count,) = struct.unpack_from("<Q", bundle, len(BUNDLE_MAGIC))
    if count > MAX_ENTRIES:
        raise CodeObjectError(f"an offload bundle claims {count} code objects, more than the {MAX_ENTRIES} a library's bundle holds")
    position, found = len(BUNDLE_MAGIC) + 8, []
    for _ in range(count):
        if position + 24 > len(bundle):
            raise _CutShort
        _offset, _size, id_length = struct.unpack_from("<QQQ", bundle, position)
        position += 24
        if id_length > MAX_TARGET_ID:
            raise CodeObjectError(f"an offload bundle's target id claims {id_length} bytes, more than the {MAX_TARGET_ID} an id takes")
        if position + id_length > len(bundle):
            raise _CutShort
        target = bytes(bundle[position : position + id_length]).decode("ascii", "replace")
        position += id_length
        gfx = _GFX.search(target)
        if gfx and target.startswith("hip"):
            found.append(gfx.group(1))
    return found
