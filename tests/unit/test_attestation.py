"""The GPU test predicate (built from real verdicts of the real judge) and its judge, passing_gpu_test.

GPU runs come from TEST DOUBLE reports (testkit.gpu_reports: an MI300X, an H100); the CPU-only run is the
real probe's report on this machine's torch.
"""

from __future__ import annotations

import copy
import json

import pytest

from buildkit.core.host.facts import Gpu, HostFacts
from buildkit.core.labels import ImageIdentity
from buildkit.core.release.judge import judge
from buildkit.core.supply_chain.attestation import (
    PREDICATE_VERSION,
    SmokeRun,
    gpu_predicate,
    gpu_test_summary,
    host_driver,
    passing_gpu_test,
)
from testkit.gpu_reports import gpu_report_double
from testkit.probe_process import run_probe

LABELS = {
    "amd": {
        "dev.buildkit.backend": "rocm",
        "dev.buildkit.backend-version": "7.2",
        "dev.buildkit.gpu-archs": "gfx90a;gfx942",
        "dev.buildkit.target": "2.14.1-rocm7.2-py3.11-runtime",
        "dev.buildkit.fingerprint": "f" * 64,
    },
    "nvidia": {
        "dev.buildkit.backend": "cuda",
        "dev.buildkit.backend-version": "13.0",
        "dev.buildkit.gpu-archs": "8.0;9.0;12.0+PTX",
        "dev.buildkit.target": "2.14.1-cuda13.0-py3.11-runtime",
        "dev.buildkit.fingerprint": "e" * 64,
    },
}
RUN = SmokeRun("2026-11-30T02:00:00Z", "gpu-runner-7", "require", "amdgpu 6.12.12", ("AMD Instinct MI300X",))


def predicate_of(vendor: str, report: dict, host_has_gpu: bool = True, mode: str = "require") -> dict:
    identity = ImageIdentity.read(LABELS[vendor])
    verdict = judge(f"registry.test/pytorch:{identity.target}", identity, report, mode, host_has_gpu)
    # what cosign attaches is JSON: judge the predicate as a verifier reads it back
    return json.loads(json.dumps(gpu_predicate(verdict, identity, RUN)))


@pytest.fixture(scope="module")
def cpu_report():
    """The real probe on this machine's CPU-only torch, with kernels requested: no device runs any."""
    return run_probe(None, "--kernels")


@pytest.mark.parametrize("vendor,arch", [("amd", "gfx942"), ("nvidia", "sm_90")])
def test_a_passing_gpu_run_of_the_image_vendor_passes(vendor, arch):
    predicate = predicate_of(vendor, gpu_report_double(vendor, devices=2))
    ok, why = passing_gpu_test(predicate, vendor)
    assert ok, why
    assert passing_gpu_test(predicate, vendor, arch) == (True, why)
    assert arch in why and "2 x" in why


def test_the_predicate_records_what_was_gpu_test_summary():
    predicate = predicate_of("amd", gpu_report_double("amd"))
    assert predicate["predicate_version"] == PREDICATE_VERSION
    assert predicate["verdict"] == {"passed": True, "kernels": "ran on 1 device(s)", "failures": []}
    assert predicate["image"]["vendor"] == "amd" and predicate["image"]["backend_version"] == "7.2"
    assert predicate["image"]["target"] == "2.14.1-rocm7.2-py3.11-runtime" and predicate["image"]["fingerprint"] == "f" * 64
    assert predicate["torch"]["hip"] == "7.2.26015"
    device = predicate["devices"][0]
    assert (device["name"], device["arch"]) == ("AMD Instinct MI300X", "gfx942")
    assert [k["name"] for k in device["kernels"]] == ["matmul_fp32", "matmul_bf16", "elementwise_fp32", "conv2d_fp32"]
    assert all({"error", "threshold", "seconds", "passed"} <= set(k) for k in device["kernels"])
    assert predicate["host"] == {"runner": "gpu-runner-7", "driver": "amdgpu 6.12.12", "gpus": ["AMD Instinct MI300X"]}
    assert predicate["tested_at"] == "2026-11-30T02:00:00Z"
    assert all(check["passed"] for check in predicate["checks"]) and predicate["checks"]
    assert gpu_test_summary(predicate) == (
        "AMD Instinct MI300X (gfx942); amdgpu 6.12.12; torch 2.14.1+rocm7.2 (HIP 7.2.26015); 2026-11-30T02:00:00Z on gpu-runner-7"
    )


@pytest.mark.slow
def test_the_real_cpu_only_smoke_report_is_not_a_gpu_test(cpu_report):
    assert cpu_report["devices"] == [] and cpu_report["kernels_requested"]
    for vendor in ("amd", "nvidia"):
        ok, why = passing_gpu_test(predicate_of(vendor, cpu_report, host_has_gpu=False, mode="auto"), vendor)
        assert not ok
        assert "smoke test failed" in why and "CPU build" in why


