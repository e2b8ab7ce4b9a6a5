"""Every command line buildkit prints for a person to paste runs exactly that command, whatever the values in
it: shell syntax from each source that reaches a printed command (a host tree's /etc/group, a container
command after `--`, an output path) is fed through the CLI, every printed command is taken from the output
(the `...` of doctor's and detect's fixes, run's warnings, `run --print`, detect's `docker run` lines, the
line `bake` prints) and run in a real shell whose `sudo`, `docker` and `buildkit` only record their
arguments. Nothing else may run (no file appears), and each payload arrives as one argument, unchanged.
Matrix values (registry, repository, tags, archs) reach the same lines; their grammar refuses shell syntax
before that (test_injection.py), and they are quoted all the same.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from buildkit.adapters import host as host_adapter
from testkit import hosts

PAYLOADS = [
    "render;touch${IFS}PWNED;#",
    "$(touch PWNED)",
    "`touch PWNED`",
    "x' ; touch PWNED ; '",
    'x" ; touch PWNED ; "',
    "a|touch PWNED",
    "a&&touch PWNED",
    "a b\\;touch PWNED",
]
STUBS = ("sudo", "docker", "buildkit")
OUTSIDER = host_adapter.Identity(uid=4242, gids=frozenset({4242}))  # stands in for a user who is not root (tests run as root)


@pytest.fixture
def shell(tmp_path):
    """Run a printed line in bash, in a folder of its own, with the stubs first on PATH; return (argument
    lists the stubs received, files that appeared in the folder)."""
    bin_dir, work = tmp_path / "stubs", tmp_path / "work"
    bin_dir.mkdir()
    work.mkdir()
    log = tmp_path / "argv.log"
    for name in STUBS:
        stub = bin_dir / name
        stub.write_text('#!/bin/sh\n{ printf "%s\\0" "$(basename "$0")" "$@"; printf "\\n"; } >> "$ARGV_LOG"\n')
        stub.chmod(0o755)

    def run(line: str) -> tuple[list[list[str]], list[str]]:
        log.write_bytes(b"")
        env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "ARGV_LOG": str(log), "USER": "tester", "HOME": str(tmp_path)}
        subprocess.run(["bash", "-c", line], cwd=work, env=env, capture_output=True, timeout=30)
        calls = [entry.split("\0") for entry in log.read_text().split("\0\n") if entry]
        return calls, sorted(os.listdir(work))

    return run


def printed_commands(text: str) -> list[str]:
    """The command lines in a command's output: `quoted` ones, and lines that are a command."""
    found = re.findall(r"`([^`\n]+)`", text)
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("docker run "):
            found.append(line)
        if line.startswith("build with: "):
            found.append(line.removeprefix("build with: ").split(" [GROUP]")[0])
    return found


def amd_host_whose_group_is(root: Path, group: str) -> Path:
    """An MI300X host whose /dev/kfd and render node belong to a group of that name (the fixture's nodes are
    owned by gid 0: /etc/group names gid 0 so)."""
    hosts.mi300x(root)
    (root / "etc/group").write_text(f"{group}:x:0:\nvideo:x:{hosts.VIDEO_GID}:\n")
    return root


@pytest.mark.parametrize("payload", PAYLOADS, ids=range(len(PAYLOADS)))
def test_a_group_name_from_the_host_tree_never_runs_from_doctors_fix(cli, tmp_path, shell, monkeypatch, payload):
    """A group name that is not a portable name is named by its gid in the command (usermod takes either);
    the sentence around it still says the name."""
    monkeypatch.setattr(host_adapter.Identity, "current", classmethod(lambda cls: OUTSIDER))
    root = amd_host_whose_group_is(tmp_path / "host", payload)
    outputs, fixes = [], []
    for command in ("doctor", "detect"):
        for form in ((), ("--json",)):
            result = cli(command, *form, "--host-root", root, "--python", "3.12")
            assert "Traceback" not in result.err
            if form:  # the fixes as JSON strings: the commands in them once decoded
                fixes += [finding["fix"] for finding in json.loads(result.out)["findings"]]
            else:
                outputs.append(result.out + result.err)
    run = cli("run", "--print", "--host-root", root, "--python", "3.12")
    assert run.code == 0, run.err
    usermod = [line for text in (*outputs, *fixes, run.err) for line in printed_commands(text) if "usermod" in line]
    assert len(usermod) >= 4, outputs
    for line in usermod:
        calls, appeared = shell(line)
        assert appeared == [], f"{line!r} ran more than its command: {appeared}"
        assert calls == [["sudo", "usermod", "-aG", "0,video", "tester"]], (line, calls)
    docker_lines = [line for line in printed_commands(outputs[1] + run.out) if line.startswith("docker run ")]
    assert len(docker_lines) == 2
    for line in docker_lines:
        calls, appeared = shell(line)
        assert appeared == [] and calls[0][:2] == ["docker", "run"]


@pytest.mark.parametrize("payload", PAYLOADS, ids=range(len(PAYLOADS)))
def test_a_container_command_stays_its_own_words_in_run_print(cli, tmp_path, shell, payload):
    root = hosts.mi300x(tmp_path / "host")
    result = cli("run", "--print", "--host-root", root, "--python", "3.12", "--", "python", "-c", payload, payload)
    assert result.code == 0, result.err
    calls, appeared = shell(result.out)  # stdout is the command line
    assert appeared == [] and calls[0][-3:] == ["-c", payload, payload]


@pytest.mark.parametrize("payload", PAYLOADS, ids=range(len(PAYLOADS)))
def test_an_output_folder_stays_one_argument_of_the_bake_line(cli, tmp_path, shell, payload):
    out = tmp_path / payload.replace("/", "_")
    result = cli("bake", "--out", out, "--select", "id=*2.15.0*py3.12-runtime*")
    assert result.code == 0, result.err
    (line,) = [line for line in printed_commands(result.out) if line.startswith("docker buildx bake")]
    calls, appeared = shell(line)
    assert appeared == [] and calls == [["docker", "buildx", "bake", "-f", str(out / "docker-bake.json")]]


def test_gpu_arch_fixes_are_quoted_commands(cli, tmp_path, shell):
    """The --gpu-arch fix names the host's arch (read from its kfd topology): the command runs as printed."""
    root = hosts.amd_host(tmp_path / "host", [("0000:c4:00.0", "0x73ff", "0x030000", 100301)])  # gfx1031: no wheel has it
    result = cli("doctor", "--json", "--host-root", root, "--python", "3.12", "--select", "backend_version=7.2")
    fixes = " ".join(finding["fix"] for finding in json.loads(result.out)["findings"])
    lines = [line for line in printed_commands(fixes) if line.startswith("buildkit build")]
    assert lines and "HSA_OVERRIDE_GFX_VERSION=10.3.0 makes it run gfx1030 code" in fixes, fixes
    for line in lines:
        calls, appeared = shell(line)
        assert appeared == [] and calls == [["buildkit", "build", "--select", "flavor=source", "--gpu-arch", "gfx1031"]]
