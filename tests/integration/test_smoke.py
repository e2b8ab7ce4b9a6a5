"""Smoke tests on real images: a real CUDA image, and images that must fail (CPU torch in a CUDA image,
CUDA torch in a ROCm image, a torch that cannot be imported), plus parity of twins."""

from __future__ import annotations

import json
import subprocess

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
    """Wrong torch builds that must never become images: each fails in the install step itself, in seconds."""
    folder = tmp_path_factory.mktemp("bad")
    wheels = folder / "wheels"
    index = WheelIndex(
        {
            # a mislabelled mirror: ROCm 7.2's index hands out a wheel named +rocm7.2 that is a CUDA build (TEST DOUBLE)
            "rocm7.2": [
                torch_double(wheels / "ro", "2.14.1", "rocm7.2", "13.0", None, ["sm_90"]),
                companion_double(wheels / "ro", "torchvision", "0.29.1", "rocm7.2", "2.14.1"),
            ],
            # a CUDA torch that cannot be imported
            "cu130": [
                build_wheel(wheels / "broken", "torch", "2.14.1+cu130", {"torch/__init__.py": BROKEN_INIT}),
                companion_double(wheels / "broken", "torchvision", "0.29.1", "cu130", "2.14.1"),
            ],
            "simple": [],
        }
    ).start()
    matrix = team_matrix(
        folder,
        index.url,
        repository,
        '[{ torch = "2.14.1", python = "3.11", flavor = "runtime" }]',
        '[[torch]]\nversion = "2.14.1"\ncuda = ["13.0"]\nrocm = ["7.2"]\n',
    )
    doubles = build(matrix, index_pip_conf(folder, index.url), folder / "out", docker_env, "-j", "2")
    # the CPU wheel that lies on this machine, offered where the CUDA 13.0 build is asked for
    cpu_folder = tmp_path_factory.mktemp("cpu")
    cpu_matrix = team_matrix(
        cpu_folder, machine_index.url, repository, '[{ id = "2.13.0-cuda13.0-py3.11-runtime" }]', '[[torch]]\nversion = "2.13.0"\ncompanions = []\n'
    )
    cpu = build(cpu_matrix, machine_pip_conf(cpu_folder, machine_index), cpu_folder / "out", docker_env)
    index.stop()
    return {**doubles.targets, **cpu.targets}, doubles, cpu


def _failed_in_install(target: dict) -> str:
    assert target["status"] == "failed" and target["tags"] == [] and target["image_id"] is None, target
    assert target["smoke"] is None  # it never got as far as an image to test
    return "\n".join(target["log_tail"])


def test_cpu_torch_never_reaches_a_cuda_image(bad_builds):
    targets, _, cpu = bad_builds
    assert cpu.result.returncode == 1
    tail = _failed_in_install(targets["2.13.0-cuda13.0-py3.11-runtime"])
    assert "No matching distribution found for torch==2.13.0+cu130" in tail  # not PyPI's or the CPU build instead


def test_mislabelled_wheel_fails_in_the_install_step(bad_builds):
    targets, _, _ = bad_builds
    tail = _failed_in_install(targets["2.14.1-rocm7.2-py3.11-runtime"])
    assert "torch 2.14.1+rocm7.2 is not a ROCm 7.2 build (torch.version.cuda=13.0, hip=None)" in tail


def test_broken_torch_import_fails_in_the_install_step(bad_builds):
    targets, _, _ = bad_builds
    assert "ImportError: libcudart.so.13: cannot open shared object file" in _failed_in_install(targets["2.14.1-cuda13.0-py3.11-runtime"])


def test_smoke_test_of_an_image_built_elsewhere_catches_a_cpu_torch(base_image, machine_index, docker_env, tmp_path, client):
    """`buildkit test` judges any image by its labels: one built by hand with a CPU torch under CUDA labels fails.
    Built for speed, as nothing of it is under test: no bytecode (byte-compiling torch's 15,000 files is most of
    pip's time, 16 s against 5 s) and its 800 MB layer exported as zstd level 1 (the engine's default gzip took
    20 s of the build, zstd 4 s)."""
    (tmp_path / "Dockerfile").write_text(
        f"FROM {base_image}\nRUN python3 -m venv /opt/venv && /opt/venv/bin/pip install --no-compile --no-index "
        f"--find-links {machine_index.url}/all/ torch==2.13.0\nENV PATH=/opt/venv/bin:$PATH\n"
    )
    tag = f"buildkit-test-cpu-{tmp_path.name.lower()}:1"
    labels = ["--label", "dev.buildkit.backend=cuda", "--label", "dev.buildkit.backend-version=13.0"]
    output = f"type=docker,name={tag},compression=zstd,compression-level=1,force-compression=true"
    built = subprocess.run(
        [*docker_env.get("BUILDKIT_DOCKER", "docker").split(), "buildx", "build", "--output", output, "--network", "host", *labels, str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    try:
        result = run_buildkit("test", tag, "--json", tmp_path / "verdict.json", env=docker_env)
        assert result.returncode == 1
        (verdict,) = json.loads((tmp_path / "verdict.json").read_text())
        assert any("torch is a CPU build: this image would run on the CPU" in c["detail"] for c in verdict["checks"])
        assert verdict["probe"]["torch"]["version"] == "2.13.0+cpu"
    finally:
        client.images.remove(tag, force=True)


def test_test_pair_passes_parity(pair_build, docker_env):
    (pair,) = [p for p in pair_build.report["pairs"] if p["pair"] == "2.14.1-py3.11-runtime"]
    assert pair["parity"] == {"passed": True, "differences": []}
    result = run_buildkit("parity", "2.14.1-py3.11-runtime", "--matrix", pair_build.matrix, env=docker_env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "hold the same OS, Python and packages" in result.stdout


def test_twin_with_an_extra_package_fails_parity(tmp_path, base_image, docker_env, repository, cleanup_images):
    wheels = tmp_path / "wheels"
    extra = build_wheel(wheels / "extra", "rocm-only-helper", "1.0", {"rocm_only_helper/__init__.py": ""})
    rocm_torch = torch_double(wheels / "ro", "2.12.0", "rocm7.2", None, "7.2.0", [], requires=["rocm-only-helper"])
    index = WheelIndex(
        {
            "cu130": [torch_double(wheels / "cu", "2.12.0", "cu130", "13.0", None, [])],
            "rocm7.2": [rocm_torch, extra],
            "simple": [],
        }
    ).start()
    matrix = team_matrix(
        tmp_path,
        index.url,
        repository,
        '[{ torch = "2.12.0", python = "3.11", flavor = "runtime" }]',
        '[[torch]]\nversion = "2.12.0"\ncuda = ["13.0"]\nrocm = ["7.2"]\ncompanions = []\n',
    )
    run = build(matrix, index_pip_conf(tmp_path, index.url), tmp_path / "out", docker_env, "-j", "2")
    index.stop()
    assert {t["status"] for t in run.report["targets"]} == {"built"}
    (pair,) = run.report["pairs"]
    assert pair["parity"]["passed"] is False
    assert pair["parity"]["differences"] == ["rocm-only-helper 1.0 only in 2.12.0-rocm7.2-py3.11-runtime"]
    assert run.result.returncode == 1
    result = run_buildkit("parity", "2.12.0-py3.11-runtime", "--matrix", matrix, env=docker_env)
    assert result.returncode == 1 and "rocm-only-helper 1.0 only in" in result.stdout
