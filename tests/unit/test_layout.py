"""The layout is the architecture: every module imports, and each folder keeps its import rules.

- core/ imports only core/ and errors, and nothing that touches the world (no I/O, clock, subprocess);
- adapters/ never import app/, ui/ or cli;
- app/ never imports ui/ or cli; ui/ never imports cli;
- image/ imports nothing from buildkit (it runs inside images with the standard library and torch);
- cli/ imports only cli/, app/, ui/, errors and the package's version: it parses and prints, the app decides;
- no module imports itself back through others (a cycle), not even for type checking;
- two rooms of core/ are closed subsystems, imported only by their own paths: porting (the hipify preflight's pure
  side, which itself imports nothing but porting and errors) by adapters/hipify, app/hipify_preflight and
  ui/hipify; upstream (`compat check`'s pure side) by app/compat_check alone;
- core/ keeps at most 8 modules beside its rooms, and every folder of the package says in its docstring what it holds.
"""

from __future__ import annotations

import ast
import graphlib
import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import buildkit

PACKAGE = Path(buildkit.__file__).parent
MODULES = sorted(
    name
    for _, name, _ in pkgutil.walk_packages(buildkit.__path__, prefix="buildkit.")
    if name not in ("buildkit.__main__", "buildkit.cli.__main__")  # importing either runs the CLI
)
# Standard-library and third-party modules through which code reaches the world.
WORLDLY = {"os", "subprocess", "socket", "shutil", "tempfile", "time", "datetime", "random", "requests", "docker", "urllib.request", "http"}
# Closed rooms: who may import each (besides the room itself), and what each may import from buildkit besides itself.
CLOSED = {
    "buildkit.core.porting": (("buildkit.adapters.hipify", "buildkit.app.hipify_preflight", "buildkit.ui.hipify"), ("buildkit.errors",)),
    "buildkit.core.upstream": (("buildkit.app.compat_check",), None),  # None: it may import what core/ may
}


def imports_of(module: str) -> set[str]:
    """Every module a file imports, at the top or inside functions (buildkit uses absolute imports only)."""
    path = PACKAGE.parent / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = PACKAGE.parent / module.replace(".", "/") / "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{module}: relative import; write it absolute so its folder shows"
            base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def internal(names: set[str]) -> set[str]:
    return {name for name in names if name == "buildkit" or name.startswith("buildkit.")}


def within(name: str, places: tuple[str, ...]) -> bool:
    """Whether a module (or a name imported from it) is one of `places` or inside one of them."""
    return any(name == place or name.startswith(place + ".") for place in places)


@pytest.mark.parametrize("module", MODULES)
def test_every_module_imports(module):
    importlib.import_module(module)


def test_modules_found():
    assert {"buildkit.core.targets.plan", "buildkit.adapters.engine.docker_sdk", "buildkit.app.build", "buildkit.ui.report", "buildkit.image.probe"} <= set(
        MODULES
    )


def violations(module: str) -> list[str]:
    ours = internal(imports_of(module))
    place = module.split(".")[1] if module.count(".") >= 2 else module.split(".")[-1]
    bad: list[str] = []
    if place == "core":
        bad += [n for n in ours if not n.startswith(("buildkit.core", "buildkit.errors"))]
        bad += [n for n in imports_of(module) if n.split(".")[0] in WORLDLY or n in WORLDLY]
    elif place == "adapters":
        bad += [n for n in ours if n.startswith(("buildkit.app", "buildkit.ui", "buildkit.cli"))]
    elif place == "app":
        bad += [n for n in ours if n.startswith(("buildkit.ui", "buildkit.cli"))]
    elif place == "ui":
        bad += [n for n in ours if n.startswith("buildkit.cli")]
    elif place == "image":
        bad += sorted(ours)
    elif place == "cli":
        allowed = ("buildkit.cli", "buildkit.app", "buildkit.ui", "buildkit.errors", "buildkit.__version__")
        bad += [n for n in ours if not (n == "buildkit" or n.startswith(allowed))]
    for room, (users, imports) in CLOSED.items():
        if within(module, (room,)):
            bad += [n for n in ours if imports is not None and not within(n, (room, *imports))]
        elif not within(module, users):
            bad += [n for n in ours if within(n, (room,))]
    return sorted(set(bad))


