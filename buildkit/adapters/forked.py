"""Pure CPU work over a large selection, split over the machine's cores by fork.

Checking 100,000 targets is a loop of small, independent steps over records the process already holds; a
forked child has them all without copying (the selection's records are gc.freeze()'d, so little is
rewritten in the child's pages), and sends back only its answer, pickled. The parent works on the first part
itself. Where there is one core, no fork (Windows, macOS, where fork is not safe with system frameworks), or a
thread running (fork copies only the calling thread), the work runs in the process as one part.

A child is a helper, never the one who decides: if it cannot be made, dies, is killed, or answers what cannot be read, the
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
from typing import TYPE_CHECKING, Generic, NoReturn, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

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


def contiguous_parts(items: Sequence[Item], count: int) -> list[Sequence[Item]]:
    """`items` in `count` contiguous slices of (nearly) equal length, at least one; contiguous, since neighbouring
    targets share records (a stack's packages, an install plan) that a part reads once."""
    size = -(-len(items) // max(count, 1)) or 1
    return [items[start : start + size] for start in range(0, len(items), size)] or [items]


class Forked(Generic[Item, Answer]):
    """`work(part)` in a forked child, started at once; `answer()` waits for it, `stop()` ends it unanswered."""

    def __init__(self, work: Callable[[Sequence[Item]], Answer], part: Sequence[Item], in_child: Callable[[], None] = lambda: None) -> None:
        self.work, self.part = work, part
        self.pid, self.reader = 0, -1  # no child: the system would not make one (no memory, no process or file left)
        try:
            reader, writer = os.pipe()
        except OSError:
            return
        try:
            pid = os.fork()
        except OSError:
            os.close(reader)
            os.close(writer)
            return
        if pid == 0:
            _child(work, part, in_child, reader, writer)
        os.close(writer)
        self.pid, self.reader = pid, reader

    def answer(self) -> Answer:
        """The child's answer, or the parent's own where the child gave none."""
        if not self.pid:
            return self.work(self.part)
        with os.fdopen(self.reader, "rb", closefd=False) as stream:
            data = stream.read()
        _, status = os.waitpid(self.pid, 0)
        if status == 0:
            try:
                answer: Answer = pickle.loads(data)  # what the child pickled: its work's Answer
                return answer
            except Exception:  # a truncated or unreadable answer: the parent does the part
                pass
        return self.work(self.part)

    def stop(self) -> None:
        """A child not answered yet (the parent was interrupted, or failed) is killed; every child is reaped and
        its pipe closed."""
        if not self.pid:
            return
        with contextlib.suppress(ChildProcessError, ProcessLookupError):
            if os.waitpid(self.pid, os.WNOHANG) == (0, 0):
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
        with contextlib.suppress(OSError):
            os.close(self.reader)


def _child(work: Callable[[Sequence[Item]], Answer], part: Sequence[Item], in_child: Callable[[], None], reader: int, writer: int) -> NoReturn:
    """The child: its answer, pickled, into the pipe; nothing else of the parent's runs here."""
    status = 1
    try:
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


def split_map(work: Callable[[Sequence[Item]], Answer], items: Sequence[Item], count: int, in_child: Callable[[], None] = lambda: None) -> list[Answer]:
    """`work` of each of `count` contiguous parts of `items`, in order: all but the first in forked children,
    where the platform allows. `in_child` runs first in each child (to let go of what is the parent's, such as a
    worker process)."""
    parts = contiguous_parts(items, count)
    if len(parts) == 1 or not can_fork():
        return [work(part) for part in parts]
    helpers: list[Forked[Item, Answer]] = []
    try:
        helpers.extend(Forked(work, part, in_child) for part in parts[1:])
        return [work(parts[0]), *(helper.answer() for helper in helpers)]
    finally:
        for helper in helpers:
            helper.stop()
