"""`buildkit build` without BuildKit or without an engine: one clear message, exit 2, nothing built."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from testkit.runner import run_buildkit

# A STAND-IN for a docker CLI, for the cases the real one cannot show on demand: a client without the
# buildx plugin, or one whose buildx answers but whose engine cannot be reached.
STAND_IN = """#!/bin/sh
case "$1" in
  version) echo "{version}" ;;
  buildx) if [ "{buildx}" = yes ] && [ "$2" != build ]; then echo "github.com/docker/buildx v0.13.1"; exit 0; fi
          echo "docker: 'buildx' is not a docker command." >&2; exit 1 ;;
  *) echo "stand-in docker: $*" >&2; exit 1 ;;
esac
"""


def stand_in_docker(folder: Path, version: str, buildx: bool = False) -> Path:
    path = folder / "docker"
    path.write_text(STAND_IN.format(version=version, buildx="yes" if buildx else "no"))
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.mark.slow
def test_client_without_buildkit_is_refused_with_the_fix(tmp_path):
    docker = stand_in_docker(tmp_path, "28.2.2")
    result = run_buildkit(
        "build",
        "--select",
        "id=2.14.1-rocm7.2-py3.12-runtime",
        "--out",
        tmp_path / "out",
        env={**os.environ, "BUILDKIT_DOCKER": str(docker)},
    )
    assert result.returncode == 2
    assert "client 28.2.2) has no buildx plugin" in result.stderr and "docker-buildx" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()


@pytest.mark.slow
def test_unreachable_engine_is_one_clear_message(tmp_path):
    docker = stand_in_docker(tmp_path, "26.1.5+dfsg1", buildx=True)
    result = run_buildkit(
        "build",
        "--select",
        "id=2.14.1-rocm7.2-py3.12-runtime",
        "--out",
        tmp_path / "out",
        env={**os.environ, "BUILDKIT_DOCKER": str(docker), "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"},
    )
    assert result.returncode == 1  # the environment failed, not the input
    assert f"cannot reach the Docker engine at unix://{tmp_path}/no-engine.sock" in result.stderr
    assert "start it" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_empty_selection_builds_nothing(tmp_path):
    result = run_buildkit("build", "--select", "torch=9.9.9", "--out", tmp_path / "out")
    assert result.returncode == 2 and "--select: torch=9.9.9 leaves no target of the matrix's" in result.stderr


@pytest.mark.slow
def test_unreadable_pip_conf_is_a_user_error(tmp_path):
    docker = stand_in_docker(tmp_path, "26.1.5+dfsg1", buildx=True)
    result = run_buildkit(
        "build",
        "--select",
        "id=2.14.1-rocm7.2-py3.12-runtime",
        "--pip-conf",
        tmp_path / "missing.conf",
        env={**os.environ, "BUILDKIT_DOCKER": str(docker), "DOCKER_HOST": f"unix://{tmp_path}/no-engine.sock"},
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"--pip-conf: cannot read {tmp_path / 'missing.conf'}" in result.stderr
