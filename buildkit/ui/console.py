"""What a build shows on the terminal: one live line per running target on a TTY, plain lines otherwise."""

from __future__ import annotations

import re
import threading
import time
from typing import TYPE_CHECKING

from rich.live import Live
from rich.table import Table
from rich.text import Text

from buildkit.app.build import BuildStatus, Display, TargetResult
from buildkit.ui.views import say, terminal

if TYPE_CHECKING:
    from types import TracebackType

    from rich.console import Console

# BuildKit's plain progress: "#8 [stage-0 5/7] RUN pip install ..." starts a step.
_STEP_RE = re.compile(r"^#\d+ \[[^\]]+\] ")


def _outcome(result: TargetResult) -> str:
    if result.status is BuildStatus.BUILT:
        size = f"{result.size / 2**20:.1f} MiB" if result.size else "?"
        return f"built in {result.seconds:.1f} s, {size}"
    return f"{result.status.value}: {result.error}"


class PlainDisplay(Display):
    """Step headers and outcomes as plain lines, safe for logs and CI."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.lock = threading.Lock()

    def __enter__(self) -> PlainDisplay:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None) -> None:
        pass

    def begin(self, engine_description: str, count: int, jobs: int) -> None:
        self._print(f"building {count} targets with {engine_description}, {jobs} at a time")

    def _print(self, text: str) -> None:
        with self.lock:
            say(self.console, text)

    def started(self, target_id: str) -> None:
        self._print(f"[{target_id}] building")

    def line(self, target_id: str, text: str) -> None:
        if _STEP_RE.match(text):
            self._print(f"[{target_id}] {text[:160]}")

    def step(self, target_id: str, text: str) -> None:
        self._print(f"[{target_id}] {text}")

    def finished(self, result: TargetResult) -> None:
        self._print(f"[{result.id}] {_outcome(result)}")


class LiveDisplay(Display):
    """A live table: one line per running target with its current step; outcomes scroll above it."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.lock = threading.Lock()
        self.running: dict[str, tuple[float, str]] = {}
        self.live = Live(self._table(), console=console, refresh_per_second=4, transient=True)

    def __enter__(self) -> LiveDisplay:
        self.live.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None) -> None:
        self.live.__exit__(kind, error, traceback)

    def begin(self, engine_description: str, count: int, jobs: int) -> None:
        say(self.live.console, f"building {count} targets with {engine_description}, {jobs} at a time")

    def _table(self) -> Table:
        table = Table.grid(padding=(0, 1))
        for target_id, (started, step) in sorted(self.running.items()):
            # a step is a line of the build's output: its RUN command's text, escapes and brackets included
            table.add_row(Text(target_id, style="bold"), f"{time.monotonic() - started:5.0f}s", terminal(step[:100]))
        return table

    def started(self, target_id: str) -> None:
        with self.lock:
            self.running[target_id] = (time.monotonic(), "starting")
            self.live.update(self._table())

    def line(self, target_id: str, text: str) -> None:
        if _STEP_RE.match(text):
            with self.lock:
                started, _ = self.running.get(target_id, (time.monotonic(), ""))
                self.running[target_id] = (started, text)
                self.live.update(self._table())

    def step(self, target_id: str, text: str) -> None:
        with self.lock:
            if target_id in self.running:  # its row shows the step, with the time since the target started
                self.running[target_id] = (self.running[target_id][0], text)
                self.live.update(self._table())
            else:  # finished building (publishing comes after): a line of its own
                say(self.live.console, f"{target_id}: {text}")

    def finished(self, result: TargetResult) -> None:
        with self.lock:
            self.running.pop(result.id, None)
            say(self.live.console, f"{result.id}: {_outcome(result)}")
            self.live.update(self._table())
