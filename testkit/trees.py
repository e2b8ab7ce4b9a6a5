"""Folder trees as tests see them: a snapshot that proves nothing of the user's changed, and a way to make
a path unreadable even for root."""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Protocol


class CliResult(Protocol):
    """What the tests' `cli` fixture returns (tests/conftest.py's Result)."""

    code: int
    out: str
    err: str


def snapshot(*roots: Path) -> dict[str, tuple[str | int, ...]]:
    """Every path below the roots (the roots included): its kind, content hash or link target, mode and
    inode. Never follows a symlink, so a planted link is recorded as a link, not as where it leads."""
    found: dict[str, tuple[str | int, ...]] = {}
    for root in roots:
        for folder, folders, files in os.walk(root, followlinks=False):
            for name in [".", *folders, *files]:
                path = Path(folder) / name if name != "." else Path(folder)
                info = path.lstat()
                entry: tuple[str | int, ...]
                if stat.S_ISLNK(info.st_mode):
                    entry = ("link", os.readlink(path))
                elif stat.S_ISREG(info.st_mode):
                    entry = ("file", hashlib.sha256(path.read_bytes()).hexdigest(), stat.S_IMODE(info.st_mode), info.st_ino)
                elif stat.S_ISDIR(info.st_mode):
                    entry = ("folder", stat.S_IMODE(info.st_mode))
                else:
                    entry = ("other", stat.S_IFMT(info.st_mode))
                found[str(path)] = entry
    return found


def unprivileged(command: list[str]) -> list[str]:
    """The command, run without the capabilities that let root read any file: a mode-000 path is then as
    unreadable for root (the CI user) as for anyone else."""
    if os.geteuid() != 0:
        return command
    return ["setpriv", "--bounding-set=-dac_override,-dac_read_search", *command]


def assert_refused(result: CliResult, *fragments: str, code: int = 2) -> None:
    """A refusal as the user must see it: the exit code, exactly one error line holding every fragment, and
    no traceback. `result` is the tests' CLI result (code, out, err)."""
    assert result.code == code, result.out + result.err
    assert "Traceback" not in result.err + result.out
    errors = [line for line in result.err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.err
    for fragment in fragments:
        assert fragment in errors[0], errors[0]
