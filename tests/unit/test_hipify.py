"""The hipify preflight on CUDA extensions the project owns (tests/fixtures/cuda_ext*), with torch's real
hipify and, where hipcc is installed (CI installs Debian 12's, HIP 5.2), a compile check for one AMD arch
on this machine (the same check in a ROCm toolchain image, for gfx942: tests/integration/test_hipify_toolchain.py).

Then the same tree as a hostile or careless user hands it over: real symlinks leading out of it, loops,
FIFOs, binary sources, unreadable folders, and --out folders that are the tree, hold it, or were tampered
with. Every refusal is exit 2 with one message and no traceback, and leaves every file as it was."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest

from buildkit.adapters.files.bundled import shipped_compat
from buildkit.adapters.hipify.compile_check import build_macros, compile_check
from buildkit.adapters.hipify.convert import run_hipify
from buildkit.adapters.hipify.hipcc import Hipcc, default_offload_arch, is_data_center
from buildkit.adapters.hipify.torch_extension import read_extension_build
from buildkit.core.porting.setup_py import ProjectFlags
from testkit.trees import assert_refused, snapshot, unprivileged

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
FIXTURE = FIXTURES / "cuda_ext"
KNOWN = shipped_compat().known_archs["rocm"]
MANIFEST = ".buildkit-hipify.json"
CliResult = namedtuple("CliResult", "code out err")
# The macros the ROCm build starts with when no compiler is asked: torch's flags and what HIP's clang defines.
ROCM = build_macros(None, read_extension_build("gfx942", "fixture"), ProjectFlags(), "gfx942")


@pytest.fixture(scope="module")
def hipified(tmp_path_factory):
    out = tmp_path_factory.mktemp("hip") / "out"
    return run_hipify(FIXTURE, out, ROCM), out


@pytest.fixture
def source(tmp_path) -> Path:
    """A copy of the fixture the test may plant things in."""
    tree = tmp_path / "src"
    shutil.copytree(FIXTURE, tree)
    return tree


@pytest.fixture
def clean_source(tmp_path) -> Path:
    """One kernel and its header: everything maps and compiles, so the exit code is the compile check's."""
    tree = tmp_path / "clean"
    (tree / "include").mkdir(parents=True)
    shutil.copy(FIXTURE / "scale_kernel.cu", tree)
    shutil.copy(FIXTURE / "include" / "scale.cuh", tree / "include")
    return tree


def test_kernels_launches_streams_and_headers_become_hip(hipified):
    report, out = hipified
    assert sorted(report.converted) == ["gemm.hip", "include/scale_hip.cuh", "scale_kernel.hip"]
    assert report.unchanged == ["util.cpp"]
    kernel = (out / "scale_kernel.hip").read_text()
    for hip in (
        "#include <hip/hip_runtime.h>",
        "hipStream_t",
        "hipMalloc(",
        "hipMemcpyAsync(",
        "hipMemcpyHostToDevice",
        "hipStreamSynchronize(",
        "hipSuccess",
        '#include "include/scale_hip.cuh"',
    ):
        assert hip in kernel, hip
    assert "cudaMalloc" not in kernel
    assert "hipblasSgemm(" in (out / "gemm.hip").read_text()
    assert "#include <hip/hip_runtime.h>" in (out / "include/scale_hip.cuh").read_text()
    assert (FIXTURE / "scale_kernel.cu").read_text().count("cudaMalloc") == 2  # out of place: the source is untouched


def test_output_lists_every_file_it_wrote(hipified):
    _, out = hipified
    listed = json.loads((out / MANIFEST).read_text())
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()} - {MANIFEST}
    assert listed["written_by"] == "buildkit hipify" and set(listed["files"]) == on_disk
    assert "gemm.cu" in on_disk and "scale_kernel.hip" in on_disk


def test_identifier_without_mapping_is_reported_at_the_users_line(hipified):
    report, _ = hipified
    assert [(f.file, f.line, f.kind, f.subject, f.hipified) for f in report.findings] == [
        ("gemm.cu", 11, "unmapped", "cudaMemcpyBatchAsync", "gemm.hip:12")
    ]  # hipify's breadcrumb is gemm.hip's line 1
    assert report.origins == {"gemm.hip": "gemm.cu", "include/scale_hip.cuh": "include/scale.cuh", "scale_kernel.hip": "scale_kernel.cu"}
    assert not report.passed


