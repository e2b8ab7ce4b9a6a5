"""`compat check --deep` against GPU libraries that lie (core/upstream/code_objects.py): ELF and fat-binary headers are
checked against the file, so a truncated or lying binary is one sentence naming the wheel and the library, never a
traceback, an endless read or a proposed empty arch list; a compressed bundle is inflated only as far as its header
(the bound shown by the memory the read took, tracemalloc's peak).

A fifth private corpus found these: IndexError on an ELF with no section headers, a zstd bundle inflated past its
cap, an overflow on a target id 2^63 bytes long, and unreadable section names that proposed an empty arch list."""

from __future__ import annotations

import io
import struct
import tracemalloc
import zipfile

import pytest
import tomlkit
import zstandard

from buildkit.core.upstream import code_objects
from buildkit.core.upstream.code_objects import FATBIN_MAGIC, CodeObjectError, cuda_code, rocm_code

LIBRARY = "torch/lib/libtorch_cuda.so"


def elf(sections: dict[str, bytes], shnum: int | None = None, shstrndx: int | None = None, name_at: int | None = None) -> bytes:
    """A 64-bit little-endian ELF holding `sections` (and its name table), each header overridable to lie."""
    names = b"\0" + b"".join(name.encode() + b"\0" for name in (*sections, ".shstrtab"))
    body, offsets = b"", []
    for data in (*sections.values(), names):
        offsets.append(64 + len(body))
        body += data + b"\0" * (-len(data) % 8)
    shoff = 64 + len(body)
    headers, position = [b"\0" * 64], 1  # section 0 is the null section
    for index, (name, data) in enumerate([*sections.items(), (".shstrtab", names)]):
        at = names.index(name.encode() + b"\0") if name_at is None or name == ".shstrtab" else name_at
        headers.append(struct.pack("<IIQQQQIIQQ", at, 1 if name != ".shstrtab" else 3, 0, 0, offsets[index], len(data), 0, 0, 1, 0))
        position += 1
    count = len(headers) if shnum is None else shnum
    header = (
        b"\x7fELF\x02\x01\x01"
        + b"\0" * 9
        + struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 0, 0, 64, count, len(headers) - 1 if shstrndx is None else shstrndx)
    )
    return header + body + b"".join(headers)


def fatbin(*archs: int, entry_header: int = 64) -> bytes:
    entries = b"".join(struct.pack("<HHIQ", 2, 1, entry_header, 0) + b"\0" * 12 + struct.pack("<I", arch) + b"\0" * (entry_header - 32) for arch in archs)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, len(entries)) + entries


def bundle(*targets: bytes, count: int | None = None) -> bytes:
    entries = b"".join(struct.pack("<QQQ", 0, 0, len(target)) + target for target in targets)
    return code_objects.BUNDLE_MAGIC + struct.pack("<Q", len(targets) if count is None else count) + entries


def ccob(payload: bytes, size: int, method: int = 1) -> bytes:
    """A version-3 compressed offload bundle (CCOB) wrapping `payload`, declaring `size` bytes once inflated."""
    return b"CCOB" + struct.pack("<HHQQQ", 3, method, 32 + len(payload), size, 0) + payload


def test_a_real_shaped_library_reads_its_archs():
    assert cuda_code(elf({".nv_fatbin": fatbin(80, 90) + b"\0" * 8 + fatbin(80, 90)})).sass_archs() == ("sm_80", "sm_90")
    targets = (b"hipv4-amdgcn-amd-amdhsa--gfx942:sramecc+:xnack-", b"hipv4-amdgcn-amd-amdhsa--gfx90a")
    packed = zstandard.ZstdCompressor().compress(bundle(*targets))
    assert rocm_code(elf({".hip_fatbin": ccob(packed, len(bundle(*targets)))})).archs() == ("gfx90a", "gfx942")


@pytest.mark.parametrize(
    "library, message",
    [
        (elf({".nv_fatbin": fatbin(80)}, shnum=0), "it has no section headers"),
        (elf({".nv_fatbin": fatbin(80)}, shstrndx=0xFFFF), "its section name table is section 65535"),
        (elf({".nv_fatbin": fatbin(80)}, name_at=1 << 20), "a section's name lies outside its name table"),
        (elf({".nv_fatbin": fatbin(80)}, shnum=0xFFF0), "its section headers lie outside the file"),
        (elf({".text": b"\x90" * 64}), "it has no .nv_fatbin section"),
        (elf({".nv_fatbin": fatbin(80, entry_header=1)}), "too short to hold its target"),
        (elf({".nv_fatbin": fatbin(80)[:-8]}), "runs past the section"),
        (elf({".nv_fatbin": fatbin(80)})[:200], "section headers lie outside the file"),
        (b"\x7fELF\x01\x01" + b"\0" * 100, "not a 64-bit little-endian ELF file"),
    ],
)
def test_a_lying_cuda_library_is_one_sentence(library, message):
    with pytest.raises(CodeObjectError, match=message):
        cuda_code(library)


