"""`buildkit render --out` against hostile and careless output folders: real files, real symlinks, the real CLI.

Each refusal must be exit 2 with one clear message and no traceback, and must leave every file where it was:
the tree (and the place a planted symlink points to) is snapshotted before and after.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from testkit.trees import assert_refused as refused
from testkit.trees import snapshot

NARROW = ("--select", "torch=2.13.0", "--select", "python=3.12", "--select", "flavor=runtime")  # 5 targets
WIDE = ("--select", "torch=2.13.0", "--select", "python=3.12")  # 10: runtime and devel
MANIFEST = ".buildkit-render.json"


@pytest.fixture
def render(cli):
    def run(out: Path, *selection: str):
        return cli("render", "--out", out, *(selection or NARROW))

    return run


def test_narrower_render_removes_only_its_own_stale_files(render, tmp_path):
    out = tmp_path / "dist"
    assert render(out, *WIDE).code == 0
    devel = out / "2.13.0" / "cuda13.0" / "py3.12" / "devel"
    assert (devel / "Dockerfile").is_file()
    mine = {out / "README.md": "my notes", devel / "notes.txt": "mine, inside a target folder", out / "keep" / "x.txt": "x"}
    for path, text in mine.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)

    result = render(out, *NARROW)

    assert result.code == 0, result.err
    # per devel target: Dockerfile, build-args.env, target.json, buildkit/{install,gpu_guard}.py and buildkit/torch-install.json
    assert "removed 30 files of an earlier render" in result.out
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("Dockerfile")) == [
        f"2.13.0/{backend}/py3.12/runtime/Dockerfile" for backend in ("cuda12.6", "cuda13.0", "cuda13.2", "rocm7.1", "rocm7.2")
    ]
    assert all(path.read_text() == text for path, text in mine.items())
    assert sorted(p.name for p in devel.iterdir()) == ["notes.txt"]  # the user's file keeps its folder
    assert not (out / "2.13.0" / "cuda12.6" / "py3.12" / "devel").exists()  # emptied folders it created go
    plan = json.loads((out / "plan.json").read_text())
    assert len(plan) == 5
    listed = json.loads((out / MANIFEST).read_text())["files"]
    written = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file() and p not in mine}
    assert set(listed) == written - {MANIFEST} and len(listed) == 5 * 6 + 1  # per target 6 files, and plan.json


def test_same_render_twice_rewrites_nothing(render, tmp_path):
    out = tmp_path / "dist"
    assert render(out).code == 0
    before = snapshot(out)
    assert render(out).code == 0
    assert snapshot(out) == before  # same inodes: nothing replaced, no temporary file left


@pytest.mark.slow
@pytest.mark.parametrize("where", ["target folder", "intermediate folder", "Dockerfile", "plan.json"])
def test_symlink_planted_inside_out_is_never_followed(render, tmp_path, where):
    out, elsewhere = tmp_path / "dist", tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "Dockerfile").write_text("the user's own file outside --out")
    (elsewhere / "plan.json").write_text("[]")
    assert render(out).code == 0  # an earlier render: the folder is buildkit's, the symlink someone else's
    runtime = out / "2.13.0" / "cuda13.0" / "py3.12" / "runtime"
    planted, target = {
        "target folder": (out / "2.13.0" / "cuda13.0" / "py3.12" / "devel", elsewhere),
        "intermediate folder": (out / "2.13.0" / "cuda12.6", elsewhere),
        "Dockerfile": (runtime / "Dockerfile", elsewhere / "Dockerfile"),
        "plan.json": (out / "plan.json", elsewhere / "plan.json"),
    }[where]
    if planted.is_dir():
        shutil.rmtree(planted)
    elif planted.exists():
        planted.unlink()
    planted.symlink_to(target)
    before = snapshot(out, elsewhere)

    result = render(out, *WIDE)

    refused(result, str(planted.relative_to(tmp_path)), "is a symlink", "never writes through or over a symlink")
    assert snapshot(out, elsewhere) == before


def test_non_empty_folder_that_is_no_render_output_is_refused(render, tmp_path):
    out = tmp_path / "project"
    out.mkdir()
    (out / "Dockerfile").write_text("FROM mine")
    (out / "plan.json").write_text("my plan")
    before = snapshot(out)
    refused(render(out), "is not empty and is not an earlier buildkit render output", MANIFEST)
    assert snapshot(out) == before


def test_output_of_an_older_buildkit_without_manifest_is_refused(render, tmp_path):
    out = tmp_path / "dist"
    assert render(out).code == 0
    (out / MANIFEST).unlink()
    before = snapshot(out)
    refused(render(out, *WIDE), "is not empty and is not an earlier buildkit render output")
    assert snapshot(out) == before


def test_file_edited_since_render_is_neither_overwritten_nor_removed(render, tmp_path):
    out = tmp_path / "dist"
    assert render(out, *WIDE).code == 0
    edited = out / "2.13.0" / "rocm7.2" / "py3.12" / "devel" / "Dockerfile"
    edited.write_text(edited.read_text() + "RUN echo my change\n")
    before = snapshot(out)
    refused(render(out), str(edited.relative_to(tmp_path)), "was changed since buildkit render wrote it")
    assert snapshot(out) == before


def test_user_file_where_a_new_target_goes_is_not_overwritten(render, tmp_path):
    out = tmp_path / "dist"
    assert render(out).code == 0
    mine = out / "2.13.0" / "cuda13.0" / "py3.12" / "devel" / "Dockerfile"
    mine.parent.mkdir(parents=True)
    mine.write_text("FROM my-own-devel")
    before = snapshot(out)
    refused(render(out, *WIDE), str(mine.relative_to(tmp_path)), "is not a file buildkit render wrote")
    assert snapshot(out) == before


@pytest.mark.parametrize("paths", [["../victim.txt"], ["/tmp/victim.txt"], ["a/../../victim.txt"], ["."]])
def test_hostile_manifest_cannot_direct_a_removal(render, tmp_path, paths):
    out, victim = tmp_path / "dist", tmp_path / "victim.txt"
    victim.write_text("keep me")
    assert render(out).code == 0
    manifest = json.loads((out / MANIFEST).read_text())
    manifest["files"].update(dict.fromkeys(paths, "0" * 64))
    (out / MANIFEST).write_text(json.dumps(manifest))
    before = snapshot(tmp_path)
    refused(render(out, *WIDE), "not a valid list of files buildkit render wrote", "not a plain relative path")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("content", ["", "not json", "[]", '{"written_by": "buildkit render", "format": 1, "files": {"a": 1}, "folders": []}'])
def test_broken_manifest_is_one_clear_error(render, tmp_path, content):
    out = tmp_path / "dist"
    assert render(out).code == 0
    (out / MANIFEST).write_text(content)
    before = snapshot(out)
    refused(render(out), "is not a valid list of files buildkit render wrote")
    assert snapshot(out) == before


def test_manifest_that_is_a_symlink_is_refused(render, tmp_path):
    out, elsewhere = tmp_path / "dist", tmp_path / "elsewhere.json"
    assert render(out).code == 0
    (out / MANIFEST).rename(elsewhere)
    (out / MANIFEST).symlink_to(elsewhere)
    before = snapshot(tmp_path)
    refused(render(out), MANIFEST, "cannot be read as buildkit render's list")
    assert snapshot(tmp_path) == before


def test_rewritten_files_are_replaced_not_written_in_place(render, tmp_path):
    """A hard link someone made to a rendered file, from outside --out, must not receive the new content:
    buildkit writes a new file and renames it over the old one."""
    out = tmp_path / "dist"
    assert render(out, *WIDE).code == 0
    outside = tmp_path / "linked-plan.json"
    os.link(out / "plan.json", outside)
    old = outside.read_text()
    assert render(out).code == 0
    assert outside.read_text() == old
    assert len(json.loads((out / "plan.json").read_text())) == 5
    assert not [p for p in out.rglob("*") if p.name.endswith(".buildkit-tmp")]


@pytest.mark.parametrize("case", ["a file", "below a file", "/proc", "inside /proc", "a dangling symlink"])
def test_unusable_out_is_one_clear_error(render, tmp_path, case):
    a_file = tmp_path / "file.txt"
    a_file.write_text("mine")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    out, expected = {
        "a file": (a_file, "is a file, not a folder"),
        "below a file": (a_file / "dist", "cannot create or open"),
        "/proc": (Path("/proc"), "is not empty and is not an earlier buildkit render output"),
        "inside /proc": (Path("/proc/buildkit-dist"), "cannot create or open"),
        "a dangling symlink": (tmp_path / "dangling", "is a symlink to nothing"),
    }[case]
    before = snapshot(tmp_path)
    refused(render(out), "--out", expected)
    assert snapshot(tmp_path) == before