def test_what_will_not_port_is_found_at_its_line(cli, tmp_path):
    """Inline PTX, warp intrinsics HIP lacks or whose mask differs, lane arithmetic for 32-thread warps and
    CUDA-only libraries: every line the fixture marks, and no other."""
    fixture = FIXTURES / "cuda_ext_warp"
    marked = [
        (number, *line.split("PORT: ")[1].split(", ")) for number, line in enumerate((fixture / "reduce.cu").read_text().splitlines(), 1) if "// PORT: " in line
    ]
    result = cli("hipify", fixture, "--out", tmp_path / "out", "--json", tmp_path / "report.json")
    assert result.code == 1  # blocking findings
    findings = json.loads((tmp_path / "report.json").read_text())["findings"]
    assert [(f["line"], f["kind"], "blocks" if f["blocks"] else "review") for f in findings] == marked
    assert all(f["file"] == "reduce.cu" and f["hipified"] == f"reduce.hip:{f['line'] + 1}" for f in findings)
    assert "will not port: reduce.cu:11 (reduce.hip:12): __shfl_down_sync: the mask 0xffffffff is 32 bits" in result.out
    assert "will not port: reduce.cu:17 (reduce.hip:18): asm(...): inline assembly (PTX)" in result.out
    assert "review: reduce.cu:22 (reduce.hip:23): int lane = threadIdx.x & 31;: lane arithmetic for 32-thread warps" in result.out


@pytest.mark.slow
def test_compile_check_with_hipcc(hipified, hipcc):
    report, _ = hipified
    result = {c.file: c for c in compile_check(report, "gfx90a", KNOWN, hipcc).compiled}
    assert result["scale_kernel.hip"].status == "ok", result["scale_kernel.hip"].output
    assert (result["scale_kernel.hip"].compiler, result["scale_kernel.hip"].source) == ("hipcc", "scale_kernel.cu")
    assert (result["util.cpp"].status, result["util.cpp"].compiler) == ("ok", "c++"), result["util.cpp"].output
    # Debian 12 ships no hipBLAS headers: this machine's gap, named with where to get them, not a code defect
    gemm = result["gemm.hip"]
    assert gemm.status == "missing"
    assert gemm.summary.startswith(
        "hipblas/hipblas.h is not installed here (included at gemm.cu:3 (gemm.hip:4)): hipBLAS's headers: libhipblas-dev (Debian 13 and later)"
    )
    assert gemm.summary.endswith("or check in a ROCm toolchain image that has it (--toolchain-image IMAGE)")


@pytest.mark.slow
def test_host_cpp_defect_is_reported_at_its_line(hipcc, clean_source, tmp_path):
    """A .cpp goes to the C++ compiler beside hipcc (g++ here), as torch's extension build does: its error
    is the code's, at its line."""
    (clean_source / "host.cpp").write_text("int twice(int x) {\n  return x * undeclared_factor;\n}\n")
    report = compile_check(run_hipify(clean_source, tmp_path / "out", ROCM), "gfx90a", KNOWN, hipcc)
    (host,) = [c for c in report.compiled if c.file == "host.cpp"]
    assert (host.status, host.compiler, host.location) == ("error", "c++", "host.cpp:2"), host.output
    assert host.summary.startswith("host.cpp:2: error: ") and "undeclared_factor" in host.summary
    assert not report.passed


@pytest.mark.slow
def test_torch_extension_on_this_machine_names_what_is_missing(cli, hipcc, tmp_path):
    """The extension's .cu on Debian 12's hipcc: torch's headers want rocThrust, which Debian 12 lacks. The
    file is not checkable here, which says nothing against the code, and the report says how to check it; with
    nothing compiled, the run does not pass."""
    tree = tmp_path / "extension"
    shutil.copytree(FIXTURES / "cuda_ext_torch", tree)
    (tree / "extension_cpp" / "csrc" / "muladd.cpp").unlink()  # its g++ compile is the toolchain image test's
    result = cli("hipify", tree, "--out", tmp_path / "out", "--compile-check", "--offload-arch", "gfx90a", "--json", tmp_path / "r.json")
    assert result.code == 1, result.out + result.err  # nothing could be compiled here: not a pass
    assert "NOT PASSED: the compile check compiled nothing: no file compiled, each for a reason outside your code" in result.out
    assert f"compile check for gfx90a with hipcc {hipcc.version} ({hipcc.path} on this machine)" in result.out
    assert "torch's ROCm headers: torch 2.13.0+cpu is not a ROCm build: its CUDA headers (ATen/cuda, c10/cuda) hipified" in result.out
    (unit,) = json.loads((tmp_path / "r.json").read_text())["compiled"]
    assert (unit["file"], unit["source"], unit["status"]) == ("extension_cpp/csrc/hip/muladd.hip", "extension_cpp/csrc/cuda/muladd.cu", "missing")
    assert unit["summary"].startswith("thrust/complex.h is not installed here (included by ")
    assert "torch/headeronly/util/complex.h:" in unit["summary"] and "librocthrust-dev" in unit["summary"]


