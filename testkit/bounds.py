"""Bounds proven without the clock: the suite runs on loaded 2-core machines, where a wall-clock assertion
fails a correct change. A test proves a bound by its counter or its event instead:

- FakeClock: the clock a deadline is measured on, set by the test (a request "took" a second because the
  server handler said so), so a budget's arithmetic is exact on any machine;
- count_calls: the Python calls a piece of work makes (cProfile's count, the same on a fast and a loaded
  machine), so "linear" is a ratio of counts at two sizes and "at once" is a count;
- hang_guard: the one place a test waits on the clock, as a guard against a hang only: generous (minutes
  where the work takes a second), so a busy machine never trips it and a real hang still ends the test.
"""

from __future__ import annotations

import cProfile
import pstats
import threading
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")

# Seconds before a guarded call counts as hung: generous, a guard against hangs only (the calls it guards take
# seconds on an idle machine; a loaded one must never trip it).
HANG_GUARD = 300.0


class FakeClock:
    """A monotonic clock that moves only when told (thread-safe: a server thread may advance it)."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds


def count_calls(work: Callable[[], T]) -> tuple[T, int]:
    """What `work` returns, and the function calls it made (Python and built-in) in this thread."""
    profile = cProfile.Profile()
    profile.enable()
    try:
        result = work()
    finally:
        profile.disable()
    return result, pstats.Stats(profile).total_calls  # type: ignore[attr-defined]  # set by Stats from the profile


def hang_guard(work: Callable[[], T], what: str, seconds: float = HANG_GUARD) -> T:
    """work(), in a thread: an exception it raises is raised here, and a call still running after `seconds`
    fails the test as hung instead of hanging the suite (a guard against hangs, never a measure of speed)."""
    results: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(work())
        except BaseException as error:  # handed to the test's thread, pytest.raises and failures included
            errors.append(error)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"{what} hung (still running after {seconds:g} s, a guard against hangs)"
    if errors:
        raise errors[0]
    return results[0]
