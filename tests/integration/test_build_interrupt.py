"""Ctrl-C during a build stops the running build and still reports what finished."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine


def test_interrupt_stops_builds_and_reports(pair_setup, base_image, docker_env, tmp_path, client, cleanup_images):
    matrix, pip_conf = pair_setup
    out = tmp_path / "out"
    executable = shutil.which("buildkit") or str(Path(sys.executable).parent / "buildkit")
    process = subprocess.Popen(
        [executable, "build", "--matrix", str(matrix), "--network", "host", "--pip-conf", str(pip_conf),
         "--no-cache", "-j", "1", "--out", str(out)],
        env=docker_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 120
    logs = out / "logs"
    while time.monotonic() < deadline:
        if logs.is_dir() and any("apt-get update" in p.read_text(errors="replace") for p in logs.glob("*.log")):
            break
        time.sleep(0.2)
    else:
        process.kill()
        pytest.fail("the build never reached its first RUN step")
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    report = json.loads((out / "report.json").read_text())
    statuses = [t["status"] for t in report["targets"]]
    assert report["interrupted"] is True
    assert statuses[0] == "cancelled" and set(statuses[1:]) == {"not-started"}, stderr
    assert all(t["tags"] == [] for t in report["targets"])
