"""doctor and run --print against real images built by the tests: their labels drive the verdicts."""

from __future__ import annotations

import json

import pytest

from testkit import hosts
from testkit.runner import run_buildkit

pytestmark = pytest.mark.engine
CUDA = "2.14.1-cuda13.0-py3.11-runtime"
ROCM = "2.14.1-rocm7.2-py3.11-runtime"


def test_cuda_image_on_the_amd_fixture_host_reports_cpu_fallback_first(pair_build, docker_env, tmp_path):
    root = hosts.mi300x(tmp_path / "host")
    image = pair_build.targets[CUDA]["tags"][0]
    result = run_buildkit("doctor", image, "--matrix", pair_build.matrix, "--host-root", root, "--json", env=docker_env)
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert "is a CUDA image and this host has only AMD GPUs" in report["findings"][0]["finding"]
    assert "run on the CPU" in report["findings"][0]["finding"]


def test_rocm_twin_on_the_amd_fixture_host_is_fine(pair_build, docker_env, tmp_path):
    root = hosts.mi300x(tmp_path / "host")
    image = pair_build.targets[ROCM]["tags"][0]
    result = run_buildkit("doctor", image, "--matrix", pair_build.matrix, "--host-root", root, env=docker_env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ok: nothing blocks GPU acceleration here" in result.stdout


def test_run_print_routes_real_images_by_their_labels(pair_build, docker_env, tmp_path):
    root = hosts.mi300x(tmp_path / "host")
    cuda, rocm = pair_build.targets[CUDA]["tags"][0], pair_build.targets[ROCM]["tags"][0]
    refused = run_buildkit("run", cuda, "--print", "--matrix", pair_build.matrix, "--host-root", root, env=docker_env)
    assert refused.returncode == 2 and f"run {rocm} instead" in refused.stderr
    printed = run_buildkit("run", rocm, "--print", "--matrix", pair_build.matrix, "--host-root", root, env=docker_env)
    assert printed.returncode == 0
    assert "--device /dev/kfd --device /dev/dri --group-add video" in printed.stdout and rocm in printed.stdout


def test_run_print_uses_cdi_names_for_a_real_image_on_a_host_with_a_cdi_spec(pair_build, docker_env, tmp_path):
    root = hosts.amd_cdi_spec(hosts.mi300x(tmp_path / "host"), [128, 129])
    rocm = pair_build.targets[ROCM]["tags"][0]
    printed = run_buildkit("run", rocm, "--print", "--matrix", pair_build.matrix, "--host-root", root, "--engine", "docker:28.2", env=docker_env)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout.split(" ", 3)[3].startswith("--device amd.com/gpu=all --group-add video --group-add ")


def test_doctor_and_detect_agree_that_a_gpu_less_host_runs_images_on_the_cpu(pair_build, docker_env, tmp_path):
    """No GPU is no failure (a CI runner): doctor exits 0 with the no-gpu note, and detect carries the same note."""
    root = hosts.no_gpu(tmp_path / "host")
    cuda = pair_build.targets[CUDA]["tags"][0]
    doctor = run_buildkit("doctor", cuda, "--json", "--matrix", pair_build.matrix, "--host-root", root, env=docker_env)
    assert doctor.returncode == 0, doctor.stderr
    (finding,) = json.loads(doctor.stdout)["findings"]
    assert finding["code"] == "no-gpu" and not finding["blocking"] and f"this host has no GPU: {cuda} runs on the CPU" in finding["finding"]
    detected = json.loads(run_buildkit("detect", "--json", "--matrix", pair_build.matrix, "--host-root", root, env=docker_env).stdout)
    assert [f["code"] for f in detected["findings"]] == ["no-gpu"] and detected["ok"] is True
