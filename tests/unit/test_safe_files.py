"""safe_files directly: what render and hipify share, on real folders."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from buildkit.adapters.files import outputs
from buildkit.adapters.files.outputs import OwnedFolder, sha256_bytes, update_tree, write_atomic, write_below
from buildkit.errors import UserError
from testkit.trees import snapshot


def folder(root: Path) -> OwnedFolder:
    return OwnedFolder(root, ".test-manifest.json", "buildkit test")


def test_copied_files_keep_their_executable_bit(tmp_path):
    script = tmp_path / "build.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    update_tree(folder(tmp_path / "out"), {"tools/build.sh": script, "README": b"text"})
    assert stat.S_IMODE((tmp_path / "out" / "tools" / "build.sh").stat().st_mode) & 0o111
    assert not stat.S_IMODE((tmp_path / "out" / "README").stat().st_mode) & 0o111


def test_a_run_stopped_half_way_is_picked_up_by_the_next(tmp_path):
    """The list written before any file changes covers the old and the new content: a stop between the two
    leaves files the next run still recognises as its own."""
    out = tmp_path / "out"
    update_tree(folder(out), {"a.txt": b"old", "gone.txt": b"stale"})
    manifest = json.loads((out / ".test-manifest.json").read_text())
    # the state after the first list was written and before a.txt was replaced
    manifest["files"]["a.txt"] = sha256_bytes(b"new")
    manifest["replacing"] = {"a.txt": sha256_bytes(b"old")}
    (out / ".test-manifest.json").write_text(json.dumps(manifest))

    update = update_tree(folder(out), {"a.txt": b"new"})

    assert update.written == ("a.txt",) and update.removed == ("gone.txt",)
    assert (out / "a.txt").read_bytes() == b"new" and not (out / "gone.txt").exists()
    assert "replacing" not in json.loads((out / ".test-manifest.json").read_text())


def test_path_escaping_the_folder_is_refused_before_anything_is_written(tmp_path):
    before = snapshot(tmp_path)
    for path in ("../x", "/etc/x", "a//b", "a/./b", ""):
        with pytest.raises(UserError, match="not a plain relative path"):
            update_tree(folder(tmp_path / "out"), {path: b"x"})
    assert snapshot(tmp_path) == before


def test_a_folder_another_writer_made_first_is_written_into(tmp_path, monkeypatch):
    """`build -j 2` writes two targets' contexts at once: both find contexts/ missing and one makes it first.
    TEST DOUBLE of losing that race: mkdir makes the folder, as the other writer did, then says it exists."""
    real_mkdir = os.mkdir

    def beaten_to_it(path, mode=0o777, *, dir_fd=None):
        real_mkdir(path, mode, dir_fd=dir_fd)
        raise FileExistsError(17, "File exists")

    monkeypatch.setattr(outputs.os, "mkdir", beaten_to_it)
    write_below(tmp_path / "out", "contexts/2.14.1-rocm7.2-py3.11-runtime/Dockerfile", b"FROM scratch\n", "--out")
    assert (tmp_path / "out/contexts/2.14.1-rocm7.2-py3.11-runtime/Dockerfile").read_bytes() == b"FROM scratch\n"


def test_write_atomic_replaces_the_named_file_whole(tmp_path):
    target = tmp_path / "report.json"
    target.write_text("old")
    write_atomic(target, b"new", "--json")
    assert target.read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]
    with pytest.raises(UserError, match=r"--json: .* is a folder"):
        write_atomic(tmp_path, b"x", "--json")
