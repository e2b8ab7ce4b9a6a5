"""Smoke tests on real images: a real CUDA image, and images that must fail (CPU torch in a CUDA image,
CUDA torch in a ROCm image, a torch that cannot be imported), plus parity of twins."""

from __future__ import annotations

import json

import pytest

from testkit.builds import build, index_pip_conf, machine_pip_conf, team_matrix
from testkit.runner import run_buildkit
from testkit.wheel_index import WheelIndex
from testkit.wheels import build_wheel, companion_double, torch_double

pytestmark = pytest.mark.engine

BROKEN_INIT = 'raise ImportError("libcudart.so.13: cannot open shared object file: No such file or directory")\n'


def test_real_cuda_image_passes_auto_and_fails_require(real_cuda_build, docker_env, tmp_path):
    image = real_cuda_build.report["targets"][0]["tags"][0]
    auto = run_buildkit("test", image, "--gpu", "auto", "--json", tmp_path / "auto.json", env=docker_env)
    assert auto.returncode == 0, auto.stdout + auto.stderr
    (verdict,) = json.loads((tmp_path / "auto.json").read_text())
    assert verdict["passed"] and verdict["kernels"] == "skipped (no NVIDIA GPU on this host)"
    assert {c["name"] for c in verdict["checks"] if c["passed"]} >= {"backend", "arch list"}
    assert verdict["probe"]["torch"]["cuda"] == "13.0" and verdict["probe"]["torch"]["hip"] is None
    require = run_buildkit("test", image, "--gpu", "require", "--json", tmp_path / "require.json", env=docker_env)
    assert require.returncode == 1 and "FAIL" in require.stdout
    (verdict,) = json.loads((tmp_path / "require.json").read_text())
    assert [c["detail"] for c in verdict["checks"] if not c["passed"]] == ["--gpu require: no NVIDIA GPU on this host"]


@pytest.fixture(scope="module")
def bad_builds(tmp_path_factory, base_image, docker_env, repository, machine_index, cleanup_images):
    """Three images that build but must not pass: each is failed by the smoke test inside `buildkit build`."""
    folder = tmp_path_factory.mktemp("bad")
    wheels = folder / "wheels"
    index = WheelIndex({
        # ROCm 7.2 index that hands out the CUDA build (a mislabelled mirror)
        "rocm7.2": [torch_double(wheels / "cu", "2.14.1", "cu130", "13.0", None, ["sm_90"]),
                    companion_double(wheels / "cu", "torchvision", "0.29.1", "cu130", "2.14.1")],
        # a CUDA torch that cannot be imported
        "cu130": [build_wheel(wheels / "broken", "torch", "2.14.1+cu130", {"torch/__init__.py": BROKEN_INIT}),
                  companion_double(wheels / "broken", "torchvision", "0.29.1", "cu130", "2.14.1")],
        "simple": [],
    }).start()
    matrix = team_matrix(folder, index.url, repository, '[{ torch = "2.14.1", python = "3.11", flavor = "runtime" }]',
                         '[[torch]]\nversion = "2.14.1"\ncuda = ["13.0"]\nrocm = ["7.2"]\n')
    doubles = build(matrix, index_pip_conf(folder, index.url), folder / "out", docker_env, "-j", "2")
    # the CPU wheel that lies on this machine, installed into a CUDA-labelled image
    cpu_folder = tmp_path_factory.mktemp("cpu")
    cpu_matrix = team_matrix(cpu_folder, machine_index.url, repository, '[{ id = "2.13.0-cuda13.0-py3.11-runtime" }]',
                             '[[torch]]\nversion = "2.13.0"\ncompanions = []\n')
    cpu = build(cpu_matrix, machine_pip_conf(cpu_folder, machine_index), cpu_folder / "out", docker_env)
    index.stop()
    return {**doubles.targets, **cpu.targets}, doubles, cpu


