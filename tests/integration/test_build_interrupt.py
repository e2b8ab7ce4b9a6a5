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

from testkit.builds import build, team_matrix

pytestmark = pytest.mark.engine


def test_interrupt_stops_builds_and_reports(double_index, pair_setup, base_image, docker_env, tmp_path, client, cleanup_images, repository):
    """The first target's build sits in a step that cannot finish by itself (a team flavor's `sleep`): the
    interrupt provably lands while a build runs, however fast the machine or warm its cache."""
    _, pip_conf = pair_setup
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "slow.Dockerfile.j2").write_text(
        '{% extends "runtime.Dockerfile.j2" %}\n{% block extra %}\nRUN echo buildkit-test-waiting && sleep 600\n{% endblock %}\n'
    )
    matrix = team_matrix(
        tmp_path,
        double_index.url,
        repository,
        '[{ torch = "2.14.1", python = "3.11", flavor = "slow" }]',
        'template_dir = "templates"\nflavors = ["slow"]\n[[torch]]\nversion = "2.14.1"\ncuda = ["13.0"]\nrocm = ["7.2"]\n',
    )
    out = tmp_path / "out"
    executable = shutil.which("buildkit") or str(Path(sys.executable).parent / "buildkit")
    process = subprocess.Popen(
        [executable, "build", "--matrix", str(matrix), "--network", "host", "--pip-conf", str(pip_conf), "--no-cache", "-j", "1", "--out", str(out)],
        env=docker_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C's default disposition, as in a terminal: a suite started as a background job inherits SIGINT
        # ignored (POSIX shells do that to background commands), and Python then never raises KeyboardInterrupt
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 900  # a guard against hangs only: a cold build reaches its waiting step in minutes
    logs = out / "logs"
    while time.monotonic() < deadline:
        if logs.is_dir() and any("buildkit-test-waiting" in p.read_text(errors="replace").split("RUN echo", 1)[-1] for p in logs.glob("*.log")):
            break
        if process.poll() is not None:
            pytest.fail(f"the build ended before its waiting step: {process.stderr.read()[-2000:]}")
        time.sleep(0.2)
    else:
        process.kill()
        pytest.fail("the build never reached its waiting step (a guard against hangs)")
    process.send_signal(signal.SIGINT)
    _stdout, stderr = process.communicate(timeout=600)  # a guard against hangs only
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    report = json.loads((out / "report.json").read_text())
    statuses = [t["status"] for t in report["targets"]]
    assert report["interrupted"] is True
    assert statuses == ["cancelled", "not-started"], stderr
    assert all(t["tags"] == [] for t in report["targets"])


def test_fail_fast_stops_at_the_first_failure(double_index, pair_setup, base_image, docker_env, tmp_path, cleanup_images, repository):
    """ROCm 7.14 is listed first and has no wheels in the double index: with --fail-fast the 7.2 build never starts."""
    _, pip_conf = pair_setup
    matrix = team_matrix(
        tmp_path,
        double_index.url,
        repository,
        '[{ torch = "2.14.1", python = "3.11", flavor = "runtime", backend = "rocm" }]',
        '[[torch]]\nversion = "2.14.1"\nrocm = ["7.14", "7.2"]\npair = { rocm = "7.2" }\n',
    )
    run = build(matrix, pip_conf, tmp_path / "out", docker_env, "-j", "1", "--fail-fast")
    assert run.result.returncode == 1
    # ROCm 7.14 is one image per GPU family: the first family's build fails, and nothing after it starts
    first, *rest = [(t["id"], t["status"]) for t in run.report["targets"]]
    assert first[0].startswith("2.14.1-rocm7.14-") and first[1] == "failed"
    assert rest and all(status == "not-started" for _, status in rest)
    assert ("2.14.1-rocm7.2-py3.11-runtime", "not-started") in rest
