"""Shared helpers: run the real CLI in-process and write small team matrices; how the suite runs in parallel
(the integration tests together on one worker); and BUILDKIT_TEST_CPU_HOGS, the busy machine on demand."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from buildkit.cli import main
from testkit.schedule import unit_of_work

# No Hypothesis test may fail by the machine's speed: no per-example deadline and no "too slow" health check
# (both wall-clock measures) in any test, whatever its own @settings leave out.
settings.register_profile("buildkit", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("buildkit")

CPU_HOGS_ENV = "BUILDKIT_TEST_CPU_HOGS"  # that many processes spin on the CPU while the suite runs: a busy machine


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """pytest-xdist (-n) runs the tests on a worker per core, a unit of work at a time: the integration group on one
    worker, every other module spread over the workers beside it (testkit.schedule). (A scheduler of our own:
    xdist's loadgroup marks do not reach pytest 9.2's node ids, so they would group nothing.)"""
    from xdist.scheduler import LoadScopeScheduling

    class IntegrationTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of_work(nodeid)

    return IntegrationTogether(config, log)


def pytest_configure(config: pytest.Config) -> None:
    """With BUILDKIT_TEST_CPU_HOGS=N, N processes spin on the CPU for the whole run, started once by the process
    that runs the session (not by each xdist worker): the suite must pass on a busy machine, and this is how
    docs/development.md's busy run was made."""
    hogs = int(os.environ.get(CPU_HOGS_ENV, "0") or 0)
    if hogs and not hasattr(config, "workerinput"):
        spinning = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
        config.add_cleanup(lambda: [process.kill() for process in spinning])


REPO = Path(__file__).resolve().parent.parent


@dataclass
class Result:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys):
    """Run `buildkit ARGS...` exactly as the console script does, returning exit code and output."""

    def run(*args: str) -> Result:
        try:
            code = main([str(a) for a in args])
        except SystemExit as exit_:  # argparse: --help, --version, usage errors
            code = exit_.code if isinstance(exit_.code, int) else 2
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


@pytest.fixture
def team_matrix(tmp_path):
    """Write a matrix file (dedented) into a temp folder and return its path."""

    def write(text: str, name: str = "matrix.toml") -> Path:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


@pytest.fixture(scope="session")
def hipcc():
    """This machine's hipcc (CI installs Debian 12's, HIP 5.2); the tests that compile with it skip without it."""
    from buildkit.adapters.hipify.hipcc import find_hipcc

    found = find_hipcc()
    if found is None:
        if os.environ.get("BUILDKIT_REQUIRE_HIPCC") == "1":
            pytest.fail("hipcc is missing (apt-get install hipcc libamdhip64-dev; .ci/run installs it)")
        pytest.skip("hipcc is not installed")
    return found
