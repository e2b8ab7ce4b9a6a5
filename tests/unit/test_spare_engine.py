"""testkit's throwaway dockerd cleans up only what it made: a test that fails before start() still stops it
from its `finally`, and the stop of an engine that never started must leave the working directory alone (an
unset folder once became `umount -R .` and `rmtree(".")`, which took a checkout with it)."""

from __future__ import annotations

import pytest

from testkit.daemon import SpareEngine


def test_an_engine_that_never_started_stops_without_touching_the_working_directory(tmp_path, monkeypatch):
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "README.md").write_text("kept\n")
    monkeypatch.chdir(checkout)
    engine = SpareEngine("docker", tmp_path / "dockerd.log")
    engine.stop()
    engine.stop()
    assert (checkout / "README.md").read_text() == "kept\n"


def test_an_engine_that_never_started_has_no_socket_to_talk_to(tmp_path):
    with pytest.raises(RuntimeError, match="not been started"):
        _ = SpareEngine("docker", tmp_path / "dockerd.log").env
