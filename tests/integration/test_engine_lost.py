"""An engine that stops in the middle of a build: one clear message, a report, no traceback. A throwaway
dockerd (testkit.daemon) is stopped for this, so nothing else is touched."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from testkit.daemon import SpareEngine

pytestmark = pytest.mark.engine


@pytest.fixture
def spare_engine(tmp_path, base_image, buildkit_cli):
    engine = SpareEngine(buildkit_cli.docker, tmp_path / "dockerd.log").start(base_image)
    yield engine.daemon, engine.env
    engine.stop()


def test_engine_stopping_mid_build_is_reported(spare_engine, pair_setup, tmp_path):
    daemon, env = spare_engine
    matrix, pip_conf = pair_setup
    out = tmp_path / "out"
    executable = shutil.which("buildkit") or str(Path(sys.executable).parent / "buildkit")
    build = subprocess.Popen(
        [
            executable,
            "build",
            "--matrix",
            str(matrix),
            "--network",
            "host",
            "--pip-conf",
            str(pip_conf),
            "--select",
            "torch=2.14.1",
            "--no-cache",
            "-j",
            "1",
            "--out",
            str(out),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 900  # a guard against hangs only: the first RUN step starts within a minute
    while not any("apt-get update" in p.read_text(errors="replace") for p in (out / "logs").glob("*.log")):
        if time.monotonic() > deadline or build.poll() is not None:
            build.kill()
            pytest.fail("the build never reached its first RUN step (a guard against hangs)")
        time.sleep(0.2)
    daemon.send_signal(signal.SIGTERM)  # the engine goes away mid-build
    daemon.wait(timeout=300)  # a guard against hangs only
    _stdout, stderr = build.communicate(timeout=600)  # a guard against hangs only
    assert build.returncode == 1, stderr
    assert "the Docker engine stopped during the build; restart it and run the build again" in stderr
    assert "Traceback" not in stderr
    report = json.loads((out / "report.json").read_text())
    assert report["engine_lost"] is True
    first, second = report["targets"]
    assert first["status"] == "failed" and "the Docker engine stopped" in first["error"]
    assert second["status"] == "not-started"  # nothing more is attempted on a dead engine
