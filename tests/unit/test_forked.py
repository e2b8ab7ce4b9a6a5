"""Work split over cores by fork (buildkit.adapters.forked), and validate's render check on it: the answers
are the one-process run's, whatever a child does."""

from __future__ import annotations

import os
import signal
import threading
import types
from pathlib import Path

import pytest

from buildkit.adapters import forked
from buildkit.adapters.forked import split_map
from buildkit.app.targets import Choices, _failed_renders, select_targets

PARENT = os.getpid()


@pytest.fixture(autouse=True)
def only_this_tests_threads(monkeypatch):
    """The suite's session servers (the local wheel index, test registries) run in threads of this process for
    the whole run, so a fork would never be made here: only the threads a test starts count. A child touches
    none of those servers' locks (it works, pickles and writes to its own pipe)."""
    already = threading.active_count() - 1
    monkeypatch.setattr(forked, "threading", types.SimpleNamespace(active_count=lambda: threading.active_count() - already))


def where(part):
    return [(item, os.getpid()) for item in part]


def test_the_parts_come_back_in_order_and_all_but_the_first_are_worked_on_in_children():
    answers = split_map(where, list(range(10)), 3)
    assert [item for answer in answers for item, _ in answer] == list(range(10))
    pids = [{pid for _, pid in answer} for answer in answers]
    assert pids[0] == {os.getpid()} and all(len(found) == 1 and os.getpid() not in found for found in pids[1:])
    assert len(set.union(*pids)) == 3


def dies(part):
    if os.getpid() != PARENT:
        os._exit(3)
    return where(part)


def killed(part):
    if os.getpid() != PARENT:
        os.kill(os.getpid(), signal.SIGKILL)
    return where(part)


def unreadable(part):
    return [lambda item=item: item for item in part] if os.getpid() != PARENT else where(part)  # a lambda does not pickle


def raises(part):
    if os.getpid() != PARENT:
        raise RuntimeError("in the child")
    return where(part)


@pytest.mark.parametrize("work", [dies, killed, unreadable, raises])
def test_a_part_whose_child_gives_no_answer_is_worked_on_by_the_parent(work):
    assert os.getpid() == PARENT, "run in the process the module was imported in"
    answers = split_map(work, list(range(6)), 2)
    assert answers == [where([0, 1, 2]), where([3, 4, 5])]  # the parent's pid throughout


def test_no_child_is_forked_while_a_thread_runs():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        answers = split_map(where, list(range(4)), 2)
    finally:
        stop.set()
        thread.join()
    assert {pid for answer in answers for _, pid in answer} == {os.getpid()}


def test_a_child_left_running_is_stopped_when_the_parent_is_interrupted(monkeypatch):
    started = []

    class Recorded(forked.Forked):
        def __init__(self, *args):
            super().__init__(*args)
            started.append(self.pid)

    monkeypatch.setattr(forked, "Forked", Recorded)

    def interrupted(part):
        if os.getpid() == PARENT:
            raise KeyboardInterrupt
        signal.pause()  # the child would wait for ever
        return part

    with pytest.raises(KeyboardInterrupt):
        split_map(interrupted, [1, 2], 2)
    assert len(started) == 1
    with pytest.raises(ChildProcessError):
        os.waitpid(started[0], os.WNOHANG)  # killed and reaped


TEAM = 'extends = "default"\ntemplate_dir = "t"\nflavors = ["team"]\npython = ["3.11", "3.12", "3.13"]\ninclude = [{ torch = "2.14.1" }]\n'


def test_validate_on_every_core_finds_the_errors_it_finds_in_one_process(tmp_path: Path, monkeypatch):
    """A fault only the last target reaches is found by the child checking the second part (a shape of its own,
    from a template worker of its own), and reported as in one process."""
    monkeypatch.setattr("buildkit.app.targets.usable_cores", lambda: 2)
    assert forked.can_fork()
    (tmp_path / "t").mkdir()
    template = tmp_path / "t" / "team.Dockerfile.j2"
    template.write_text('{% extends "runtime.Dockerfile.j2" %}')
    (tmp_path / "m.toml").write_text(TEAM)
    last = select_targets(Choices(matrix=tmp_path / "m.toml")).targets[-1].id
    template.write_text(
        '{% extends "runtime.Dockerfile.j2" %}{% block extra %}\n'
        f'{{% if target.id == "{last}" %}}{{{{ target.no_such_field }}}}{{% endif %}}\n{{% endblock %}}\n'
    )

    def failures(parallel_from: int) -> dict[str, str]:
        selection = select_targets(Choices(matrix=tmp_path / "m.toml"), rendering=True)
        return {name: str(error) for name, error in _failed_renders(selection, parallel_from).items()}

    alone, split = failures(10**9), failures(1)
    assert alone == split and "no_such_field" in split["team.Dockerfile.j2"] and last in split["team.Dockerfile.j2"]


def test_plan_json_on_every_core_is_the_one_process_plan_line_for_line(monkeypatch):
    """plan --format json's lines, the parts after the first planned in children meanwhile: the same lines in the
    same order as one process writes."""
    from buildkit.cli.targets import _plan_line

    monkeypatch.setattr("buildkit.app.targets.usable_cores", lambda: 3)
    assert forked.can_fork()
    selection = select_targets(Choices())
    alone = list(selection.map_plan(_plan_line, parallel_from=10**9))
    split = list(selection.map_plan(_plan_line, parallel_from=1))
    assert split == alone and len(alone) == len(selection.targets) > 100


def test_a_large_selection_is_split_once_per_core_up_to_a_bound(monkeypatch):
    from buildkit.app.targets import MOST_PARTS, PARALLEL_FROM, _part_count

    monkeypatch.setattr("buildkit.app.targets.usable_cores", lambda: 64)
    assert _part_count(PARALLEL_FROM, PARALLEL_FROM) == MOST_PARTS < 64
    assert _part_count(PARALLEL_FROM - 1, PARALLEL_FROM) == 1
    monkeypatch.setattr("buildkit.app.targets.usable_cores", lambda: 2)
    assert _part_count(10**6, PARALLEL_FROM) == 2
    assert [len(part) for part in forked.contiguous_parts(range(10), 3)] == [4, 4, 2]
    assert [len(part) for part in forked.contiguous_parts((), 3)] == [0]


def test_a_part_the_system_makes_no_child_for_is_worked_on_by_the_parent(monkeypatch):
    def refused():
        raise BlockingIOError(11, "Resource temporarily unavailable")  # fork's EAGAIN: no process left

    monkeypatch.setattr(forked.os, "fork", refused)
    assert split_map(where, list(range(4)), 2) == [where([0, 1]), where([2, 3])]
