"""Reading input files that anyone may have replaced: regular files only, and only so many bytes.

Every file buildkit reads goes through read_regular (or read_input, which makes its refusal one message):
matrix files and matrix.lock, team templates, host trees (sysfs, /etc/group, CDI specs),
--registry-auth-file and $DOCKER_CONFIG/config.json, `compat check --data`, --pip-conf and --ca-bundle,
the smoke-test cache. Matrix files, team templates and host trees arrive from forks, pull requests and
mounted roots; an option's path can be a FIFO by mistake or by design. A path
there can be a FIFO (opening it for reading waits for a writer forever), a device such as /dev/zero (it
never ends), a folder, or a file of gigabytes. Each is refused with a reason instead of hanging a command
or exhausting its memory. The type is checked on the opened descriptor, so a file swapped in after a check
is still caught.
"""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

# O_NONBLOCK: opening a FIFO returns at once instead of waiting for a writer; regular files ignore it.
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 64 * 1024


class NotReadable(Exception):
    """Why a path cannot be read as a file; `reason` follows "PATH: " ("is a FIFO ...", "no such file")."""

    def __init__(self, reason: str, missing: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.missing = missing


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "is a folder, not a file"
    if stat.S_ISFIFO(mode):
        return "is a FIFO (named pipe), not a regular file"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "is a device, not a regular file"
    if stat.S_ISSOCK(mode):
        return "is a socket, not a regular file"
    return "is not a regular file"


def read_regular(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (symlinks followed); NotReadable otherwise."""
    try:
        descriptor = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise NotReadable("no such file", missing=True) from None
    except (OSError, ValueError) as error:  # ValueError: a NUL byte in the path
        raise NotReadable(f"cannot be opened: {getattr(error, 'strerror', None) or error}") from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise NotReadable(_kind(info.st_mode))
        if info.st_size > limit:
            raise NotReadable(f"is larger than {_size(limit)} ({_size(info.st_size)})")
        chunks: list[bytes] = []
        total = 0
        # st_size can be wrong (sysfs reports 4096, a file may grow while read): the read itself is bounded.
        while chunk := os.read(descriptor, _CHUNK):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise NotReadable(f"is larger than {_size(limit)}")
        return b"".join(chunks)
    except OSError as error:
        raise NotReadable(f"cannot be read: {error.strerror or error}") from None
    finally:
        os.close(descriptor)


def read_input(path: Path, where: str, limit: int, fix: str) -> bytes:
    """read_regular for a file an option names or buildkit looks up ($DOCKER_CONFIG/config.json): what is
    not a regular file of at most `limit` bytes is one UserError, `where: cannot read PATH: what it is instead; fix`."""
    try:
        return read_regular(path, limit)
    except NotReadable as error:
        raise UserError(Problem(where, f"cannot read {path}: {error.reason}; {fix}")) from None


def walk(root: Path) -> Iterator[tuple[str, list[str], list[str]]]:
    """os.walk(root) top-down, never following links to folders, without recursion: os.walk before Python
    3.12 recurses once per folder, so a tree 1,200 folders deep raised RecursionError. As with os.walk, the
    caller may prune the folder list it is given; unreadable folders are skipped."""
    stack = [str(root)]
    while stack:
        top = stack.pop()
        try:
            with os.scandir(top) as listing:
                entries = list(listing)
        except OSError:
            continue
        folders = [entry.name for entry in entries if entry.is_dir(follow_symlinks=False)]
        files = [entry.name for entry in entries if not entry.is_dir(follow_symlinks=False)]
        yield top, folders, files
        stack.extend(os.path.join(top, name) for name in reversed(folders))


def describe_path(path: Path) -> str | None:
    """None when `path` is a regular file (symlinks followed), else what it is instead."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return "no such file"
    except (OSError, ValueError) as error:
        return f"cannot be opened: {getattr(error, 'strerror', None) or error}"
    return None if stat.S_ISREG(mode) else _kind(mode)


def _size(count: int) -> str:
    return f"{count // 2**20} MB" if count >= 2**20 else f"{count // 1024} KB" if count >= 1024 else f"{count} bytes"
