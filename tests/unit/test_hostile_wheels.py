"""What an index serves, read as untrusted data by `compat check`: its pages, its wheels' zip structures, their
METADATA and torch/version.py (adapters/index/wheel_zip.py, core/upstream/literals.py, core/upstream/releases.py, adapters/index/remote_wheel.py,
adapters/index/package_index.py). Each hostile answer is one message and exit 1, never a traceback, within the bounds,
proven by what the double served (bytes of byte ranges, pages) or by the event that shows the bound held; and what
`--write` writes is values through tomlkit, so nothing an index says adds or changes a key.

A fifth private corpus found these: members with an unknown compression method, encryption or flag bit 5 raised;
zip64 and central-directory claims were allocated as claimed; a METADATA deflate bomb and a 50 MB torch/version.py
exhausted memory; a 5,000-deep expression in version.py raised RecursionError; 100,000 releases took minutes of CPU."""

from __future__ import annotations

import struct
import zlib

import pytest
import tomlkit

from buildkit.adapters.index import package_index, remote_wheel, wheel_zip
from buildkit.adapters.index.wheel_index import WheelIndex, WheelIndexError
from buildkit.app import compat_check
from buildkit.core.upstream import literals
from buildkit.core.upstream.releases import MAX_REQUIREMENTS, read_metadata, read_version_module
from testkit.artifacts import PublishedFile, PypiDouble, companion_files, metadata_text, torch_version_module, wheel_bytes

WHEEL = "torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl"
METADATA = "torch-2.15.0.dist-info/METADATA"
OFFLINE = ("--index", "none", "--layout-index", "amd-whl-next=none")


def wheel(metadata: str | None = None, version_py: str | None = None) -> bytes:
    return wheel_bytes(
        WHEEL,
        metadata if metadata is not None else metadata_text("torch", "2.15.0", ">=3.11", ()),
        {"torch/version.py": version_py if version_py is not None else torch_version_module("2.15.0", "cu132")},
    )


def served(data: bytes, extra_files: list[PublishedFile] = ()) -> PypiDouble:
    return PypiDouble(
        {
            "torch": [PublishedFile(WHEEL, "2026-10-28T15:16:25Z", ">=3.11", data), *extra_files],
            "torchvision": companion_files("torchvision", "0.29.2", "2026-10-28", "torch (>=2.14.0)"),
            "torchaudio": [],
        }
    ).start()


def ranged_bytes(double: PypiDouble, size: int) -> int:
    """The bytes the byte ranges the double was asked for cover (a file of `size` bytes)."""
    total = 0
    for asked in double.ranges:
        start, _, end = asked.removeprefix("bytes=").partition("-")
        total += int(end) if not start else min(int(end or size - 1), size - 1) - int(start) + 1
    return total


def end_record(data: bytes) -> tuple[int, int, int]:
    """(offset of the end record, the directory's size, its offset) of a zip without a comment."""
    at = len(data) - 22
    size, offset = struct.unpack_from("<II", data, at + 12)
    return at, size, offset


def directory_record(data: bytes, name: str) -> int:
    """Where the central directory record of member `name` starts."""
    _, _, position = end_record(data)
    while True:
        name_length, extra_length, comment_length = struct.unpack_from("<HHH", data, position + 28)
        if data[position + 46 : position + 46 + name_length].decode() == name:
            return position
        position += 46 + name_length + extra_length + comment_length


def patched(data: bytes, offset: int, form: str, *values: int) -> bytes:
    changed = bytearray(data)
    struct.pack_into(form, changed, offset, *values)
    return bytes(changed)


def member_patch(field: str, value: int):
    offsets = {"flags": (8, "<H"), "method": (10, "<H"), "size": (24, "<I"), "compressed": (20, "<I"), "offset": (42, "<I")}
    return lambda data: patched(data, directory_record(data, METADATA) + offsets[field][0], offsets[field][1], value)


