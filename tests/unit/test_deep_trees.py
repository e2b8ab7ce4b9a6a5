"""Trees deeper than any recursion can go: a team template folder 1,200 folders deep is walked
(regular_files.walk), and a CUDA source tree that deep is one message from `buildkit hipify`, not a
RecursionError (its copy is a loop over a stack of folders); a tree as deep as hipify allows is hipified for
real (torch's own walk, which recurses, still fits)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from buildkit.adapters.files.inputs import walk
from buildkit.adapters.hipify.convert import MAX_DEPTH

KERNEL = "__global__ void scale(float* x) { x[threadIdx.x] *= 2.0f; }\n"


@pytest.fixture(autouse=True)
def removed_after(tmp_path):
    """Each test's trees removed without recursion: pytest's own cleanup (shutil.rmtree) recurses once per
    folder and fails on them, for this run and every later one on the machine."""
    yield
    folders = []
    for top, _, files in walk(tmp_path):
        for name in files:
            os.unlink(os.path.join(top, name))
        folders.append(top)
    for top in reversed(folders[1:]):
        os.rmdir(top)


def deep_tree(root: Path, depth: int) -> Path:
    """root/d/d/.../d (depth folders) with a kernel at the bottom, made without recursion (os.makedirs
    itself recurses once per folder)."""
    root.mkdir()
    descriptor = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=descriptor)
            following = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=descriptor)
            os.close(descriptor)
            descriptor = following
        with open(os.open("kernel.cu", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=descriptor), "w") as handle:
            handle.write(KERNEL)
    finally:
        os.close(descriptor)
    return root


@pytest.mark.slow
def test_a_tree_1200_folders_deep_is_one_message(cli, tmp_path):
    pytest.importorskip("torch.utils.hipify")
    tree = deep_tree(tmp_path / "src", 1200)
    result = cli("hipify", tree, "--out", tmp_path / "out")
    assert "Traceback" not in result.err and "internal error" not in result.err, result.err[-2000:]
    assert result.code == 2, result.err[-2000:]
    assert f"is more than {MAX_DEPTH} folders below the tree's top" in result.err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


@pytest.mark.slow
def test_a_tree_as_deep_as_allowed_is_hipified(cli, tmp_path):
    pytest.importorskip("torch.utils.hipify")
    tree = deep_tree(tmp_path / "src", MAX_DEPTH - 1)
    result = cli("hipify", tree, "--out", tmp_path / "out")
    assert result.code == 0, result.err[-2000:]
    assert "1 files converted" in result.out


@pytest.mark.slow
def test_a_template_folder_1200_folders_deep_is_walked(cli, tmp_path):
    """template_dir's walk (os.walk recursed once per folder before Python 3.12): the deep template is found."""
    templates = deep_tree(tmp_path / "t", 1200)
    bottom = templates.joinpath(*["d"] * 1200)
    (bottom / "kernel.cu").rename(bottom / "deep.j2")
    (tmp_path / "matrix.toml").write_text('extends = "default"\ntemplate_dir = "t"\n')
    result = cli("matrix", "validate", "--matrix", tmp_path / "matrix.toml")
    assert "Traceback" not in result.err and "internal error" not in result.err, result.err[-2000:]
    assert result.code == 0, result.err[-2000:]
