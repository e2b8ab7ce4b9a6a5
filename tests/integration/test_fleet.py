"""Fleet builds on the real engine: a builder elsewhere (a throwaway dockerd reached through a docker context,
as a remote or Kubernetes builder would be) that starts with an empty BuildKit cache and reuses the registry
cache the first build wrote; and image indexes for linux/amd64 and linux/arm64, the arm64 image smoke-tested
under qemu emulation (probe only, no kernels)."""

from __future__ import annotations

import json
import subprocess

import pytest

from testkit.builds import team_matrix
from testkit.daemon import SpareEngine
from testkit.registry import RegistryProcess, layer_media_types
from testkit.runner import run_buildkit

pytestmark = pytest.mark.engine
CUDA, ROCM = "2.14.1-cuda13.0-py3.11-runtime", "2.14.1-rocm7.2-py3.11-runtime"
PAIR_ONLY = '[{ torch = "2.14.1", python = "3.11", flavor = "runtime" }]'
ZSTD_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"
STACK = '[[torch]]\nversion = "2.14.1"\ncuda = ["13.0"]\nrocm = ["7.2"]\n'


def report(out) -> dict[str, dict]:
    return {t["id"]: t for t in json.loads((out / "report.json").read_text())["targets"]}


def test_a_context_builder_with_an_empty_cache_reuses_the_registry_cache(
    tmp_path, double_index, pair_setup, base_image, buildkit_cli, docker_env, repository, cleanup_images
):
    _, pip_conf = pair_setup
    registry = RegistryProcess(tmp_path / "registry").start()
    spare = SpareEngine(buildkit_cli.docker, tmp_path / "spare.log")
    try:
        matrix = team_matrix(tmp_path, double_index.url, repository, PAIR_ONLY, STACK, registry=registry.address)
        common = ["build", "--matrix", matrix, "--network", "host", "--pip-conf", pip_conf, "--registry-cache"]
        first = run_buildkit(*common, "--out", tmp_path / "first", env=docker_env)
        assert first.returncode == 0, first.stderr[-3000:]
        # the cache's layers compressed as the images' are (zstd): the blobs BuildKit made for the images
        for tag in (CUDA, ROCM, "2.14.1-py3.11-runtime-shared"):
            assert layer_media_types(registry.address, f"{repository}/buildcache", tag) == {ZSTD_LAYER}
        spare.start(base_image, context=True)
        second = run_buildkit(*common, "--builder", spare.context, "--out", tmp_path / "second", env=docker_env)
        assert second.returncode == 0, second.stderr[-3000:]
        built = report(tmp_path / "second")
        for target_id in (CUDA, ROCM):
            log = (tmp_path / "second" / "logs" / f"{target_id}.log").read_text()
            assert "importing cache manifest from" in log and f"{registry.address}/{repository}/buildcache" in log
            # the resolve step and every layer that installs its share of it (torch's among them)
            installs = {
                line.split()[0]
                for line in log.splitlines()
                if line.startswith("#") and ("/buildkit/install.py resolve" in line or "/buildkit/install.py layer" in line)
            }
            assert any("install.py layer /plan/torch.json" in line for line in log.splitlines()), log[-3000:]
            for step in installs:
                assert f"{step} CACHED" in log, f"{target_id}: install step {step} was not taken from the registry cache"
            assert built[target_id]["status"] == "built"
        # the images live in the engine that built them, not in the default one
        images = subprocess.run([buildkit_cli.docker, "images", "--format", "{{.Repository}}:{{.Tag}}"], env=spare.env, capture_output=True, text=True).stdout
        assert f"{registry.address}/{repository}:{CUDA}" in images
    finally:
        spare.stop()
        registry.stop()


def test_image_indexes_for_amd64_and_arm64_with_the_arm64_image_tested_under_emulation(
    tmp_path, pair_setup, double_index, base_image, docker_env, repository, cleanup_images
):
    _, pip_conf = pair_setup
    matrix = team_matrix(tmp_path, double_index.url, f"{repository}-multi", PAIR_ONLY, STACK)
    result = run_buildkit(
        "build",
        "--matrix",
        matrix,
        "--network",
        "host",
        "--pip-conf",
        pip_conf,
        "--out",
        tmp_path / "out",
        "--platform",
        "linux/amd64",
        "--platform",
        "linux/arm64",
        env=docker_env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    built = report(tmp_path / "out")
    # CUDA wheels exist for arm64 (PyTorch's aarch64 builds); ROCm's are amd64 only
    assert set(built[CUDA]["platforms"]) == {"linux/amd64", "linux/arm64"}
    assert set(built[ROCM]["platforms"]) == {"linux/amd64"}
    arm = built[CUDA]["platforms"]["linux/arm64"]
    assert arm["passed"] and arm["probe"]["machine"] == "aarch64" and arm["kernels"].startswith("skipped")
    assert built[CUDA]["platforms"]["linux/amd64"]["probe"]["machine"] == "x86_64"
