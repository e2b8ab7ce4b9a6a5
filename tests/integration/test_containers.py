"""run_once on the real engine: a container's exit code and streams come back apart and together, one that
outlives its deadline is killed, and none is left behind either way."""

from __future__ import annotations

import uuid

import docker.errors
import pytest

from buildkit.adapters.engine.containers import run_once

pytestmark = pytest.mark.engine


def ours(client, label: str) -> list:
    return client.containers.list(all=True, filters={"label": label})


def test_exit_code_and_streams(client, base_image):
    label = f"dev.buildkit.test-run-{uuid.uuid4().hex[:8]}"
    ran = run_once(client, base_image, 60, command=["sh", "-c", "echo out; echo err >&2; echo more; exit 3"], labels={label: "1"}, network_disabled=True)
    assert (ran.status, ran.timed_out) == (3, False)
    assert (ran.stdout, ran.stderr) == ("out\nmore\n", "err\n")
    assert sorted(ran.output.splitlines()) == ["err", "more", "out"]
    assert ours(client, label) == []


def test_a_container_past_its_deadline_is_killed_and_removed(client, base_image):
    label = f"dev.buildkit.test-run-{uuid.uuid4().hex[:8]}"
    # the event is the kill: a container that sleeps for ten minutes ends as timed out, with no exit status of its own
    ran = run_once(client, base_image, 2, command=["sh", "-c", "echo begun; sleep 600"], labels={label: "1"}, network_disabled=True)
    assert ran.timed_out and ran.status is None
    assert ran.stdout == "begun\n"  # what it wrote before the kill is still read
    assert ours(client, label) == []


def test_a_missing_image_is_the_engines_error(client):
    with pytest.raises(docker.errors.ImageNotFound):
        run_once(client, f"buildkit-test-missing-{uuid.uuid4().hex[:8]}:none", 10, command=["true"])