def test_cpu_torch_in_a_cuda_image_fails(bad_builds, client):
    targets, _, cpu = bad_builds
    target = targets["2.13.0-cuda13.0-py3.11-runtime"]
    assert cpu.result.returncode == 1
    assert target["status"] == "failed" and target["tags"] == []
    assert "torch is a CPU build: this image would run on the CPU" in target["error"]
    assert target["smoke"]["probe"]["torch"]["version"] == "2.13.0+cpu"
    assert not client.images.get(target["image_id"]).tags  # never tagged, so never publishable


def test_cuda_torch_in_a_rocm_image_fails(bad_builds):
    targets, doubles, _ = bad_builds
    target = targets["2.14.1-rocm7.2-py3.11-runtime"]
    assert target["status"] == "failed" and target["tags"] == []
    assert "torch is a CUDA build (13.0) in a ROCm image" in target["error"]


def test_broken_torch_import_fails_with_its_error(bad_builds, docker_env, tmp_path):
    targets, _, _ = bad_builds
    target = targets["2.14.1-cuda13.0-py3.11-runtime"]
    assert target["status"] == "failed"
    assert "import torch: ImportError: libcudart.so.13: cannot open shared object file" in target["error"]
    again = run_buildkit("test", target["image_id"], "--json", tmp_path / "again.json", env=docker_env)
    assert again.returncode == 1
    assert "libcudart.so.13" in json.loads((tmp_path / "again.json").read_text())[0]["checks"][0]["detail"]


def test_test_pair_passes_parity(pair_build, docker_env):
    (pair,) = [p for p in pair_build.report["pairs"] if p["pair"] == "2.14.1-py3.11-runtime"]
    assert pair["parity"] == {"passed": True, "differences": []}
    result = run_buildkit("parity", "2.14.1-py3.11-runtime", "--matrix", pair_build.matrix, env=docker_env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "hold the same OS, Python and packages" in result.stdout


def test_twin_with_an_extra_package_fails_parity(tmp_path, base_image, docker_env, repository, cleanup_images):
    wheels = tmp_path / "wheels"
    extra = build_wheel(wheels / "extra", "rocm-only-helper", "1.0", {"rocm_only_helper/__init__.py": ""})
    rocm_torch = build_wheel(wheels / "ro", "torch", "2.12.0+rocm7.2", {
        "torch/__init__.py": 'from . import version, cuda\n__version__ = "2.12.0+rocm7.2"\n',
        "torch/version.py": 'cuda = None\nhip = "7.2.0"\n',
        "torch/cuda/__init__.py": "def is_available():\n    return False\ndef get_arch_list():\n    return []\n",
    }, requires=["rocm-only-helper"])
    index = WheelIndex({
        "cu130": [torch_double(wheels / "cu", "2.12.0", "cu130", "13.0", None, [])],
        "rocm7.2": [rocm_torch, extra],
        "simple": [],
    }).start()
    matrix = team_matrix(tmp_path, index.url, repository, '[{ torch = "2.12.0", python = "3.11", flavor = "runtime" }]',
                         '[[torch]]\nversion = "2.12.0"\ncuda = ["13.0"]\nrocm = ["7.2"]\ncompanions = []\n')
    run = build(matrix, index_pip_conf(tmp_path, index.url), tmp_path / "out", docker_env, "-j", "2")
    index.stop()
    assert {t["status"] for t in run.report["targets"]} == {"built"}
    (pair,) = run.report["pairs"]
    assert pair["parity"]["passed"] is False
    assert pair["parity"]["differences"] == ["rocm-only-helper 1.0 only in 2.12.0-rocm7.2-py3.11-runtime"]
    assert run.result.returncode == 1
    result = run_buildkit("parity", "2.12.0-py3.11-runtime", "--matrix", matrix, env=docker_env)
    assert result.returncode == 1 and "rocm-only-helper 1.0 only in" in result.stdout
