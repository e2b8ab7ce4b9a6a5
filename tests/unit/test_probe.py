"""The probe's arithmetic, run here on the CPU with real torch: the same functions the image runs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import torch  # the test extra installs it: the probe needs a real torch

from buildkit.image import probe  # noqa: E402


def test_kernels_pass_on_the_cpu_against_float64():
    results = probe.kernel_checks(torch, "cpu", seed=1234)
    assert [r["name"] for r in results] == ["matmul_fp32", "matmul_bf16", "elementwise_fp32", "conv2d_fp32"]
    for result in results:
        assert result["passed"], result
        assert 0 < result["error"] <= result["threshold"]  # never exactly 0: the inputs are fresh and non-zero
        assert result["seconds"] >= 0


def test_bf16_error_is_larger_than_fp32_error():
    by_name = {r["name"]: r["error"] for r in probe.kernel_checks(torch, "cpu", seed=7)}
    assert by_name["matmul_bf16"] > 100 * by_name["matmul_fp32"]


def test_relative_error_detects_a_wrong_result():
    reference = torch.randn(64, 64, dtype=torch.float64)
    wrong = reference.float() * 1.01
    assert probe.relative_error(torch, wrong, reference) == pytest.approx(0.01, rel=1e-3)
    assert probe.relative_error(torch, reference.float(), reference) < 1e-6


def test_inputs_are_fresh_per_seed():
    first = probe.kernel_checks(torch, "cpu", seed=1)[0]["error"]
    second = probe.kernel_checks(torch, "cpu", seed=2)[0]["error"]
    assert first != second


def test_probe_prints_one_json_report_with_the_build_facts():
    result = subprocess.run([sys.executable, probe.__file__], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["torch"]["version"] == torch.__version__
    assert report["torch"]["cuda"] == torch.version.cuda and report["torch"]["hip"] == torch.version.hip
    assert report["devices"] == [] and report["available"] is False  # no GPU on this machine
    assert report["distributions"]["torch"] == torch.__version__
    assert report["os"]["id"]


def test_arch_in_build_understands_ptx():
    assert probe._arch_in_build("sm_90", ["sm_80", "sm_90"])
    assert probe._arch_in_build("sm_121", ["sm_120", "compute_120"])  # PTX JIT-compiles forward
    assert not probe._arch_in_build("sm_70", ["sm_75", "compute_120"])
    assert not probe._arch_in_build("gfx1100", ["gfx90a", "gfx942"])
