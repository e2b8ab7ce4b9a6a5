"""hipify's compile check in a ROCm toolchain image, on an extension in the shape of PyTorch's own example
(tests/fixtures/cuda_ext_torch: a .cu with ATen, torch/library.h and ATen/cuda/CUDAContext.h, a host .cpp
with torch/extension.h), for gfx942, which this machine's Debian 12 hipcc cannot target. The image is the
local one from Debian's packages (.ci/rocm-toolchain-image.sh); torch is the test venv's CPU build, so its
ROCm headers are hipified from its CUDA headers. Both files must compile, and a defect planted in the .cu
must be reported at its line of the .cu. Then the shapes real ports meet (tests/fixtures/rocm_ports) under
the image's HIP 6.4 and GCC 16: 32-bit warp masks, the __noinline__ include-order clash, a cub alias."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "cuda_ext_torch"
KERNEL = "extension_cpp/csrc/cuda/muladd.cu"


def test_extension_compiles_for_gfx942_in_the_toolchain_image(cli, client, rocm_toolchain, tmp_path):
    result = cli(
        "hipify",
        FIXTURE,
        "--out",
        tmp_path / "out",
        "--compile-check",
        "--offload-arch",
        "gfx942",
        "--toolchain-image",
        rocm_toolchain,
        "--json",
        tmp_path / "report.json",
    )
    assert result.code == 0, result.out + result.err
    hip = client.images.get(rocm_toolchain).labels["dev.buildkit.hip-version"]
    assert f"compile check for gfx942 with hipcc {hip} (/usr/bin/hipcc in image {rocm_toolchain})" in result.out
    assert f"extension_cpp/csrc/hip/muladd.hip (from {KERNEL}), hipcc: compiles" in result.out
    assert "extension_cpp/csrc/muladd.cpp, c++: compiles" in result.out
    report = json.loads((tmp_path / "report.json").read_text())
    assert [(unit["file"], unit["status"]) for unit in report["compiled"]] == [
        ("extension_cpp/csrc/hip/muladd.hip", "ok"),
        ("extension_cpp/csrc/muladd.cpp", "ok"),
    ]
    assert report["headers"].startswith("torch 2.13.0+cpu is not a ROCm build: its CUDA headers (ATen/cuda, c10/cuda) hipified")


def test_defect_planted_in_the_cu_is_reported_at_its_line(cli, rocm_toolchain, tmp_path):
    tree = tmp_path / "extension"
    shutil.copytree(FIXTURE, tree)
    (tree / "extension_cpp" / "csrc" / "muladd.cpp").unlink()  # the .cu alone: the defect is there
    kernel = tree / KERNEL
    lines = kernel.read_text().splitlines()
    planted = lines.index("  int numel = a_contig.numel();") + 2  # the line after it, 1-based
    lines.insert(planted - 1, "  numel += planted_undeclared_name;")
    kernel.write_text("\n".join(lines) + "\n")

    result = cli(
        "hipify",
        tree,
        "--out",
        tmp_path / "out",
        "--compile-check",
        "--offload-arch",
        "gfx942",
        "--toolchain-image",
        rocm_toolchain,
        "--json",
        tmp_path / "report.json",
    )

    assert result.code == 1, result.out + result.err
    hipified_line = planted + 1  # hipify's breadcrumb comment is the .hip's first line
    assert (
        f"DOES NOT COMPILE: {KERNEL}:{planted} (extension_cpp/csrc/hip/muladd.hip:{hipified_line}): "
        "error: use of undeclared identifier 'planted_undeclared_name'"
    ) in result.out
    (unit,) = json.loads((tmp_path / "report.json").read_text())["compiled"]
    assert unit["status"] == "error" and unit["location"].startswith(f"{KERNEL}:{planted} ")


def test_image_without_hipcc_or_absent_is_one_clear_message(cli, base_image, tmp_path):
    no_hipcc = cli("hipify", FIXTURE, "--out", tmp_path / "out", "--compile-check", "--toolchain-image", base_image)
    assert no_hipcc.code == 2 and f"--toolchain-image: {base_image} has no hipcc" in no_hipcc.err
    assert "Traceback" not in no_hipcc.err and not (tmp_path / "out").exists()
    absent = cli("hipify", FIXTURE, "--out", tmp_path / "out", "--compile-check", "--toolchain-image", "buildkit-test/no-such-image:1")
    assert absent.code == 2 and "--toolchain-image: buildkit-test/no-such-image:1 is not in the engine: pull it first" in absent.err


# --- the shapes of real ports (tests/fixtures/rocm_ports), under Debian unstable's HIP 6.4 -----------------------

PORTS = Path(__file__).resolve().parent.parent / "fixtures" / "rocm_ports"


def _check(cli, rocm_toolchain, tmp_path, tree: str):
    result = cli(
        "hipify",
        PORTS / tree,
        "--out",
        tmp_path / "out",
        "--compile-check",
        "--offload-arch",
        "gfx942",
        "--toolchain-image",
        rocm_toolchain,
        "--json",
        tmp_path / "report.json",
    )
    return result, json.loads((tmp_path / "report.json").read_text())


def test_32_bit_masks_block_on_hip_6_4(cli, rocm_toolchain, tmp_path):
    """HIP 6.4 static_asserts a 64-bit mask: the static findings block, and the compiler's errors are each of
    the user's lines once (hipcc's host and device passes say them twice), not only the first."""
    result, report = _check(cli, rocm_toolchain, tmp_path, "full_mask")
    assert result.code == 1
    assert [(f["line"], f["blocks"]) for f in report["findings"]] == [(11, True), (16, True), (17, True), (21, True)]
    (unit,) = report["compiled"]
    # one static_assert per template specialization: line 17 reuses line 16's __shfl_xor_sync<unsigned int, float>
    assert [e["location"] for e in unit["errors"]] == [f"warp_reduce.cu:{n} (warp_reduce.hip:{n + 1})" for n in (11, 16, 21)]
    assert all("The mask must be a 64-bit integer" in e["message"] for e in unit["errors"])
    assert unit["command"][0] == "/usr/bin/hipcc" and "--offload-arch=gfx942" in unit["command"]


def test_include_order_clash_names_gcc_and_the_workaround(cli, rocm_toolchain, tmp_path):
    result, report = _check(cli, rocm_toolchain, tmp_path, "include_order")
    (unit,) = report["compiled"]
    assert (unit["compiler"], unit["status"]) == ("c++", "environment")
    assert unit["summary"].startswith("c++ (Debian ")  # the compiler that failed, by its --version line
    assert (
        "HIP's __noinline__ macro (hip/amd_detail/host_defines.h defines it empty for compilers other than clang) turns libstdc++'s "
        "[[__gnu__::__noinline__]] into [[__gnu__::]] (the standard header included at binding.cpp:5 (binding_hip.cpp:6) comes "
        "after <hip/hip_runtime.h>): include the C++ standard and torch headers before <hip/hip_runtime.h>" in unit["summary"]
    )
    assert "torch" not in unit["summary"].split(":")[0]
    assert result.code == 1 and not report["passed"]  # nothing compiled
    assert report["failures"] == ["the compile check compiled nothing: no file compiled, each for a reason outside your code"]


def test_cub_alias_compiles_but_cub_macros_do_not(cli, rocm_toolchain, tmp_path):
    result, report = _check(cli, rocm_toolchain, tmp_path, "cub_alias")
    (unit,) = report["compiled"]
    assert [e["location"] for e in unit["errors"]] == ["block_sum.cu:17 (block_sum.hip:18)"]  # cub::WarpReduce through the alias is fine
    assert "CUB_WARP_THREADS" in unit["errors"][0]["message"] and result.code == 1
    assert report["macros"].startswith("hipcc 6.4's and c++'s own macros (-dM -E)")
