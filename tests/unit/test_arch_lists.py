"""Each build's arch list, read from a torch release's own artifacts as data: the table PYTORCH_RELEASES_CODE_CC of
torch/cuda/__init__.py and the arch flags in libtorch_python.so's .rodata. Hostile versions of both are refused
with one message, never run and never allowed to cost more than their bounds."""

from __future__ import annotations

import tracemalloc

import pytest

from buildkit.core.upstream.arch_lists import MAX_MODULE_CHARS, ArchTableError, read_arch_flags, read_arch_table
from buildkit.core.upstream.code_objects import elf_sections
from testkit.artifacts import TABLE_2_11, TABLE_2_13
from testkit.elf import arch_flags_library, library_with_rodata


def test_a_per_machine_table_gives_each_builds_list_per_platform():
    table = read_arch_table(TABLE_2_13)
    assert table is not None and table.per_platform and table.versions == ("12.6", "12.9", "13.0", "13.2")
    assert table.lists[("12.9", "linux/amd64")] == ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0")
    assert table.lists[("12.9", "linux/arm64")] == ("8.0", "9.0", "10.0", "12.0")
    assert table.lists[("13.0", "linux/arm64")] == ("8.0", "9.0", "10.0", "11.0", "12.0")


def test_a_table_of_one_set_per_version_names_builds_but_no_lists():
    """2.11's sets merge both machines (13.0's 110 is aarch64's) and keep a Volta its cu128 build dropped."""
    table = read_arch_table(TABLE_2_11)
    assert table is not None and not table.per_platform and table.versions == ("12.6", "12.8", "13.0") and table.lists == {}


def test_a_module_without_a_table_has_none():
    assert read_arch_table("import torch\n\ndef is_available():\n    return False\n") is None
    assert read_arch_table("    PYTORCH_RELEASES_CODE_CC = {}\n") is None  # not a module-level assignment


def test_the_module_is_read_never_run(tmp_path):
    planted = tmp_path / "ran"
    text = f"import os\nos.mkdir({str(planted)!r})\n" + TABLE_2_11 + f"os.mkdir({str(planted)!r} + '2')\n"
    assert read_arch_table(text).versions == ("12.6", "12.8", "13.0") and not planted.exists()


@pytest.mark.parametrize(
    "table, why",
    [
        ("{" * 5000 + "}" * 5000, "nested deeper than 3"),
        ("{" + ", ".join(f'"{i}.0": {{75}}' for i in range(5000)) + "}", "does not end within"),
        ('__import__("os").system("true")', "not a literal table"),
        ('{v: {75} for v in ("13.0",)}', "not a literal"),
        ('{"13.0": {75, 80}, **other}', "not a literal"),
        ('{"13.0": {"x86_64": {75}, "riscv64": {75}}}', "names machines other than"),
        ('{"thirteen": {75}}', "no CUDA version"),
        ('{"13.0": {True, 80}}', "something other than compute capabilities"),
        ('{"13.0": {7500}}', "something other than compute capabilities"),
        ('{"13.0": {' + ", ".join(map(str, range(10, 200))) + "}}", "at most 64"),
        ('{"13.0\\x00": {75}}', "escape"),
        ("{}", "1 to 64 CUDA versions"),
    ],
    ids=[
        "5000 deep",
        "5000 builds",
        "a call",
        "a comprehension",
        "an unpacking",
        "a machine",
        "a key",
        "a bool",
        "a number",
        "190 archs",
        "an escape",
        "empty",
    ],
)
def test_a_hostile_table_is_one_error(table, why):
    with pytest.raises(ArchTableError, match=why):
        read_arch_table(f"PYTORCH_RELEASES_CODE_CC: dict = {table}\n")


def test_a_huge_module_is_refused_before_it_is_scanned():
    text = "#" * (MAX_MODULE_CHARS + 1)
    tracemalloc.start()
    try:
        with pytest.raises(ArchTableError, match="more than"):
            read_arch_table(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 10  # nothing the size of the module was made from it


def _rodata(library: bytes) -> bytes:
    offset, size = elf_sections(library)[".rodata"]
    return library[offset : offset + size]


def test_a_builds_arch_flags_are_the_longest_run_of_arch_names():
    # as in torch 2.15.0's x86_64 wheel; a lone "sm_90" constant beside them is not the build's list
    assert read_arch_flags(_rodata(arch_flags_library("sm_75 sm_80 sm_86 sm_90 sm_100 sm_120")), "cuda") == ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0")
    assert read_arch_flags(_rodata(arch_flags_library("sm_80 sm_90 sm_120 compute_120")), "cuda") == ("8.0", "9.0", "12.0+PTX")
    # torch 2.9.1's library: a string without its own terminator runs into the flags
    assert read_arch_flags(b"std::string ipc_hsm_70 sm_75 sm_80\x00\x00", "cuda") == ("7.0", "7.5", "8.0")
    assert read_arch_flags(_rodata(arch_flags_library("gfx90a:xnack- gfx942 gfx1100")), "rocm") == ("gfx90a", "gfx942", "gfx1100")
    assert read_arch_flags(b"\x00no archs here\x00", "cuda") == ()


def test_two_different_lists_of_the_same_length_are_no_answer():
    with pytest.raises(ArchTableError, match="2 different arch lists of 2 names"):
        read_arch_flags(b"\x00sm_80 sm_90\x00sm_75 sm_86\x00", "cuda")


def test_the_double_is_an_elf_file_the_reader_takes():
    library = library_with_rodata(b"\x00sm_75 sm_80\x00")
    assert set(elf_sections(library)) == {"", ".rodata", ".shstrtab"}
