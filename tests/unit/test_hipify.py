"""The hipify preflight on a CUDA extension the project owns (tests/fixtures/cuda_ext), with torch's real
hipify and, where hipcc is installed (CI installs Debian's), a compile check for one AMD arch."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from buildkit.adapters.bundled import compat_data

FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "cuda_ext"
KNOWN = compat_data()["archs"]["rocm"]


@pytest.fixture(scope="module")
def hipified(tmp_path_factory):
    out = tmp_path_factory.mktemp("hip") / "out"
    from buildkit.adapters.hipify import run_hipify

    return run_hipify(FIXTURE, out), out


def test_kernels_launches_streams_and_headers_become_hip(hipified):
    report, out = hipified
    assert sorted(report.converted) == ["gemm.hip", "include/scale_hip.cuh", "scale_kernel.hip"]
    assert report.unchanged == ["util.cpp"]
    kernel = (out / "scale_kernel.hip").read_text()
    for hip in ("#include <hip/hip_runtime.h>", "hipStream_t", "hipMalloc(", "hipMemcpyAsync(", "hipMemcpyHostToDevice",
                "hipStreamSynchronize(", "hipSuccess", '#include "include/scale_hip.cuh"'):
        assert hip in kernel, hip
    assert "cudaMalloc" not in kernel
    assert "hipblasSgemm(" in (out / "gemm.hip").read_text()
    assert "#include <hip/hip_runtime.h>" in (out / "include/scale_hip.cuh").read_text()
    assert (FIXTURE / "scale_kernel.cu").read_text().count("cudaMalloc") == 2  # out of place: the source is untouched


def test_identifier_without_mapping_is_reported_with_file_and_line(hipified):
    report, _ = hipified
    assert [(u.file, u.line, u.identifier) for u in report.unmapped] == [("gemm.hip", 12, "cudaMemcpyBatchAsync")]
    assert not report.passed


def test_compile_check_with_hipcc(hipified):
    from buildkit.adapters.hipify import compile_check

    hipcc = shutil.which("hipcc")
    if hipcc is None:
        if os.environ.get("BUILDKIT_REQUIRE_HIPCC") == "1":
            pytest.fail("hipcc is missing (apt-get install hipcc libamdhip64-dev; .ci/run installs it)")
        pytest.skip("hipcc is not installed")
    report, _ = hipified
    result = {c.file: c for c in compile_check(report, "gfx90a", KNOWN).compiled}
    assert result["scale_kernel.hip"].status == "ok", result["scale_kernel.hip"].output
    assert result["util.cpp"].status == "ok"
    # Debian ships no hipBLAS headers: that is this machine's gap, not a hipify error
    assert result["gemm.hip"].status == "environment"
    assert "hipblas/hipblas.h is not installed here" in result["gemm.hip"].summary


def test_cli_reports_and_fails_on_unmapped_identifiers(cli, tmp_path):
    result = cli("hipify", FIXTURE, "--out", tmp_path / "out", "--json", tmp_path / "report.json")
    assert result.code == 1
    assert "no HIP mapping: gemm.hip:12: cudaMemcpyBatchAsync" in result.out
    assert json.loads((tmp_path / "report.json").read_text())["unmapped"][0]["identifier"] == "cudaMemcpyBatchAsync"


def test_cli_rejects_unknown_arch_and_unsafe_output(cli, tmp_path):
    unknown = cli("hipify", FIXTURE, "--compile-check", "--offload-arch", "gfx9999")
    assert unknown.code == 2 and "unknown gfx target 'gfx9999'; known: gfx900" in unknown.err
    inside = cli("hipify", FIXTURE, "--out", FIXTURE / "out")
    assert inside.code == 2 and "inside the source tree" in inside.err
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "keep.txt").write_text("mine")
    refused = cli("hipify", FIXTURE, "--out", busy)
    assert refused.code == 2 and "not empty" in refused.err and (busy / "keep.txt").exists()
