"""How the suite is spread over the xdist workers (testkit.schedule): the integration modules that run apart from
the one-worker integration group must share nothing with it. A module in TOOLCHAIN_ONLY that asks for one of the
session's shared fixtures (the pair's build, its registry, its wheel indexes, the image clean-up) would build or
delete beside the group's builds on the one engine, so the check reads which fixtures each of its tests asks for."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from testkit.schedule import INTEGRATION, TOOLCHAIN_ONLY, unit_of_work

REPO = Path(__file__).resolve().parents[2]

# what a module apart may ask for: read-only handles on the engine and the local images, its own folders
MAY_SHARE = frozenset({"client", "cli", "buildkit_cli", "docker_env", "base_image", "rocm_toolchain", "tmp_path", "tmp_path_factory", "monkeypatch"})


def fixtures_asked_for(source: str) -> set[str]:
    """The parameters of the module's tests and fixtures that name none of its own fixtures: what it takes from
    conftest.py."""
    functions = [node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef)]
    own = {function.name for function in functions if any("fixture" in ast.unparse(decorator) for decorator in function.decorator_list)}
    asked = {argument.arg for function in functions if function.name.startswith("test_") or function.name in own for argument in function.args.args}
    return asked - own


@pytest.mark.parametrize("module", sorted(TOOLCHAIN_ONLY))
def test_the_modules_run_apart_share_no_session_state(module):
    path = REPO / module
    assert module.startswith(INTEGRATION) and path.is_file(), f"{module} is named in TOOLCHAIN_ONLY but is gone"
    shared = fixtures_asked_for(path.read_text(encoding="utf-8")) - MAY_SHARE
    assert not shared, f"{module} runs apart from the integration group but asks for {sorted(shared)}"


def test_the_check_sees_a_shared_fixture(tmp_path: Path):
    source = "import pytest\n\n@pytest.fixture\ndef mine(tmp_path):\n    return 1\n\ndef test_it(mine, pair_build, client):\n    pass\n"
    assert fixtures_asked_for(source) == {"tmp_path", "pair_build", "client"}


def test_the_integration_tests_are_one_unit_but_for_those_apart():
    assert unit_of_work("tests/integration/test_publish.py::test_x[a::b]") == INTEGRATION
    assert unit_of_work("tests/integration/test_doctor.py::test_y") == INTEGRATION
    assert unit_of_work("tests/integration/test_hipify_toolchain.py::test_z") == "tests/integration/test_hipify_toolchain.py"
    assert unit_of_work("tests/unit/test_plan.py::TestA::test_b") == "tests/unit/test_plan.py"
