"""No write follows a link out of its folder. A cloned repository can hold `matrix.lock -> ~/.bashrc`, an
output folder can hold `report.json -> ~/.ssh/authorized_keys`, and a dangling link would have the target
created: each is refused with a message naming the link, and the file it points to (or its absence) is
left exactly as it was. render, bake and hipify's --out are covered by test_render_tree.py and
test_hipify.py (safe_files.update_tree); here the single-file writers and build's --out."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from buildkit.adapters.files.bundled import COMPAT_DATA, compat_data
from buildkit.adapters.files.outputs import open_below, write_atomic, write_below
from buildkit.core.compat.facts import compat_from_data
from buildkit.errors import UserError
from testkit.pytorch_index import PyTorchIndex, torch_wheel_name, wheels_from_compat

# compat check reads only the index under test: PyPI and the layout indexes of the data are left out
OFFLINE = ("--pypi", "none", "--layout-index", "amd-whl-next=none")

DIGEST = "sha256:" + "b" * 64
SECRET = "the victim's file: it must not change\n"
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "cuda_ext"


@pytest.fixture
def victim(tmp_path) -> Path:
    """A file of the user's outside the folder written to."""
    path = tmp_path / "elsewhere" / "bashrc"
    path.parent.mkdir()
    path.write_text(SECRET)
    return path


def pinned_matrix(folder: Path) -> Path:
    """A matrix whose lock needs nothing remote: digest-pinned bases, no package range."""
    folder.mkdir(exist_ok=True)
    path = folder / "matrix.toml"
    path.write_text(f'extends = "default"\nruntime_base = "python@{DIGEST}"\ninclude = [{{ torch = "2.14.1", python = "3.12", flavor = "runtime" }}]\n')
    return path


def assert_link_refused(result, link: Path) -> None:
    assert "Traceback" not in result.err, result.err
    assert result.code == 2, (result.code, result.out, result.err)
    assert f"{link} is a symlink; buildkit never writes through a link" in result.err, result.err


def test_lock_refuses_a_matrix_lock_linked_to_a_file_of_yours(cli, tmp_path, victim):
    matrix = pinned_matrix(tmp_path / "clone")
    link = matrix.parent / "matrix.lock"
    link.symlink_to(victim)
    result = cli("lock", "--matrix", matrix, "--package-index", "http://127.0.0.1:1/simple")
    assert "matrix.lock" in result.err and result.code == 2  # read as a lock first: the victim is no lock
    assert victim.read_text() == SECRET and link.is_symlink()


def test_lock_refuses_a_dangling_matrix_lock_link_and_creates_nothing(cli, tmp_path):
    matrix = pinned_matrix(tmp_path / "clone")
    target = tmp_path / "elsewhere" / "created-by-the-link"
    target.parent.mkdir()
    link = matrix.parent / "matrix.lock"
    link.symlink_to(target)
    assert_link_refused(cli("lock", "--matrix", matrix, "--package-index", "http://127.0.0.1:1/simple"), link)
    assert not target.exists() and link.is_symlink()
    link.unlink()
    assert cli("lock", "--matrix", matrix, "--package-index", "http://127.0.0.1:1/simple").code == 0  # without it, written


def test_lock_refuses_a_link_to_a_valid_lock_and_leaves_it(cli, tmp_path):
    """The link leads to a file that reads as a lock: reading is harmless, writing through it is refused."""
    matrix = pinned_matrix(tmp_path / "clone")
    elsewhere = tmp_path / "elsewhere.lock"
    elsewhere.write_text("schema = 1\n")
    link = matrix.parent / "matrix.lock"
    link.symlink_to(elsewhere)
    assert_link_refused(cli("lock", "--matrix", matrix, "--package-index", "http://127.0.0.1:1/simple"), link)
    assert elsewhere.read_text() == "schema = 1\n"


@pytest.mark.slow
def test_compat_check_write_refuses_a_data_link(cli, tmp_path):
    data = tmp_path / "compat.toml"
    data.write_text(COMPAT_DATA.read_text())
    folders = wheels_from_compat(compat_from_data(compat_data()))
    folders["cu126"] += [torch_wheel_name("2.12.2", "cu126", "3.12")]  # a new patch release: --write has a change to make
    server = PyTorchIndex(folders).start()
    link = tmp_path / "linked.toml"
    link.symlink_to(data)
    try:
        result = cli("compat", "check", *OFFLINE, "--index", server.url, "--pypi", "none", "--layout-index", "amd-whl-next=none", "--data", link, "--write")
    finally:
        server.stop()
    assert_link_refused(result, link)
    assert data.read_text() == COMPAT_DATA.read_text()


