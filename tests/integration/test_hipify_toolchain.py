"""hipify's compile check in a ROCm toolchain image, on an extension in the shape of PyTorch's own example
(tests/fixtures/cuda_ext_torch: a .cu with ATen, torch/library.h and ATen/cuda/CUDAContext.h, a host .cpp
with torch/extension.h), for gfx942, which this machine's Debian 12 hipcc cannot target. The image is the
local one from Debian's packages (.ci/rocm-toolchain-image.sh); torch is the test venv's CPU build, so its
ROCm headers are hipified from its CUDA headers. Both files must compile, and a defect planted in the .cu
must be reported at its line of the .cu."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "cuda_ext_torch"
KERNEL = "extension_cpp/csrc/cuda/muladd.cu"


def test_extension_compiles_for_gfx942_in_the_toolchain_image(cli, client, rocm_toolchain, tmp_path):
    result = cli("hipify", FIXTURE, "--out", tmp_path / "out", "--compile-check", "--offload-arch", "gfx942",
                 "--toolchain-image", rocm_toolchain, "--json", tmp_path / "report.json")
    assert result.code == 0, result.out + result.err
    hip = client.images.get(rocm_toolchain).labels["dev.buildkit.hip-version"]
    assert f"compile check for gfx942 with hipcc {hip} (/usr/bin/hipcc in image {rocm_toolchain})" in result.out
    assert f"extension_cpp/csrc/hip/muladd.hip (from {KERNEL}), hipcc: compiles" in result.out
    assert "extension_cpp/csrc/muladd.cpp, c++: compiles" in result.out
    report = json.loads((tmp_path / "report.json").read_text())
    assert [(unit["file"], unit["status"]) for unit in report["compiled"]] == [
        ("extension_cpp/csrc/hip/muladd.hip", "ok"), ("extension_cpp/csrc/muladd.cpp", "ok")]
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

    result = cli("hipify", tree, "--out", tmp_path / "out", "--compile-check", "--offload-arch", "gfx942",
                 "--toolchain-image", rocm_toolchain, "--json", tmp_path / "report.json")

    assert result.code == 1, result.out + result.err
    hipified_line = planted + 1  # hipify's breadcrumb comment is the .hip's first line
    assert (f"DOES NOT COMPILE: {KERNEL}:{planted} (extension_cpp/csrc/hip/muladd.hip:{hipified_line}): "
            "error: use of undeclared identifier 'planted_undeclared_name'") in result.out
    (unit,) = json.loads((tmp_path / "report.json").read_text())["compiled"]
    assert unit["status"] == "error" and unit["location"].startswith(f"{KERNEL}:{planted} ")


def test_image_without_hipcc_or_absent_is_one_clear_message(cli, base_image, tmp_path):
    no_hipcc = cli("hipify", FIXTURE, "--out", tmp_path / "out", "--compile-check", "--toolchain-image", base_image)
    assert no_hipcc.code == 2 and f"--toolchain-image: {base_image} has no hipcc" in no_hipcc.err
    assert "Traceback" not in no_hipcc.err and not (tmp_path / "out").exists()
    absent = cli("hipify", FIXTURE, "--out", tmp_path / "out", "--compile-check", "--toolchain-image", "buildkit-test/no-such-image:1")
    assert absent.code == 2 and "--toolchain-image: buildkit-test/no-such-image:1 is not in the engine: pull it first" in absent.err
