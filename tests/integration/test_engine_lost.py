"""An engine that stops in the middle of a build: one clear message, a report, no traceback.

A second, throwaway dockerd (its own socket, data folder and bridge) is started for this, so stopping it
touches nothing else: with `--bridge none` a daemon's shutdown takes the host's docker0 with it, so it gets
an empty bridge of its own. The local base image is loaded into it first.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.engine


@pytest.fixture
def spare_engine(tmp_path, base_image, buildkit_cli):
    root = Path(f"/tmp/bk-engine-{os.getpid()}")  # short: unix socket paths are limited to 108 bytes
    root.mkdir(exist_ok=True)
    socket = root / "docker.sock"
    bridge = f"bk{os.getpid() % 10**8}"  # interface names have at most 15 characters
    subprocess.run(["ip", "link", "add", bridge, "type", "bridge"], check=True)
    daemon = subprocess.Popen(
        ["dockerd", "--host", f"unix://{socket}", "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
         "--pidfile", str(root / "docker.pid"), "--bridge", bridge, "--iptables=false", "--ip-masq=false"],
        stdout=open(tmp_path / "dockerd.log", "w"), stderr=subprocess.STDOUT,
    )
    env = {**os.environ, "DOCKER_HOST": f"unix://{socket}", "BUILDKIT_DOCKER": buildkit_cli.docker}
    deadline = time.monotonic() + 60
    while subprocess.run([buildkit_cli.docker, "info"], env=env, capture_output=True).returncode != 0:
        if time.monotonic() > deadline:
            daemon.kill()
            subprocess.run(["ip", "link", "del", bridge], capture_output=True)
            pytest.fail("the spare dockerd did not start: " + (tmp_path / "dockerd.log").read_text()[-2000:])
        time.sleep(0.5)
    save = subprocess.Popen([buildkit_cli.docker, "save", base_image], stdout=subprocess.PIPE)
    subprocess.run([buildkit_cli.docker, "load"], stdin=save.stdout, env=env, check=True, capture_output=True)
    save.wait()
    yield daemon, env
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    subprocess.run(["umount", "-R", str(root)], capture_output=True)
    subprocess.run(["ip", "link", "del", bridge], capture_output=True)
    shutil.rmtree(root, ignore_errors=True)


def test_engine_stopping_mid_build_is_reported(spare_engine, pair_setup, tmp_path):
    daemon, env = spare_engine
    matrix, pip_conf = pair_setup
    out = tmp_path / "out"
    executable = shutil.which("buildkit") or str(Path(sys.executable).parent / "buildkit")
    build = subprocess.Popen(
        [executable, "build", "--matrix", str(matrix), "--network", "host", "--pip-conf", str(pip_conf),
         "--select", "torch=2.14.1", "--no-cache", "-j", "1", "--out", str(out)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 120
    while not any("apt-get update" in p.read_text(errors="replace") for p in (out / "logs").glob("*.log")):
        if time.monotonic() > deadline or build.poll() is not None:
            build.kill()
            pytest.fail("the build never reached its first RUN step")
        time.sleep(0.2)
    daemon.send_signal(signal.SIGTERM)  # the engine goes away mid-build
    daemon.wait(timeout=60)
    stdout, stderr = build.communicate(timeout=300)
    assert build.returncode == 1, stderr
    assert "the Docker engine stopped during the build; restart it and run the build again" in stderr
    assert "Traceback" not in stderr
    report = json.loads((out / "report.json").read_text())
    assert report["engine_lost"] is True
    first, second = report["targets"]
    assert first["status"] == "failed" and "the Docker engine stopped" in first["error"]
    assert second["status"] == "not-started"  # nothing more is attempted on a dead engine
