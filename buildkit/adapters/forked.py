"""Pure CPU work over a large selection, split over the machine's cores by fork.

Checking 100,000 targets is a loop of small, independent steps over records the process already holds; a
forked child has them all without copying (the selection's records are gc.freeze()'d, so little is
rewritten in the child's pages), and sends back only its answer, pickled. The parent works on the first part
itself. Where there is one core, no fork (Windows, macOS, where fork is not safe with system frameworks), or a
thread running (fork copies only the calling thread), the work runs in the process as one part.

A child is a helper, never the one who decides: if it dies, is killed, or answers what cannot be read, the
parent does its part itself, so the result is the same as the one-process run's. A child ends with
os._exit, so no handler of the parent's (cleanup on exit, on SIGTERM, on Ctrl-C) runs twice.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

Item = TypeVar("Item")
Answer = TypeVar("Answer")


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, as a container's cpuset limits it)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity call on this platform
        return os.cpu_count() or 1


def can_fork() -> bool:
    return sys.platform == "linux" and hasattr(os, "fork") and threading.active_count() == 1


def split_map(work: Callable[[Sequence[Item]], Answer], items: Sequence[Item], parts: int,
              in_child: Callable[[], None] = lambda: None) -> list[Answer]:
    """`work` of each of `parts` contiguous slices of `items` (contiguous: neighbouring targets share records),
    in order; all but the first in forked children, where the platform allows. `in_child` runs first in each
    child (to let go of what belongs to the parent, such as a worker process)."""
    size = -(-len(items) // max(parts, 1)) if items else 0
    slices = [items[start:start + size] for start in range(0, len(items), size)] if size else [items]
    if len(slices) == 1 or not can_fork():
        return [work(part) for part in slices]
    children = [_start(work, part, in_child) for part in slices[1:]]
    try:
        answers = [work(slices[0])]
        for (pid, reader), part in zip(children, slices[1:]):
            answers.append(_collect(pid, reader, work, part))
        return answers
    finally:
        for pid, reader in children:
            _stop(pid, reader)


def _start(work: Callable[[Sequence[Item]], Answer], part: Sequence[Item], in_child: Callable[[], None]) -> tuple[int, int]:
    reader, writer = os.pipe()
    pid = os.fork()
    if pid:
        os.close(writer)
        return pid, reader
    status = 1
    try:  # the child: its answer, pickled, into the pipe; nothing else of the parent's runs here
        os.close(reader)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        in_child()
        data = pickle.dumps(work(part), protocol=pickle.HIGHEST_PROTOCOL)
        with os.fdopen(writer, "wb") as stream:
            stream.write(data)
        status = 0
    finally:
        os._exit(status)


def _collect(pid: int, reader: int, work: Callable[[Sequence[Item]], Answer], part: Sequence[Item]) -> Answer:
    """The child's answer, or the parent's own where the child gave none."""
    with os.fdopen(reader, "rb", closefd=False) as stream:
        data = stream.read()
    _, status = os.waitpid(pid, 0)
    if status == 0:
        try:
            return pickle.loads(data)
        except Exception:  # a truncated or unreadable answer: the parent does the part
            pass
    return work(part)


def _stop(pid: int, reader: int) -> None:
    """A child not collected (the parent was interrupted, or failed): killed, reaped, its pipe closed."""
    with contextlib.suppress(ChildProcessError, ProcessLookupError):
        if os.waitpid(pid, os.WNOHANG) == (0, 0):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    with contextlib.suppress(OSError):
        os.close(reader)