@pytest.mark.parametrize(
    "section, message",
    [
        (bundle(b"hipv4-amdgcn-amd-amdhsa--gfx942") + b"", None),
        (code_objects.BUNDLE_MAGIC + struct.pack("<QQQQ", 1, 0, 0, 1 << 63), "target id claims 9223372036854775808 bytes"),
        (bundle(b"hipv4--gfx942", count=1 << 40), "claims 1099511627776 code objects"),
        (bundle(b"hipv4-amdgcn-amd-amdhsa--gfx942")[:40], "an offload bundle's header runs past the bundle"),
        (ccob(b"\0" * 64, 1 << 40), "a compressed offload bundle claims 1099511627776 bytes"),
        (ccob(b"\0" * 64, 100, method=7), "method 7, neither zlib nor zstd"),
        (ccob(b"not zstd at all", 100), "does not decompress"),
        (b"CCOB" + struct.pack("<HHQQQ", 3, 1, 1 << 31, 100, 0), "claims 2147483648 bytes, past the section"),
    ],
)
def test_a_lying_rocm_library_is_one_sentence(section, message):
    library = elf({".hip_fatbin": section})
    if message is None:
        assert rocm_code(library).archs() == ("gfx942",)
        return
    with pytest.raises(CodeObjectError, match=message):
        rocm_code(library)


@pytest.mark.slow
def test_a_zstd_bundle_is_inflated_only_as_far_as_its_header():
    """A gigabyte of zeros compresses to some 30 KB: reading the bundle's header inflates 64 KiB of it, not the
    gigabyte (tracemalloc's peak), and finds no bundle in it."""
    zeros = zstandard.ZstdCompressor().compressobj()
    packed = b"".join(zeros.compress(b"\0" * (64 << 20)) for _ in range(16)) + zeros.flush()
    library = elf({".hip_fatbin": ccob(packed, code_objects.MAX_BUNDLE_BYTES - 1)})
    tracemalloc.start()
    try:
        found = rocm_code(library)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert found.bundles == 1 and found.archs() == ()
    assert peak < 4 * len(library) + (8 << 20), peak


@pytest.mark.slow
def test_deep_says_a_library_with_unreadable_section_names_and_proposes_nothing(cli, tmp_path):
    """Unreadable section names once read as "no GPU code" and proposed an empty arch list; now the library is
    named in one message, exit 1, and --write leaves the data as it was."""
    from buildkit.adapters.files.bundled import COMPAT_DATA, compat_data
    from buildkit.core.compat.facts import compat_from_data
    from testkit.artifacts import metadata_text, torch_version_module
    from testkit.pytorch_index import PyTorchIndex, torch_wheel_name, wheels_from_compat

    name = torch_wheel_name("2.14.1", "cu130", "3.11")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as wheel:
        wheel.writestr("torch-2.14.1.dist-info/METADATA", metadata_text("torch", "2.14.1", ">=3.10", ()))
        wheel.writestr("torch/version.py", torch_version_module("2.14.1", "cu130"))
        wheel.writestr(LIBRARY, elf({".nv_fatbin": fatbin(80, 90)}, name_at=1 << 20))
    (tmp_path / name).write_bytes(buffer.getvalue())
    folders = wheels_from_compat(compat_from_data(compat_data()))
    folders["cu130"] = [
        n for n in folders["cu130"] if not n.startswith("torch-2.15.0+") and (not (n.startswith("torch-2.14.1+") and n.endswith("x86_64.whl")) or n == name)
    ]
    data = tmp_path / "compat.toml"
    data.write_text(COMPAT_DATA.read_text())
    before = data.read_bytes()
    index = PyTorchIndex(folders, real={name: tmp_path / name}).start()
    try:
        result = cli("compat", "check", "--deep", "--write", "--index", index.url, "--pypi", "none", "--layout-index", "amd-whl-next=none", "--data", data)
    finally:
        index.stop()
    assert result.code == 1 and "Traceback" not in result.err, result.err
    errors = [line for line in result.err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and f"{name}: {LIBRARY}: " in errors[0] and "name lies outside its name table" in errors[0]
    assert data.read_bytes() == before and "archs = []" not in tomlkit.dumps(tomlkit.parse(data.read_text()))