def test_cli_reports_and_fails_on_unmapped_identifiers(cli, tmp_path):
    result = cli("hipify", FIXTURE, "--out", tmp_path / "out", "--json", tmp_path / "report.json")
    assert result.code == 1
    assert "will not port: gemm.cu:11 (gemm.hip:12): cudaMemcpyBatchAsync: a CUDA identifier hipify has no HIP mapping for" in result.out
    assert json.loads((tmp_path / "report.json").read_text())["findings"][0]["subject"] == "cudaMemcpyBatchAsync"


def test_cli_rejects_unknown_arch_and_unsafe_output(cli, tmp_path):
    unknown = cli("hipify", FIXTURE, "--compile-check", "--offload-arch", "gfx9999")
    assert unknown.code == 2 and "unknown gfx target 'gfx9999'; known: gfx900" in unknown.err
    for options, message in (
        (["--toolchain-image", "rocm/dev-ubuntu-24.04:7.2.1-complete"], "--toolchain-image: only applies to --compile-check"),
        (["--compile-check", "--toolchain-image", "Bad Image"], "--toolchain-image: expected an image reference"),
        (["--compile-check", "--include-dir", "../elsewhere"], "--include-dir: '../elsewhere' is not a folder inside"),
        (["--compile-check", "--include-dir", "no-such-folder"], "--include-dir: 'no-such-folder' is not a folder inside"),
    ):
        refused = cli("hipify", FIXTURE, "--out", tmp_path / "refused", *options)
        assert refused.code == 2 and message in refused.err and "Traceback" not in refused.err, (options, refused.err)
        assert not (tmp_path / "refused").exists()
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    before = snapshot(busy)
    assert_refused(cli("hipify", FIXTURE, "--out", busy), "is not empty and is not an earlier buildkit hipify output")
    assert snapshot(busy) == before


# --- where --out may be ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["the tree itself", "inside the tree", "around the tree"])
def test_out_never_overlaps_the_source_tree(cli, tmp_path, where):
    earlier = tmp_path / "earlier-output"
    assert cli("hipify", FIXTURE, "--out", earlier).code == 1  # a real earlier output, with its manifest
    user_sources = earlier / "my-extension"  # the user then keeps sources inside it
    shutil.copytree(FIXTURE, user_sources)
    out = {"the tree itself": user_sources, "inside the tree": user_sources / "hip", "around the tree": earlier}[where]
    before = snapshot(tmp_path)
    expected = "contains the source tree" if where == "around the tree" else "is inside the source tree"
    assert_refused(cli("hipify", user_sources, "--out", out), "--out", expected)
    assert snapshot(tmp_path) == before


def test_out_that_is_a_file_is_refused(cli, source, tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("mine")
    before = snapshot(tmp_path)
    assert_refused(cli("hipify", source, "--out", target), "is a file, not a folder")
    assert snapshot(tmp_path) == before


def test_rerun_removes_only_files_it_wrote(cli, source, tmp_path):
    out = tmp_path / "out"
    assert cli("hipify", source, "--out", out).code == 1
    mine = {out / "NOTES.md": "my notes", out / "include" / "extra.h": "// mine", out / "mine" / "a.txt": "a"}
    for path, text in mine.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (source / "gemm.cu").unlink()  # the next run no longer writes gemm.cu nor gemm.hip

    result = cli("hipify", source, "--out", out, "--json", tmp_path / "report.json")

    assert result.code == 0, result.err
    assert "removed 2 files of an earlier run" in result.out
    assert json.loads((tmp_path / "report.json").read_text())["removed"] == ["gemm.cu", "gemm.hip"]
    assert not (out / "gemm.hip").exists() and (out / "scale_kernel.hip").is_file()
    assert all(path.read_text() == text for path, text in mine.items())


def test_output_file_edited_since_is_neither_overwritten_nor_removed(cli, source, tmp_path):
    out = tmp_path / "out"
    assert cli("hipify", source, "--out", out).code == 1
    (out / "gemm.hip").write_text("// my fix\n")
    before = snapshot(tmp_path)
    assert_refused(cli("hipify", source, "--out", out), "gemm.hip", "was changed since buildkit hipify wrote it")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("planted", ["gemm.hip", "include"])
def test_symlink_planted_in_out_is_never_followed(cli, source, tmp_path, planted):
    out, elsewhere = tmp_path / "out", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "gemm.hip").write_text("the user's own file, outside --out")
    assert cli("hipify", source, "--out", out).code == 1
    path = out / planted
    shutil.rmtree(path) if path.is_dir() else path.unlink()
    path.symlink_to(elsewhere / planted if planted.endswith(".hip") else elsewhere)
    before = snapshot(tmp_path)
    assert_refused(cli("hipify", source, "--out", out), f"out/{planted}", "is a symlink")
    assert snapshot(tmp_path) == before


