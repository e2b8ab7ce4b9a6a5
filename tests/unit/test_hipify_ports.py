"""hipify on the shapes real ports meet (tests/fixtures/rocm_ports/*, the project's own trees): code already
guarded for ROCm, 32-bit warp masks behind macros and casts, CUB's macros beside a namespace alias, a
setup.py whose WITH_CUDA the build defines, libcu++ and a header the installed HIP is too old for. torch's
real hipify, and where hipcc is installed (CI: Debian 12's, HIP 5.2) a compile check on this machine; the
same shapes under HIP 6.4 are in tests/integration/test_hipify_toolchain.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

PORTS = Path(__file__).resolve().parent.parent / "fixtures" / "rocm_ports"


def _run(cli, tmp_path, tree: str | Path, *options: str):
    source = tree if isinstance(tree, Path) else PORTS / tree
    result = cli("hipify", source, "--out", tmp_path / "out", "--json", tmp_path / "report.json", *options)
    return result, json.loads((tmp_path / "report.json").read_text())


def _lines(findings: list[dict]) -> list[tuple[int, str, bool]]:
    return [(f["line"], f["subject"], f["blocks"]) for f in findings]


def test_code_guarded_for_rocm_is_not_reported(cli, tmp_path):
    """libcu++ and the 32-lane warp code inside #ifndef USE_ROCM: inactive on ROCm, listed apart, never blocking."""
    result, report = _run(cli, tmp_path, "guarded_libcuxx")
    assert result.code == 1, result.out  # the open branch's libcu++ include may be compiled: it blocks until a compile says otherwise
    assert _lines(report["inactive"]) == [
        (6, "#include <cuda/std/atomic>", False),
        (14, "int lane = threadIdx.x & 0x1f;", False),
        (16, "__shfl_xor_sync", False),
    ]
    assert all(f["state"] == "inactive" and f["condition"] == "#ifndef USE_ROCM" for f in report["inactive"])
    # a branch decided by a macro nobody here knows stays reported, and says which #if it is in
    (open_finding,) = report["findings"]
    assert (open_finding["line"], open_finding["state"], open_finding["blocks"]) == (9, "open", True)
    assert open_finding["condition"] == "#if !defined(__HIP_PLATFORM_AMD__) || defined(FORCE_CUDA_PATH)"
    assert "inactive on ROCm, not counted: 3 findings in #if branches the ROCm build does not compile (reduce.cu:6, reduce.cu:14" in result.out
    assert "which the ROCm build's macros do not settle" in result.out


@pytest.mark.slow
def test_a_blocking_finding_stops_blocking_when_every_including_unit_compiles(cli, hipcc, tmp_path):
    result, report = _run(cli, tmp_path, "guarded_libcuxx", "--compile-check", "--offload-arch", "gfx90a")
    assert result.code == 0, result.out
    (finding,) = report["findings"]
    assert finding["subject"] == "#include <cuda/std/limits>" and not finding["blocks"] and finding["compiled_by"] == ["reduce.hip"]
    assert report["compiled"][0]["status"] == "ok" and "reduce.hip" in report["compiled"][0]["includes"]
    assert "[compiles on ROCm: reduce.hip]" in result.out and report["passed"]


def test_32_bit_masks_block_through_macros_casts_constants_and_parameters(cli, tmp_path):
    result, report = _run(cli, tmp_path, "full_mask")
    assert result.code == 1
    assert _lines(report["findings"]) == [
        (11, "__shfl_down_sync", True),
        (16, "__shfl_xor_sync", True),
        (17, "__shfl_xor_sync", True),
        (21, "__shfl_sync", True),
    ]  # 0xffffffffu on line 26 is a literal argument of broadcast(), __activemask() is 64-bit
    details = [f["detail"] for f in report["findings"]]
    assert details[0].startswith("the mask FULL_MASK (FULL_MASK = 0xffffffff) is 32 bits: HIP >= 6.2's __shfl_down_sync requires a 64-bit mask")
    assert details[1].startswith("the mask uint32_t(-1) is 32 bits") and details[2].startswith("the mask kAllLanes (kAllLanes = ~0u) is 32 bits")
    assert details[3].startswith("the mask mask (mask is unsigned) is 32 bits")


