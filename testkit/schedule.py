"""How the suite is spread over pytest-xdist's workers (tests/conftest.py's scheduler): the unit of work a test
belongs to. The integration tests are one unit, run in order on one worker: they share that worker's session
images, registry and wheel indexes, and never build at once on the one engine. Every other test goes with the
rest of its module (its module's fixtures are made once)."""

from __future__ import annotations

INTEGRATION = "tests/integration/"

# Integration modules that share nothing with the others: they only read the local ROCm toolchain image (hipcc in
# its containers; the source build's output is a local folder: no image, no tag, no registry). Each is a unit of
# its own, run on whichever worker is free: the integration group is CI's critical path, and the unit tests' worker
# has minutes to spare beside it (docs/development.md, "CI budget"). tests/unit/test_suite_schedule.py checks that
# they ask for none of the session's shared fixtures.
TOOLCHAIN_ONLY = frozenset(INTEGRATION + module for module in ("test_hipify_toolchain.py", "test_code_objects_toolchain.py", "test_source_build.py"))


def unit_of_work(nodeid: str) -> str:
    """The unit a test's node id belongs to: the integration group, or its own module."""
    module = nodeid.split("::", 1)[0]
    return INTEGRATION if module.startswith(INTEGRATION) and module not in TOOLCHAIN_ONLY else module