# --- what the source tree may hold -----------------------------------------------------------------------------


def test_symlinks_out_of_the_tree_loops_and_fifos_are_reported_not_copied(cli, source, tmp_path):
    secrets = tmp_path / "home"
    secrets.mkdir()
    (secrets / "token.h").write_text('#define TOKEN "s3cr3t-outside-the-tree"\n')
    (source / "outside_dir").symlink_to(secrets)
    (source / "outside.h").symlink_to(secrets / "token.h")
    (source / "include" / "back_to_root").symlink_to("..")
    (source / "self").symlink_to("self")
    (source / "dangling.h").symlink_to(tmp_path / "nowhere.h")
    (source / "alias.cuh").symlink_to("include/scale.cuh")  # inside the tree: copied as the file it names
    os.mkfifo(source / "pipe.cu")
    before = snapshot(source, secrets)

    result = cli("hipify", source, "--out", tmp_path / "out", "--json", tmp_path / "report.json")

    assert result.code == 1 and "Traceback" not in result.err  # 1: the fixture's unmapped identifier
    skipped = {entry["path"]: entry["reason"] for entry in json.loads((tmp_path / "report.json").read_text())["skipped"]}
    assert set(skipped) == {"outside_dir", "outside.h", "include/back_to_root", "self", "dangling.h", "pipe.cu"}
    assert "outside the source tree" in skipped["outside_dir"] and "outside the source tree" in skipped["outside.h"]
    assert "symlink loop" in skipped["include/back_to_root"] and "symlink loop" in skipped["self"]
    assert "does not exist" in skipped["dangling.h"] and "FIFO" in skipped["pipe.cu"]
    for path in skipped:
        assert f"not copied: {path}: " in result.out
    out = tmp_path / "out"
    written = list(out.rglob("*"))
    assert not any(p.is_symlink() for p in written)
    assert not any(b"s3cr3t" in p.read_bytes() for p in written if p.is_file())
    assert (out / "alias.cuh").read_text() == (source / "include" / "scale.cuh").read_text()
    assert snapshot(source, secrets) == before


def test_binary_cuda_source_is_one_clear_error(cli, source, tmp_path):
    (source / "kernels.cu").write_bytes(bytes(range(256)) * 4)
    (source / "blob.bin").write_bytes(b"\xff\xfe")  # not a file hipify reads: no problem
    before = snapshot(tmp_path)
    assert_refused(cli("hipify", source, "--out", tmp_path / "out"), "src/kernels.cu", "is not UTF-8 text (byte 0x80 at offset 128)")
    assert snapshot(tmp_path) == before  # --out not even created


def test_json_into_missing_folder_fails_before_any_work(cli, source, tmp_path):
    before = snapshot(tmp_path)
    assert_refused(cli("hipify", source, "--out", tmp_path / "out", "--json", tmp_path / "missing" / "r.json"), "--json", "folder", "does not exist")
    assert snapshot(tmp_path) == before