def test_cub_macros_and_32_thread_launches_are_reported_and_the_guarded_cub_is_not(cli, tmp_path):
    result, report = _run(cli, tmp_path, "cub_alias")
    assert result.code == 1
    assert _lines(report["findings"]) == [(17, "CUB_WARP_THREADS", True), (21, "block THREADS", False)]
    assert "hipCUB's: HIPCUB_WARP_THREADS (device code) or HIPCUB_HOST_WARP_THREADS (host code)" in report["findings"][0]["detail"]
    assert report["findings"][1]["detail"].startswith("a launch with 32 threads along x (THREADS = 32): one CUDA warp, but half a 64-lane wavefront")
    assert _lines(report["inactive"]) == [(6, "#include <cub/warp/warp_reduce.cuh>", False)]


@pytest.mark.slow
def test_setup_py_flags_reach_the_compile(cli, hipcc, tmp_path):
    """define_macros' WITH_CUDA selects the branch a real build compiles (and its TORCH_HIP_VERSION error), the
    nvcc flags reach hipcc hipified as torch does (-DCUDA_KERNELS is -DHIP_KERNELS), include_dirs are searched."""
    result, report = _run(cli, tmp_path, "with_cuda", "--compile-check", "--offload-arch", "gfx90a")
    assert result.code == 1, result.out
    assert report["build_flags"] == ["setup.py:11 with_cuda._C: -DWITH_CUDA, -Icsrc/include, hipcc: -O2 -DHIP_KERNELS, c++: -O2"]
    units = {unit["source"]: unit for unit in report["compiled"]}
    assert units["csrc/kernel.cu"]["status"] == "ok", units["csrc/kernel.cu"]["output"]
    version = units["csrc/version.cpp"]
    assert (version["status"], version["location"]) == ("error", "csrc/version.cpp:10 (csrc/version_hip.cpp:11)")
    assert "TORCH_HIP_VERSION" in version["summary"]
    assert "-DWITH_CUDA" in version["command"] and "-O2" in version["command"] and version["command"][0] == "c++"
    # what each unit reads of the tree: the compiled one's dependency list, the failed one's from its preprocessor
    assert (units["csrc/kernel.cu"]["includes"], version["includes"]) == (["csrc/kernel.hip", "csrc/include/scale.h"], ["csrc/version_hip.cpp"])
    kernel = units["csrc/kernel.cu"]["command"]
    assert kernel[0] == hipcc.path and "-DHIP_KERNELS" in kernel and any(flag.endswith("/csrc/include") for flag in kernel)


@pytest.mark.slow
def test_without_its_setup_py_the_with_cuda_branch_goes_unchecked(cli, hipcc, tmp_path):
    """The same tree with no setup.py to read compiles: what the check missed before it read the project's flags."""
    tree = tmp_path / "tree"
    shutil.copytree(PORTS / "with_cuda", tree)
    (tree / "setup.py").unlink()
    result, report = _run(cli, tmp_path, tree, "--compile-check", "--offload-arch", "gfx90a", "--include-dir", "csrc/include", "-D", "HIP_KERNELS")
    assert result.code == 0, result.out
    assert [unit["status"] for unit in report["compiled"]] == ["ok", "ok"]
    (tmp_path / "again").mkdir()
    again, _ = _run(
        cli, tmp_path / "again", tree, "--compile-check", "--offload-arch", "gfx90a", "--include-dir", "csrc/include", "-D", "HIP_KERNELS", "-D", "WITH_CUDA"
    )
    assert again.code == 1 and "command line: -DHIP_KERNELS, -DWITH_CUDA" in again.out


