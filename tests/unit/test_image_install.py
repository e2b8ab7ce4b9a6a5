"""The image-side installer (buildkit/image/install.py), run as builds run it: a script in a fresh Python."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pytest

from buildkit.adapters.bundled import shipped_compat
from testkit.machine_wheels import uv_wheel
from testkit.wheel_index import WheelIndex
from testkit.wheels import build_wheel, torch_double

INSTALL = str(resources.files("buildkit.image").joinpath("install.py"))
# pip and uv as a build runs them: only the index a step names, none of this machine's pip configuration
ISOLATED = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def install(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, INSTALL, *args], capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_check_backend_refuses_the_cpu_torch_of_this_machine_naming_what_it_is():
    import torch

    assert torch.version.cuda is None and torch.version.hip is None  # the test extra's CPU build
    for backend, label in (("cuda", "CUDA 13.0"), ("rocm", "ROCm 13.0")):
        result = install("check-backend", backend, "13.0")
        assert result.returncode == 1
        assert result.stderr.strip() == (f"torch {torch.__version__} is not a {label} build "
                                         "(torch.version.cuda=None, hip=None)")


def test_a_command_it_does_not_know_is_refused_with_its_usage():
    result = install("check-backend", "xpu", "1.0")
    assert result.returncode == 1 and result.stderr.startswith("usage: install.py")


# --- one layer, as its stage installs it: under its own root, laid out as the venv holds it ----------------


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A venv as the image's tools stage has it: pip, and uv from the machine's own package index."""
    folder = tmp_path_factory.mktemp("tools") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    subprocess.run([str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-index",
                    str(uv_wheel(shipped_compat().uv))], check=True, env=ISOLATED)
    return folder


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    wheels = tmp_path_factory.mktemp("wheels")
    demo = build_wheel(wheels, "demo", "1.0", {"demo/__init__.py": "def main():\n    print('demo')\n",
                                               "demo-1.0.dist-info/entry_points.txt": "[console_scripts]\ndemo-tool = demo:main\n"},
                       requires=["uv"])
    torch = torch_double(wheels, "2.14.1", "cu130", "13.0", None, ["sm_90"])
    served = WheelIndex({"idx": [demo, torch, uv_wheel(shipped_compat().uv)]}).start()
    yield served
    served.stop()


def venv_python(venv) -> str:
    return str(venv / "bin" / "python")


def run_layer(venv, folder, index, name, packages, installer):
    plan = folder / f"{name}.json"
    plan.write_text(json.dumps({"name": name, "packages": packages, "index_url": f"{index.url}/idx/", "pre": False,
                                "max_layer_size": 10**9, "installer": installer, "narrowing": None, "trim": None}))
    root = folder / "layers" / name
    result = subprocess.run([venv_python(venv), INSTALL, "layer", str(plan), str(root)], capture_output=True, text=True,
                            timeout=300, env=ISOLATED)
    assert result.returncode == 0, result.stdout + result.stderr
    return root


def prefixed(root, venv) -> Path:
    """The venv's own folder as it lies under a layer's root."""
    return Path(str(root) + str(venv))


@pytest.mark.slow
@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_a_layer_lands_under_its_root_as_the_venv_would_hold_it_and_nowhere_else(venv, index, tmp_path, installer):
    root = run_layer(venv, tmp_path, index, "dependencies", ["demo==1.0"], installer)
    site = prefixed(root, venv) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
    assert (site / "demo" / "__init__.py").is_file() and (site / "demo-1.0.dist-info" / "RECORD").is_file()
    assert list((site / "demo" / "__pycache__").glob("__init__.cpython-*.pyc"))  # bytecode compiled at build time
    script = prefixed(root, venv) / "bin" / "demo-tool"
    assert script.read_text().splitlines()[0].startswith(f"#!{venv}/bin/python")  # runs the venv's Python, not the root's
    assert not (prefixed(root, venv) / ".lock").exists()  # uv's lock on what it installed into is not copied in
    own = venv.relative_to("/").parts
    assert {path.relative_to(root).parts[: len(own)] for path in root.rglob("*") if path.is_file()} == {own}  # nothing outside it
    assert not list(Path(venv).rglob("demo-1.0.dist-info"))  # the venv itself is untouched


@pytest.mark.slow
def test_torch_s_layer_writes_its_constraint_beside_it(venv, index, tmp_path):
    root = run_layer(venv, tmp_path, index, "torch", ["torch==2.14.1+cu130"], "uv")
    assert (prefixed(root, venv) / "torch-constraint.txt").read_text() == "torch==2.14.1+cu130\n"


@pytest.mark.slow
def test_a_layer_with_nothing_to_install_is_an_empty_folder(venv, index, tmp_path):
    root = run_layer(venv, tmp_path, index, "dependencies", [], "uv")
    assert root.is_dir() and not list(root.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_resolve_leaves_the_venvs_own_distributions_as_they_are(venv, index, tmp_path, installer):
    """demo requires uv, which the venv holds: no layer installs a second copy over it."""
    plan = tmp_path / "torch-install.json"
    plan.write_text(json.dumps({
        "index_url": f"{index.url}/idx/", "pre": False, "requirements": ["torch==2.14.1+cu130", "demo==1.0"],
        "layers": [{"name": "dependencies", "packages": []}, {"name": "torch", "packages": ["torch"]}],
        "max_layer_size": 10**9, "installer": installer, "narrowing": None, "trim": None, "backend": "cuda", "backend_version": "13.0",
    }))
    result = subprocess.run([venv_python(venv), INSTALL, "resolve", str(plan), str(tmp_path / "plan")], capture_output=True,
                            text=True, timeout=300, env=ISOLATED)
    assert result.returncode == 0, result.stdout + result.stderr
    shares = {name: json.loads((tmp_path / "plan" / f"{name}.json").read_text())["packages"] for name in ("dependencies", "torch")}
    assert shares == {"dependencies": ["demo==1.0"], "torch": ["torch==2.14.1+cu130"]}