@pytest.mark.slow
@pytest.mark.parametrize("unreadable", ["the tree", "a file in it"])
def test_unreadable_source_is_one_clear_error(source, tmp_path, unreadable):
    locked = source if unreadable == "the tree" else source / "gemm.cu"
    locked.chmod(0)
    try:
        run = subprocess.run(
            unprivileged([sys.executable, "-m", "buildkit.cli", "hipify", str(source), "--out", str(tmp_path / "out")]),
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        locked.chmod(0o755)
    assert_refused(CliResult(run.returncode, run.stdout, run.stderr), f"{locked}: cannot be read", "hipify needs to read the whole tree")
    assert not (tmp_path / "out").exists()


# --- the compile check and the toolchain -----------------------------------------------------------------------


def test_default_arch_is_the_newest_data_center_arch_hipcc_supports(hipcc):
    chosen = default_offload_arch(hipcc, KNOWN)
    assert chosen in hipcc.archs and is_data_center(chosen)
    newer = KNOWN[KNOWN.index(chosen) + 1 :]
    assert not [arch for arch in newer if is_data_center(arch) and arch in hipcc.archs]


def test_default_arch_follows_what_the_toolchain_supports():
    def with_archs(*archs):
        return Hipcc("hipcc", "7.2", frozenset(archs) if archs else None)

    assert default_offload_arch(with_archs("gfx90a", "gfx942", "gfx950", "gfx1201"), KNOWN) == "gfx950"
    assert default_offload_arch(with_archs("gfx90a", "gfx942", "gfx1100"), KNOWN) == "gfx942"
    assert default_offload_arch(with_archs("gfx1030", "gfx1100"), KNOWN) == "gfx1100"  # no data-center arch at all
    assert default_offload_arch(with_archs(), KNOWN) == "gfx950"  # hipcc could not be asked
    assert default_offload_arch(None, KNOWN) == "gfx950"


@pytest.mark.slow
def test_compile_check_defaults_to_an_arch_this_hipcc_compiles(cli, hipcc, clean_source, tmp_path):
    result = cli("hipify", clean_source, "--out", tmp_path / "out", "--compile-check", "--json", tmp_path / "r.json")
    chosen = default_offload_arch(hipcc, KNOWN)
    assert result.code == 0, result.out + result.err
    assert f"compile check for {chosen} with hipcc {hipcc.version}" in result.out
    assert "scale_kernel.hip (from scale_kernel.cu), hipcc: compiles" in result.out
    assert json.loads((tmp_path / "r.json").read_text())["offload_arch"] == chosen


def test_arch_beyond_the_installed_hipcc_is_a_toolchain_limit_not_a_code_defect(cli, hipcc, clean_source, tmp_path):
    beyond = [arch for arch in KNOWN if arch not in hipcc.archs]
    if not beyond:
        pytest.skip(f"hipcc {hipcc.version} compiles for every known gfx target: no toolchain limit to show")
    arch = beyond[-1]
    result = cli("hipify", clean_source, "--out", tmp_path / "out", "--compile-check", "--offload-arch", arch, "--json", tmp_path / "r.json")
    assert result.code == 1, result.out + result.err  # nothing was compiled: not a pass, though the code is not blamed
    assert "DOES NOT COMPILE" not in result.out and "NOT PASSED: the compile check compiled nothing: hipcc" in result.out
    supported = ", ".join(a for a in KNOWN if a in hipcc.archs)
    expected = (
        f"compile check not run: hipcc {hipcc.version} cannot compile for {arch} (a toolchain limit, not your code): "
        f"install a newer ROCm, check in a newer ROCm toolchain image (--toolchain-image IMAGE), or pick --offload-arch from: {supported}"
    )
    assert expected in result.out
    assert json.loads((tmp_path / "r.json").read_text())["toolchain_limit"] == expected.removeprefix("compile check not run: ")


def test_toolchain_limit_is_recognised_in_hipcc_output_when_its_arch_list_is_unknown(hipcc, clean_source, tmp_path):
    """Where clang's arch list could not be read, the real compiler's refusal still reads as a toolchain limit."""
    beyond = [arch for arch in KNOWN if arch not in hipcc.archs]
    if not beyond:
        pytest.skip(f"hipcc {hipcc.version} compiles for every known gfx target: no toolchain limit to show")
    unasked = Hipcc(hipcc.path, hipcc.version, None)
    report = compile_check(run_hipify(clean_source, tmp_path / "out", ROCM), beyond[-1], KNOWN, unasked)
    assert [c.status for c in report.compiled] == ["toolchain"]  # and the check stops: every unit would say the same
    assert report.toolchain_limit.endswith("(--toolchain-image IMAGE), or pick another --offload-arch")
    assert report.failures == [f"the compile check compiled nothing: {report.toolchain_limit}"]
