"""Files that must be regular files, as each command meets them: a FIFO (opening it waits for a writer for
ever), a device such as /dev/zero (it never ends), a folder, a file of 20 MB. Every file buildkit reads goes
through regular_files (matrix files and templates are tested in test_hostile_matrices.py): each of these is
one message naming the option or file and what the path is instead, exit 2, at once; and in a host tree a
CDI spec nested thousands deep or a folder of dozens of specs is a note, not an internal error or minutes
of parsing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from buildkit.adapters import cdi
from testkit import hosts
from testkit.bounds import hang_guard

# compat check reads only the index under test: PyPI and the layout indexes of the data are left out
OFFLINE = ("--pypi", "none", "--layout-index", "amd-whl-next=none")

SPECIAL = {
    "fifo": ("is a FIFO (named pipe), not a regular file", lambda path: os.mkfifo(path)),
    "dev_zero": ("is a device, not a regular file", lambda path: os.symlink("/dev/zero", path)),
    "folder": ("is a folder, not a file", lambda path: path.mkdir()),
    "huge": ("is larger than", lambda path: os.truncate(os.open(path, os.O_CREAT | os.O_WRONLY), 64 << 20)),
}
SELECT = ("--select", "id=*2.15.0-cuda13.0-py3.12-runtime")


def run_bounded(cli, *args):
    """The CLI under a hang guard: a read that blocks fails the test instead of hanging the suite."""
    return hang_guard(lambda: cli(*args), f"buildkit {' '.join(map(str, args))}")


def special(tmp_path: Path, kind: str) -> tuple[Path, str]:
    path = tmp_path / f"special-{kind}"
    reason, make = SPECIAL[kind]
    make(path)
    return path, reason


def assert_refused(result, *expected: str) -> None:
    assert "Traceback" not in result.err and "internal error" not in result.err, result.err
    assert result.code == 2, (result.code, result.err)
    errors = [line for line in result.err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.err
    for text in expected:
        assert text in errors[0], result.err


@pytest.mark.parametrize("kind", SPECIAL)
def test_registry_auth_file(cli, tmp_path, kind):
    path, reason = special(tmp_path, kind)
    result = run_bounded(cli, "verify", "127.0.0.1:1/team/app:1", "--key", "cosign.pub", "--registry-auth-file", path)
    assert_refused(result, f"--registry-auth-file: cannot read {path}: {reason}")


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "huge"])
def test_docker_config_json(cli, tmp_path, monkeypatch, kind):
    (tmp_path / "docker").mkdir()
    path, reason = special(tmp_path, kind)
    os.rename(path, tmp_path / "docker" / "config.json") if kind != "dev_zero" else os.symlink("/dev/zero", tmp_path / "docker" / "config.json")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    result = run_bounded(cli, "verify", "127.0.0.1:1/team/app:1", "--key", "cosign.pub")
    assert_refused(result, f"$DOCKER_CONFIG/config.json: cannot read {tmp_path / 'docker' / 'config.json'}: {reason}")


@pytest.mark.parametrize("kind", SPECIAL)
def test_compat_check_data(cli, tmp_path, kind):
    path, reason = special(tmp_path, kind)
    assert_refused(run_bounded(cli, "compat", "check", *OFFLINE, "--index", "http://127.0.0.1:1/whl", "--data", path), f"--data: cannot read {path}: {reason}")


@pytest.mark.parametrize("option", ["--pip-conf", "--ca-bundle"])
@pytest.mark.parametrize("kind", SPECIAL)
def test_build_settings_files(cli, tmp_path, option, kind):
    """Read before any engine is asked: the refusal is the same with or without one."""
    path, reason = special(tmp_path, kind)
    assert_refused(run_bounded(cli, "build", *SELECT, option, path), f"{option}: cannot read {path}: {reason}")


def test_a_cdi_spec_nested_thousands_deep_is_a_note(cli, tmp_path):
    root = hosts.mi300x(tmp_path / "host")
    (root / "etc/cdi").mkdir(parents=True)
    (root / "etc/cdi/amd.json").write_text('{"kind": "amd.com/gpu", "devices": ' + "[" * 100_000 + "]" * 100_000 + "}")
    (root / "etc/cdi/deep.yaml").write_text("kind: amd.com/gpu\ndevices: " + "[" * 100_000 + "]" * 100_000 + "\n")
    result = run_bounded(cli, "detect", "--json", "--host-root", root, "--python", "3.12")
    assert result.code == 0 and "Traceback" not in result.err, result.err
    notes = json.loads(result.out)["notes"]
    assert "/etc/cdi/amd.json: not a CDI spec buildkit can read: nested too deeply to be a spec; ignored" in notes
    assert any(note.startswith("/etc/cdi/deep.yaml: not a CDI spec buildkit can read") for note in notes), notes


@pytest.mark.slow
def test_dozens_of_large_cdi_specs_are_read_up_to_the_cap(cli, tmp_path, monkeypatch):
    """24 one-MB specs once cost 35 s of CPU in detect: at most 16 specs and 4 MB are read."""
    root = hosts.amd_cdi_spec(hosts.mi300x(tmp_path / "host"), [128])
    padding = "".join(f'- name: "pad{index}"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/null\n' for index in range(12_000))
    for index in range(24):
        (root / f"etc/cdi/vendor{index:02d}.yaml").write_text(f"kind: example.com/dev{index}\ndevices:\n{padding}"[:1000_000])
    parsed: list[int] = []  # the size of each spec parsed: the work, counted (parsing all 24 once took 35 s of CPU)
    real_parse = cdi.parse_spec
    monkeypatch.setattr(cdi, "parse_spec", lambda text, json_file: parsed.append(len(text)) or real_parse(text, json_file))
    result = run_bounded(cli, "detect", "--json", "--host-root", root, "--python", "3.12")
    assert result.code == 0, result.err
    assert len(parsed) <= cdi.MAX_SPECS and sum(parsed) <= cdi.MAX_TOTAL_BYTES, parsed
    notes = json.loads(result.out)["notes"]
    assert "/etc/cdi/vendor15.yaml: and 9 more CDI specs are not read: at most 16 are (a host has one per GPU vendor); remove the stale ones" in notes
    assert any("not read: with the CDI specs before it, it is over 4 MB, all that is read" in note for note in notes), notes
    assert json.loads(result.out)["cdi_specs"][0]["path"] == "/etc/cdi/amd.json"  # sorted first, read
