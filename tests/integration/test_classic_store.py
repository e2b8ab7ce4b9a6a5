"""The classic image store: an engine before Docker 29 that never turned on the containerd image store (most
engines in the field). The test pair builds there with buildkit's defaults (uv, zstd), passes its smoke tests
and is tagged; the report says how its layers will travel (the classic store keeps them unpacked, and its
`docker push` compresses with gzip)."""

from __future__ import annotations

import json
import subprocess

import pytest

from testkit.builds import team_matrix
from testkit.daemon import SpareEngine
from testkit.runner import run_buildkit

pytestmark = pytest.mark.engine
PAIR = ("2.14.1-cuda13.0-py3.11-runtime", "2.14.1-rocm7.2-py3.11-runtime")
STACK = '[[torch]]\nversion = "2.14.1"\ncuda = ["13.0"]\nrocm = ["7.2"]\n'


def test_the_pair_builds_and_is_proven_on_the_classic_image_store(tmp_path, double_index, pair_setup, base_image, buildkit_cli, docker_env, repository):
    _, pip_conf = pair_setup
    spare = SpareEngine(buildkit_cli.docker, tmp_path / "spare.log", classic=True)
    try:
        spare.start(base_image)
        status = subprocess.run(
            [buildkit_cli.docker, "info", "--format", "{{json .DriverStatus}}"], env=spare.env, capture_output=True, text=True, check=True
        ).stdout
        assert "io.containerd.snapshotter" not in status, f"the spare engine runs the containerd store: {status}"
        include = '[{ torch = "2.14.1", python = "3.11", flavor = "runtime" }]'
        matrix = team_matrix(tmp_path, double_index.url, repository, include, STACK, installer="uv")
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
            env={**docker_env, "DOCKER_HOST": spare.env["DOCKER_HOST"]},
        )
        assert result.returncode == 0, result.stderr[-3000:]
        targets = {t["id"]: t for t in json.loads((tmp_path / "out" / "report.json").read_text())["targets"]}
        assert sorted(targets) == sorted(PAIR)
        images = subprocess.run(
            [buildkit_cli.docker, "images", "--format", "{{.Repository}}:{{.Tag}}"], env=spare.env, capture_output=True, text=True, check=True
        ).stdout.split()
        for target_id in PAIR:
            target = targets[target_id]
            assert target["status"] == "built" and target["smoke"]["passed"], (target["error"], target["log_tail"])
            assert target["compression"] == "gzip (the classic image store's push)" and target["largest_layers"], target
            assert any(image.endswith(f"/{repository}:{target_id}") for image in images), images
    finally:
        spare.stop()