def test_hipify_json_report_link_is_refused_before_the_run(cli, tmp_path, victim):
    pytest.importorskip("torch.utils.hipify")
    link = tmp_path / "report.json"
    link.symlink_to(victim)
    assert_link_refused(cli("hipify", FIXTURE, "--out", tmp_path / "out", "--json", link), link)
    assert victim.read_text() == SECRET and not (tmp_path / "out").exists()


def test_write_atomic_never_writes_through_or_creates_through_a_link(tmp_path, victim):
    link = tmp_path / "report.json"
    link.symlink_to(victim)
    with pytest.raises(UserError, match="is a symlink; buildkit never writes through a link"):
        write_atomic(link, b"{}", "--json")
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "nowhere" / "x.json")
    with pytest.raises(UserError, match="is a symlink"):
        write_atomic(dangling, b"{}", "--json")
    assert victim.read_text() == SECRET and not (tmp_path / "nowhere").exists()
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(UserError, match="is in the way and is not a regular file"):
        write_atomic(fifo, b"{}", "--json")


def test_build_contexts_and_logs_never_follow_a_planted_link(tmp_path, victim):
    """build --out holds contexts/<id>/ and logs/: a link planted as a file or as a folder on the way is refused."""
    out = tmp_path / "buildkit-out"
    (out / "contexts" / "t1").mkdir(parents=True)
    (out / "contexts" / "t1" / "Dockerfile").symlink_to(victim)
    with pytest.raises(UserError, match=r"contexts/t1/Dockerfile: is a symlink"):
        write_below(out, "contexts/t1/Dockerfile", b"FROM scratch\n", "--out")
    (out / "contexts" / "t2").symlink_to(victim.parent)
    with pytest.raises(UserError, match=r"contexts/t2: is a symlink"):
        write_below(out, "contexts/t2/Dockerfile", b"FROM scratch\n", "--out")
    (out / "logs").mkdir()
    (out / "logs" / "t1.log").symlink_to(victim)
    with pytest.raises(UserError, match=r"logs/t1.log: is a symlink"):
        open_below(out, "logs/t1.log", append=True, option="--out")
    assert victim.read_text() == SECRET and sorted(os.listdir(victim.parent)) == ["bashrc"]
    write_below(out, "contexts/t3/support/install.py", b"print()\n", "--out")
    descriptor = open_below(out, "logs/t3.log", append=False, option="--out")
    os.write(descriptor, b"line\n")
    os.close(descriptor)
    assert (out / "contexts/t3/support/install.py").read_bytes() == b"print()\n" and (out / "logs/t3.log").read_text() == "line\n"


def test_sbom_and_test_reports_are_written_whole(cli, tmp_path):
    """views.write_json, behind `sbom --out`, `test --json` and `parity --json`, goes through write_atomic."""
    from buildkit.ui.views import write_json

    target = tmp_path / "sbom.json"
    write_json(target, {"a": 1}, "--out")
    assert json.loads(target.read_text()) == {"a": 1}
    link = tmp_path / "link.json"
    link.symlink_to(target)
    with pytest.raises(UserError, match=r"--out: .*link\.json is a symlink"):
        write_json(link, {"b": 2}, "--out")
    assert json.loads(target.read_text()) == {"a": 1}


def test_builds_of_one_run_create_their_shared_folders_side_by_side(tmp_path):
    """`build -j 2` writes each target's context at once: two threads that both find contexts/ missing both
    create it, and the second must use the folder the first made instead of failing with "File exists"."""
    from concurrent.futures import ThreadPoolExecutor

    for attempt in range(20):
        out = tmp_path / f"out{attempt}"
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(write_below, [out] * 8, [f"contexts/t{index}/buildkit/install.py" for index in range(8)], [b"print()\n"] * 8, ["--out"] * 8))
        assert sorted(path.parent.parent.name for path in out.glob("contexts/*/buildkit/install.py")) == [f"t{i}" for i in range(8)]
