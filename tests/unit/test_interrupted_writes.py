"""A write cut short leaves nothing behind: SIGTERM (a cancelled CI job, `timeout`) and Ctrl-C in the middle
of `render --out` end with the temporary file removed and the output as it was (exit 143, 130); what a
killed run (SIGKILL) leaves is removed by the next render, and never taken for the user's files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SELECT = ("--select", "id=2.14.1-cuda13.0-py3.12-runtime")
# The real CLI, with the rename of each finished temporary file held until the test has signalled: what
# stands in here is the timing of a slow disk, not any part of the cleanup.
# Ctrl-C's handler is set, as an interactive shell gives it: a suite started with SIGINT ignored (a background job;
# Python keeps an inherited SIG_IGN) would otherwise never see the SIGINT this test sends.
HELD_RENAME = """
import os, signal, sys, time
from pathlib import Path
signal.signal(signal.SIGINT, signal.default_int_handler)
import buildkit.adapters.files.outputs as safe_files
from buildkit.cli import main
real_replace = os.replace
marker = Path(sys.argv[1])

def held_replace(source, target, **kwargs):
    if str(source).endswith(".buildkit-tmp") and not str(target).startswith(".buildkit-"):
        marker.write_text(str(source))
        time.sleep(600)  # until the test signals it (within moments of the marker)
    return real_replace(source, target, **kwargs)

safe_files.os.replace = held_replace
sys.exit(main(sys.argv[2:]))
"""


def temporaries(folder: Path) -> list[str]:
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*.buildkit-tmp"))


def render_in_a_process(tmp_path: Path, out: Path) -> tuple[subprocess.Popen, Path]:
    marker = tmp_path / "writing"
    process = subprocess.Popen(
        [sys.executable, "-c", HELD_RENAME, str(marker), "render", "--out", str(out), *SELECT],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    deadline = time.monotonic() + 300  # a guard against hangs only: the first write comes within seconds
    while not marker.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "render never reached its first write (a guard against hangs)"
        time.sleep(0.05)
    return process, marker


@pytest.mark.slow
@pytest.mark.parametrize("signum, code, said", [(signal.SIGTERM, 143, "terminated"), (signal.SIGINT, 130, "interrupted")])
def test_a_render_stopped_mid_write_removes_its_temporary_file(tmp_path, signum, code, said):
    out = tmp_path / "dist"
    process, _marker = render_in_a_process(tmp_path, out)
    assert temporaries(out), "the write is under way"
    process.send_signal(signum)
    _, err = process.communicate(timeout=300)  # a guard against hangs only
    assert process.returncode == code, err
    assert err.strip().endswith(said) and "Traceback" not in err
    assert temporaries(out) == []


@pytest.mark.slow
def test_a_render_removes_what_a_killed_one_left(cli, tmp_path):
    out = tmp_path / "dist"
    process, _ = render_in_a_process(tmp_path, out)
    process.kill()  # SIGKILL: no cleanup can run
    process.wait(timeout=300)  # a guard against hangs only
    left = temporaries(out)
    assert left, "a killed run leaves its temporary file"
    result = cli("render", "--out", out, *SELECT)
    assert result.code == 0, result.err
    assert temporaries(out) == []
    assert "Dockerfile" in os.listdir(out / "2.14.1" / "cuda13.0" / "py3.12" / "runtime")


def test_a_first_render_killed_before_its_list_was_written_does_not_block_the_next(cli, tmp_path):
    """Only a temporary list of files in the folder: the folder counts as empty, not as someone else's."""
    out = tmp_path / "dist"
    out.mkdir()
    (out / ".buildkit-render.json.0123456789ab.buildkit-tmp").write_text("{")
    result = cli("render", "--out", out, *SELECT)
    assert result.code == 0, result.err
    assert temporaries(out) == []
    (out / "notes.buildkit-tmp").write_text("mine")  # not a name buildkit gives its temporary files: kept
    assert cli("render", "--out", out, *SELECT).code == 0 and (out / "notes.buildkit-tmp").read_text() == "mine"