def with_zip64_claim(data: bytes) -> bytes:
    """The end record turned zip64: a locator and a zip64 record claiming a directory of 2^40 bytes."""
    at, _, offset = end_record(data)
    record = struct.pack("<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, 3, 3, 1 << 40, offset)
    locator = struct.pack("<4sIQI", b"PK\x06\x07", 0, at, 1)
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return data[:at] + record + locator + end


# (what is wrong, how the served wheel is made from a real one, what the message says)
BROKEN = {
    "directory_size_claim": (lambda d: patched(d, end_record(d)[0] + 12, "<I", 0xFFFFFFF0), "claims 4,294,967,280 bytes"),
    "zip64_size_claim": (with_zip64_claim, "its central directory claims 1,099,511,627,776 bytes, more than the 64 MiB"),
    "directory_offset_past_the_end": (lambda d: patched(d, end_record(d)[0] + 16, "<I", len(d) * 2), "runs past the end record"),
    "entry_count_lie": (lambda d: patched(d, end_record(d)[0] + 8, "<HH", 900, 900), "members in"),
    "no_end_record": (lambda d: d[:-22], "no end of central directory record"),
    "unknown_method": (member_patch("method", 99), "uses compression method 99; a wheel's members are stored (0) or deflated (8)"),
    "encrypted": (member_patch("flags", 0x1), "is encrypted"),
    "patched_data_flag_bit_5": (member_patch("flags", 0x20), "is compressed patched data (flag bit 5)"),
    "member_size_ratio": (member_patch("size", 900_000), "a ratio past deflate's"),
    "member_offset_into_the_directory": (member_patch("offset", 0x7FFFFFF0), "runs into the central directory"),
    "garbage": (lambda d: b"\x00" * len(d), "no end of central directory record"),
}


def read(data: bytes, wanted=lambda name: name.endswith((".dist-info/METADATA", "torch/version.py"))) -> tuple[dict, PypiDouble]:
    """The members of the served wheel that compat check reads, and the double that served it (stopped)."""
    double = served(data)
    try:
        return remote_wheel.read_members(WheelIndex(double.url), f"{double.url.removesuffix('/simple')}/files/torch/{WHEEL}", wanted), double
    finally:
        double.stop()


@pytest.mark.parametrize("case", BROKEN)
def test_a_wheel_whose_zip_structures_lie_is_one_message(case):
    change, expected = BROKEN[case]
    data = change(wheel())
    with pytest.raises(WheelIndexError) as raised:
        read(data)
    message = str(raised.value.problems[0])
    assert f"{WHEEL} is not a readable wheel: " in message and expected in message, message
    assert message.isprintable()


@pytest.mark.slow
@pytest.mark.parametrize("case", ["zip64_size_claim", "unknown_method", "patched_data_flag_bit_5"])
def test_compat_check_says_a_broken_wheel_in_one_message_with_exit_1(cli, case):
    change, expected = BROKEN[case]
    data = change(wheel())
    double = served(data)
    try:
        result = cli("compat", "check", *OFFLINE, "--pypi", double.url)
    finally:
        double.stop()
    assert result.code == 1 and "Traceback" not in result.err and "internal error" not in result.err, result.err
    errors = [line for line in result.err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and f"{WHEEL} is not a readable wheel: " in errors[0] and expected in errors[0], result.err
    assert ranged_bytes(double, len(data)) <= remote_wheel.SMALL_BUDGET


@pytest.mark.slow
def test_a_metadata_deflate_bomb_is_refused_by_its_declared_size_before_inflating():
    bomb = metadata_text("torch", "2.15.0", ">=3.11", ()) + "A" * (50 << 20)
    data = wheel(metadata=bomb)
    assert len(data) < 1 << 20  # 50 MB that deflate to about 50 KB
    with pytest.raises(WheelIndexError, match=f"'{METADATA}' is {len(bomb):,} bytes, more than the 1,048,576 read of it"):
        read(data)


@pytest.mark.slow
def test_a_bomb_that_declares_a_small_size_stops_at_that_size():
    bomb = (metadata_text("torch", "2.15.0", ">=3.11", ()) + "A" * (50 << 20)).encode()
    member = wheel_zip.Member(METADATA, wheel_zip.DEFLATED, 0, zlib.crc32(bomb[:2000]), 0, 2000, 0)
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    compressed = packer.compress(bomb) + packer.flush()
    member = wheel_zip.Member(METADATA, wheel_zip.DEFLATED, 0, member.crc, len(compressed), 2000, 0)
    wheel_zip.check_readable(member, remote_wheel.MAX_SMALL_MEMBER)
    inflater = wheel_zip.Inflater(member)
    with pytest.raises(wheel_zip.ZipError, match="inflates past the 2,000 bytes its directory record declares"):
        list(inflater.feed(compressed))
    assert inflater.written == 2001  # one byte past the declared size, never the 50 MB


@pytest.mark.slow
def test_a_50_mb_version_module_is_refused_unread():
    module = torch_version_module("2.15.0", "cu132") + ("# padding\n" * (5 << 20))
    with pytest.raises(WheelIndexError, match=f"'torch/version.py' is {len(module):,} bytes, more than the 1,048,576 read of it"):
        read(wheel(version_py=module))


@pytest.mark.slow
def test_a_version_module_with_a_5000_deep_expression_is_read_as_data(tmp_path):
    """Only its top-level scalar assignments are parsed (ast.parse of the whole module raised RecursionError); what
    it would run, it does not."""
    witness = tmp_path / "ran"
    module = (
        torch_version_module("2.15.0", "cu132")
        + "x = "
        + "-" * 5000
        + "1\n"
        + "y = "
        + "(" * 5000
        + ")" * 5000
        + "\n"
        + f"__import__('os').mkdir({str(witness)!r})\n"
    )
    members, _ = read(wheel(version_py=module))
    assert read_version_module(members["torch/version.py"].decode())["__version__"] == "2.15.0+cu132" and not witness.exists()


def test_a_bracketed_literal_past_its_bounds_is_refused_before_it_is_parsed():
    table = "TABLE = {" + '"a": {' * 20 + "1" + "}" * 21 + "\n"
    with pytest.raises(literals.LiteralError, match="nested deeper than 3 levels"):
        literals.assigned_literal(table, "TABLE", max_depth=3)
    with pytest.raises(literals.LiteralError, match="does not end within 100 characters"):
        literals.assigned_literal("TABLE = [" + "1, " * 1000 + "]\n", "TABLE", max_chars=100)
    with pytest.raises(literals.LiteralError, match="more than the 1,048,576 read of a module"):
        literals.module_constants("x = 1\n" * (1 << 18))
    assert literals.assigned_literal('T: dict = {"12.6": {"x86_64": {50, 60}}}  # c\n', "T", max_depth=3) == {"12.6": {"x86_64": {50, 60}}}
    assert literals.assigned_literal("x = 1\n", "T") is literals.ABSENT


def test_metadata_fields_past_their_bounds_are_left_out():
    requires = ("x" * 5000, *(f"package-{index}>=1" for index in range(5 * MAX_REQUIREMENTS)))
    metadata = read_metadata(metadata_text("torch", "2.15.0", ">=3.11" + " " * 5000, requires))
    assert len(metadata.requires_dist) == MAX_REQUIREMENTS - 1 and metadata.requires_python == ""  # the long one left out


@pytest.mark.slow
def test_a_page_of_more_files_than_a_project_has_is_one_message(cli):
    data = wheel()
    double = served(
        data,
        [
            PublishedFile(f"torch-2.15.{i}-cp312-cp312-manylinux_2_28_x86_64.whl", "2026-10-28T15:16:25Z", ">=3.11", b"")
            for i in range(1, package_index.MAX_FILES + 1)
        ],
    )
    try:
        result = cli("compat", "check", *OFFLINE, "--pypi", double.url)
    finally:
        double.stop()
    assert result.code == 1 and f"it lists more than {package_index.MAX_FILES:,} files, more than a project's page holds" in result.err
    assert not double.ranges  # no wheel read


@pytest.mark.slow
def test_more_releases_than_a_project_has_had_is_one_message_before_any_wheel_is_read(cli):
    """100,000 releases once took minutes of CPU (each paired with every other) after 99 requests."""
    count = compat_check.MAX_RELEASES + 1
    double = served(
        wheel(), [PublishedFile(f"torch-2.15.{i}-cp312-cp312-manylinux_2_28_x86_64.whl", "2026-10-28T15:16:25Z", ">=3.11", b"") for i in range(1, count)]
    )
    try:
        result = cli("compat", "check", *OFFLINE, "--pypi", double.url)
    finally:
        double.stop()
    assert result.code == 1 and f"its torch page lists {count:,} releases, more than the {compat_check.MAX_RELEASES}" in result.err
    assert not double.ranges and len(double.requests) == 3  # torch's, torchvision's and torchaudio's pages


INJECTED = '>=3.11"\n[torch."9.9"]\npython = ["3.99"]\n'


@pytest.mark.slow
def test_write_writes_an_index_value_as_a_value_never_as_a_key(cli, tmp_path):
    """A Requires-Python that is TOML (quotes, a line break, a table header) is written as the string it is: the
    written data has the keys it had plus the release's table, and reads back with that string."""
    from buildkit.adapters.files.bundled import COMPAT_DATA

    data = tmp_path / "compat.toml"
    document = tomlkit.parse(COMPAT_DATA.read_text())
    del document["torch"]["2.15"]["published"]
    data.write_text(tomlkit.dumps(document))
    metadata = metadata_text("torch", "2.15.0", ">=3.11", ()).replace(
        "Requires-Python: >=3.11\n", "Requires-Python: >=3.11\n " + INJECTED.replace("\n", "\n ").rstrip() + "\n"
    )
    assert read_metadata(metadata).requires_python.count("[torch.") == 1
    double = served(wheel(metadata=metadata))
    try:
        result = cli("compat", "check", *OFFLINE, "--pypi", double.url, "--data", data, "--write")
    finally:
        double.stop()
    assert "Traceback" not in result.err, result.err
    written = tomlkit.parse(data.read_text()).unwrap()
    assert "9.9" not in written["torch"] and set(written["torch"]) == set(document.unwrap()["torch"])
    assert written["torch"]["2.15"]["published"]["2.15.0"]["requires_python"] == read_metadata(metadata).requires_python