def test_a_passing_smoke_test_that_ran_no_kernels_is_not_a_gpu_test():
    report = gpu_report_double("amd")
    report["devices"] = []  # the same image on a host without its GPU: the verdict passes, kernels skipped
    predicate = predicate_of("amd", report, host_has_gpu=False, mode="auto")
    assert predicate["verdict"]["passed"] is True
    ok, why = passing_gpu_test(predicate, "amd")
    assert not ok
    assert why == "kernels did not run on any AMD GPU (kernels: skipped (no AMD GPU on this host))"


def test_a_gpu_test_of_the_other_vendor_does_not_count():
    ok, why = passing_gpu_test(predicate_of("nvidia", gpu_report_double("nvidia")), "amd")
    assert not ok and why == "the GPU test is for a nvidia image, this image is AMD's"


def test_kernels_on_the_other_vendors_gpu_do_not_count():
    # a predicate claiming an AMD image whose kernels ran on an sm_90 device: inconsistent, not a pass
    predicate = predicate_of("amd", gpu_report_double("amd"))
    predicate["devices"][0]["arch"] = "sm_90"
    ok, why = passing_gpu_test(predicate, "amd")
    assert not ok and why.startswith("kernels did not run on any AMD GPU")


@pytest.mark.parametrize("vendor,arch,wanted", [("amd", "gfx90a", "gfx90a"), ("nvidia", "8.0", "sm_80"), ("nvidia", "sm_100", "sm_100")])
def test_an_arch_the_test_did_not_cover_fails(vendor, arch, wanted):
    ok, why = passing_gpu_test(predicate_of(vendor, gpu_report_double(vendor)), vendor, arch)
    assert not ok and why.endswith(f"not on {wanted}")


def test_nvidia_arch_may_be_given_as_compute_capability():
    assert passing_gpu_test(predicate_of("nvidia", gpu_report_double("nvidia")), "nvidia", "9.0")[0]


def test_a_failing_kernel_fails_the_gpu_test():
    predicate = predicate_of("amd", gpu_report_double("amd", failing_kernel="matmul_bf16"))
    ok, why = passing_gpu_test(predicate, "amd")
    assert not ok and why.startswith("the smoke test failed (device 0 (AMD Instinct MI300X, gfx942) matmul_bf16")


def test_a_tampered_verdict_is_judged_by_its_checks():
    predicate = predicate_of("amd", gpu_report_double("amd", failing_kernel="conv2d_fp32"))
    predicate["verdict"]["passed"] = True  # the checks and kernels still say otherwise
    assert not passing_gpu_test(predicate, "amd")[0]
    predicate["checks"] = [c | {"passed": True} for c in predicate["checks"]]
    ok, why = passing_gpu_test(predicate, "amd")
    assert not ok and why.startswith("kernels did not run on any AMD GPU")  # the failing kernel is still recorded


@pytest.mark.parametrize(
    "predicate,expected",
    [
        (None, "not a buildkit GPU test predicate"),
        ("text", "not a buildkit GPU test predicate"),
        ({"verdict": {"passed": True}}, "GPU test predicate version None is not one this buildkit reads (1); upgrade buildkit"),
        ({"predicate_version": 2, "verdict": {}}, "GPU test predicate version 2 is not one this buildkit reads (1); upgrade buildkit"),
    ],
)
def test_malformed_predicates_fail_with_a_reason(predicate, expected):
    assert passing_gpu_test(predicate, "amd") == (False, expected)


def test_no_checks_is_not_a_pass():
    predicate = predicate_of("amd", gpu_report_double("amd"))
    predicate["checks"] = []
    assert passing_gpu_test(predicate, "amd") == (False, "the smoke test failed (no passing checks recorded)")


def test_host_driver_names_the_vendors_driver():
    host = HostFacts(
        gpus=(Gpu("amd", "0000:03:00.0", "0x74a1", "AMD Instinct MI300X", "gfx942"),), nvidia_driver="580.65.06", amdgpu_driver="6.12.12", amdgpu_loaded=True
    )
    assert host_driver(host, "amd") == "amdgpu 6.12.12"
    assert host_driver(host, "nvidia") == "nvidia 580.65.06"
    assert host_driver(HostFacts(amdgpu_loaded=True), "amd") == "amdgpu (built into the kernel)"
    assert host_driver(HostFacts(), "nvidia") == ""


def test_the_predicate_does_not_share_state_with_the_report():
    report = gpu_report_double("amd")
    before = copy.deepcopy(report)
    predicate_of("amd", report)
    assert report == before