@pytest.mark.slow
def test_every_error_of_a_file_is_listed_once_per_line(cli, hipcc, tmp_path):
    result, report = _run(cli, tmp_path, "full_mask", "--compile-check", "--offload-arch", "gfx90a")
    (unit,) = report["compiled"]
    # HIP 5.2 has no *_sync intrinsics at all: each use is an error, and hipcc's two passes report each line once
    assert [error["location"] for error in unit["errors"]] == [f"warp_reduce.cu:{n} (warp_reduce.hip:{n + 1})" for n in (11, 16, 17, 21, 26)]
    assert unit["summary"].endswith("(and 4 more errors in your code)")
    assert "    error: warp_reduce.cu:21 (warp_reduce.hip:22): use of undeclared identifier '__shfl_sync'" in result.out


@pytest.mark.slow
def test_a_header_newer_than_the_installed_hip_is_that_hips_age(cli, hipcc, tmp_path):
    if hipcc.version and tuple(map(int, hipcc.version.split("."))) >= (5, 6):
        pytest.skip(f"hipcc {hipcc.version} has hip/hip_bf16.h")
    result, report = _run(cli, tmp_path, "too_old_hip", "--compile-check", "--offload-arch", "gfx90a")
    (unit,) = report["compiled"]
    assert unit["status"] == "missing"
    assert (
        f"hip/hip_bf16.h is not installed here (included at convert.cu:3 (convert.hip:4)): this HIP ({hipcc.version}) is too old for "
        "hip/hip_bf16.h; HIP >= 5.6 has it"
    ) in unit["summary"]
    assert "libamdhip64-dev" not in unit["summary"]
    assert result.code == 1 and "NOT PASSED: the compile check compiled nothing: no file compiled, each for a reason outside your code" in result.out


@pytest.mark.slow
def test_libcuxx_is_code_to_change_with_its_rocm_counterpart(cli, hipcc, tmp_path):
    result, report = _run(cli, tmp_path, "libcuxx", "--compile-check", "--offload-arch", "gfx90a")
    (unit,) = report["compiled"]
    assert (unit["status"], unit["location"]) == ("error", "limits.cu:3 (limits.hip:4)")
    assert (
        "cuda/std/limits is libcu++ (CUDA's C++ standard library), which no ROCm library provides: the code must change; on ROCm use "
        "<limits> (std::numeric_limits), or rocprim::numeric_limits in <rocprim/type_traits.hpp>"
    ) in unit["summary"]
    assert "install the library" not in unit["summary"] and result.code == 1


@pytest.mark.slow
def test_objects_are_kept_where_asked(cli, hipcc, tmp_path):
    objects = tmp_path / "objects"
    result, report = _run(cli, tmp_path, "guarded_libcuxx", "--compile-check", "--offload-arch", "gfx90a", "--keep-objects", str(objects))
    assert result.code == 0, result.out
    assert (objects / "reduce.hip.o").stat().st_size > 0 and report["objects"] == str(objects)
    assert str(objects / "reduce.hip.o") in report["compiled"][0]["command"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["-D", "1BAD"], "-D: expected NAME or NAME=VALUE"),
        (["--hipcc-flags=-O2"], "--hipcc-flags: only applies to --compile-check"),
        (["--compile-check", "--cxx-flags", "'unclosed"], "--cxx-flags: cannot be split into flags"),
        (["--compile-check", "--keep-objects", "{source}/objects"], "--keep-objects: "),
    ],
)
def test_bad_build_flag_options_are_one_clear_error(cli, tmp_path, options, message):
    tree = tmp_path / "tree"
    shutil.copytree(PORTS / "guarded_libcuxx", tree)
    refused = cli("hipify", tree, "--out", tmp_path / "out", *(o.replace("{source}", str(tree)) for o in options))
    assert refused.code == 2 and message in refused.err and "Traceback" not in refused.err, refused.err
    assert not (tmp_path / "out").exists()