@pytest.mark.parametrize("module", MODULES)
def test_import_rules(module):
    assert violations(module) == [], f"{module} breaks the layout's import rules"


def test_the_rules_can_fail(tmp_path, monkeypatch):
    """A core module that reached for the engine would be caught."""
    assert "buildkit.adapters.engine.docker_sdk" in internal(imports_of("buildkit.app.build"))
    assert violations("buildkit.app.build") == []
    original = imports_of

    def with_engine(module: str) -> set[str]:
        return original(module) | ({"buildkit.adapters.engine.docker_sdk", "subprocess"} if module == "buildkit.core.targets.plan" else set())

    monkeypatch.setitem(globals(), "imports_of", with_engine)
    assert violations("buildkit.core.targets.plan") == ["buildkit.adapters.engine.docker_sdk", "subprocess"]


def test_the_closed_rooms_are_used_and_their_borders_can_fail(monkeypatch):
    """Each closed room's own paths do import it (the rule is not about nothing), and a view, a neighbouring use case
    or the room itself reaching across the border is caught."""
    assert "buildkit.core.porting.report" in internal(imports_of("buildkit.app.hipify_preflight"))
    assert "buildkit.core.porting.analysis" in internal(imports_of("buildkit.ui.hipify"))
    assert "buildkit.core.upstream.check" in internal(imports_of("buildkit.app.compat_check"))
    original = imports_of
    reached = {
        "buildkit.ui.views": {"buildkit.core.porting.analysis"},  # the general views: the hipify report is ui/hipify's
        "buildkit.ui.compat": {"buildkit.core.upstream.pypi"},  # compat check's view takes the app's records
        "buildkit.app.build": {"buildkit.core.upstream.releases"},
        "buildkit.core.porting.analysis": {"buildkit.core.vendors"},  # porting stands alone: no core/ module
        "buildkit.core.targets.plan": {"buildkit.core.porting.setup_py"},
    }
    monkeypatch.setitem(globals(), "imports_of", lambda module: original(module) | reached.get(module, set()))
    assert {module: violations(module) for module in reached} == {module: sorted(names) for module, names in reached.items()}


def test_core_keeps_a_few_modules_beside_its_rooms_and_every_folder_says_what_it_holds():
    core = PACKAGE / "core"
    modules = sorted(path.stem for path in core.glob("*.py") if path.name != "__init__.py")
    assert len(modules) <= 8, f"core/ has {len(modules)} modules beside its rooms: {modules}; put some in a room"
    folders = [path.parent for path in PACKAGE.rglob("__init__.py")]
    assert [str(folder.relative_to(PACKAGE)) for folder in folders if not ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))] == []


def import_graph() -> dict[str, set[str]]:
    modules = set(MODULES)
    return {module: {name for name in internal(imports_of(module)) if name in modules and name != module} for module in MODULES}


def test_no_import_cycles():
    """Two modules that import each other (adapters/compile_check.py and adapters/hipify.py did, through
    Compiled) cannot be understood, tested or moved apart: a value both need belongs in a module below them."""
    try:
        tuple(graphlib.TopologicalSorter(import_graph()).static_order())
    except graphlib.CycleError as error:
        pytest.fail(f"import cycle: {' -> '.join(error.args[1])}")


def test_a_cycle_is_caught(monkeypatch):
    original = imports_of

    def back_to_cli(module: str) -> set[str]:
        return original(module) | ({"buildkit.cli"} if module == "buildkit.ui.views" else set())

    monkeypatch.setitem(globals(), "imports_of", back_to_cli)
    with pytest.raises(graphlib.CycleError):
        tuple(graphlib.TopologicalSorter(import_graph()).static_order())


def test_test_modules_have_unique_names():
    """tests/ has no packages, so pytest imports each test module by its file name: two of the same name in
    unit/ and integration/ pass when each folder runs alone and break collection of the whole suite (CI's)."""
    names: dict[str, list[str]] = {}
    for path in Path(__file__).resolve().parents[1].rglob("test_*.py"):
        names.setdefault(path.name, []).append(str(path.parent.name))
    assert {name: folders for name, folders in names.items() if len(folders) > 1} == {}


def test_the_cli_starts_without_the_docker_sdk():
    # `plan` and `matrix validate` run on every push: the engine's libraries load only for commands that use them
    code = "import sys, buildkit.cli; print(sorted({'docker', 'requests', 'buildkit.app.build'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
