"""TEST DOUBLE of a torch library's bytes: the smallest 64-bit little-endian ELF file with a .rodata section.

compat check reads a build's arch flags from the .rodata of torch/lib/libtorch_python.so (a real one is 35 MB);
wheel doubles carry this instead, with the flags string as the real library holds it (NUL-terminated, among
other constants). Layout: the ELF header, the sections' bytes, then the section headers (null, .rodata,
.shstrtab), as buildkit.core.upstream.code_objects.elf_sections reads them.
"""

from __future__ import annotations

import struct

_HEADER = struct.Struct("<4sBBBBB7sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_PROGBITS, _STRTAB = 1, 3


def library_with_rodata(rodata: bytes) -> bytes:
    names = b"\0.rodata\0.shstrtab\0"
    rodata_at = _HEADER.size
    names_at = rodata_at + len(rodata)
    headers_at = (names_at + len(names) + 7) // 8 * 8
    sections = [
        _SECTION.pack(0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
        _SECTION.pack(1, _PROGBITS, 2, 0, rodata_at, len(rodata), 0, 0, 16, 0),  # flags: SHF_ALLOC
        _SECTION.pack(9, _STRTAB, 0, 0, names_at, len(names), 0, 0, 1, 0),
    ]
    header = _HEADER.pack(
        b"\x7fELF", 2, 1, 1, 0, 0, b"\0" * 7, 3, 62, 1, 0, 0, headers_at, 0, _HEADER.size, 0, 0, _SECTION.size, len(sections), 2
    )  # ET_DYN, EM_X86_64; section 2 names the sections
    body = header + rodata + names
    return body + b"\0" * (headers_at - len(body)) + b"".join(sections)


def arch_flags_library(flags: str) -> bytes:
    """A libtorch_python.so double whose .rodata holds `flags` ("sm_75 sm_80 ...") between other constants."""
    return library_with_rodata(b"\0".join([b"CUDA error: %s", b"sm_90", flags.encode("ascii"), b"no kernel image", b""]))
