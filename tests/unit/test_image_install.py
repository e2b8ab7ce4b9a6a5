"""The image-side installer (buildkit/image/install.py), run as builds run it: a script in a fresh Python."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import time
from importlib import resources
from pathlib import Path

import pytest

from buildkit.adapters.files.bundled import shipped_compat
from buildkit.image.install import LAYER_EPOCH
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
        assert result.stderr.strip() == (f"torch {torch.__version__} is not a {label} build (torch.version.cuda=None, hip=None)")


def test_a_command_it_does_not_know_is_refused_with_its_usage():
    result = install("check-backend", "xpu", "1.0")
    assert result.returncode == 1 and result.stderr.startswith("usage: install.py")


# --- one layer, as its stage installs it: under its own root, laid out as the venv holds it ----------------


PYTHON = f"python{sys.version_info.major}.{sys.version_info.minor}"


def make_venv(folder: Path, neutral_site: bool) -> Path:
    """A venv as the image's tools stage has it: pip, and uv from the machine's own package index; with
    `neutral_site`, its site-packages moved to lib/python/site-packages and linked, as the templates make it."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    if neutral_site:
        (folder / "lib" / "python").mkdir()
        (folder / "lib" / PYTHON / "site-packages").rename(folder / "lib" / "python" / "site-packages")
        (folder / "lib" / PYTHON / "site-packages").symlink_to(folder / "lib" / "python" / "site-packages")
    subprocess.run(
        [str(folder / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-index", str(uv_wheel(shipped_compat().uv))], check=True, env=ISOLATED
    )
    return folder


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """A venv without the Python-neutral site-packages folder (a team template's)."""
    return make_venv(tmp_path_factory.mktemp("tools") / "venv", neutral_site=False)


@pytest.fixture(scope="module")
def neutral_venv(tmp_path_factory):
    return make_venv(tmp_path_factory.mktemp("neutral-tools") / "venv", neutral_site=True)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    wheels = tmp_path_factory.mktemp("wheels")
    demo = build_wheel(
        wheels,
        "demo",
        "1.0",
        {"demo/__init__.py": "def main():\n    print('demo')\n", "demo-1.0.dist-info/entry_points.txt": "[console_scripts]\ndemo-tool = demo:main\n"},
        requires=["uv"],
    )
    torch = torch_double(wheels, "2.14.1", "cu130", "13.0", None, ["sm_90"])
    # a library wheel built for any Python, with a module, as the nvidia-* wheels are; one built for this Python
    library = build_wheel(
        wheels, "nvidia-demo-lib", "1.0", {"nvidia/demo/__init__.py": "", "nvidia/demo/lib/libdemo.so": b"\x7fELF"}, tag="py3-none-manylinux_2_17_x86_64"
    )
    extension = build_wheel(
        wheels,
        "nvidia-demo-ext",
        "1.0",
        {"nvidia_demo_ext/__init__.py": "VALUE = 1\n"},
        tag=f"cp{sys.version_info.major}{sys.version_info.minor}-cp{sys.version_info.major}{sys.version_info.minor}-manylinux_2_17_x86_64",
    )
    # TEST DOUBLES of triton's wheel for one Python, as two Python builds of one release differ (triton 3.8.0's
    # cp311 and cp313 wheels: only their shared objects and WHEEL): the same sources, header and tool, another .so
    builds = [
        build_wheel(
            wheels / f"build{number}",
            "triton-demo",
            "1.0",
            {
                "triton_demo/__init__.py": "from .language import VALUE\n",
                "triton_demo/language/__init__.py": "VALUE = 7\n",
                "triton_demo/include/demo.h": "#define DEMO 1\n",
                "triton_demo/bin/ptxas-demo": b"\x7fELF tool",
                "triton_demo/_C/libtriton_demo.so": b"\x7fELF built for " + bytes([number]),
            },
            tag=f"cp{sys.version_info.major}{sys.version_info.minor}-cp{sys.version_info.major}{sys.version_info.minor}-manylinux_2_17_x86_64",
        )
        for number in (1, 2)
    ]
    served = WheelIndex(
        {"idx": [demo, torch, library, extension, builds[0], uv_wheel(shipped_compat().uv)], "other-build": [builds[1], uv_wheel(shipped_compat().uv)]}
    ).start()
    yield served
    served.stop()


def venv_python(venv) -> str:
    return str(venv / "bin" / "python")


def run_layer(venv, folder, index, name, packages, installer, python_neutral=False, output=None, any_python="", channel="idx"):
    plan = folder / f"{name}.json"
    folder.mkdir(parents=True, exist_ok=True)
    plan.write_text(
        json.dumps(
            {
                "name": name,
                "packages": packages,
                "index_url": f"{index.url}/{channel}/",
                "pre": False,
                "max_layer_size": 10**9,
                "installer": installer,
                "narrowing": None,
                "trim": None,
                "python_neutral": python_neutral,
                "any_python": any_python,
            }
        )
    )
    root = folder / "layers" / name
    result = subprocess.run([venv_python(venv), INSTALL, "layer", str(plan), str(root)], capture_output=True, text=True, timeout=300, env=ISOLATED)
    assert result.returncode == 0, result.stdout + result.stderr
    if output is not None:
        output.append(result.stdout)
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
    plan.write_text(
        json.dumps(
            {
                "index_url": f"{index.url}/idx/",
                "pre": False,
                "requirements": ["torch==2.14.1+cu130", "demo==1.0"],
                "layers": [
                    {"name": "dependencies", "packages": [], "python_neutral": False, "any_python": False},
                    {"name": "torch", "packages": ["torch"], "python_neutral": False, "any_python": False},
                ],
                "max_layer_size": 10**9,
                "installer": installer,
                "narrowing": None,
                "trim": None,
                "backend": "cuda",
                "backend_version": "13.0",
            }
        )
    )
    result = subprocess.run(
        [venv_python(venv), INSTALL, "resolve", str(plan), str(tmp_path / "plan")], capture_output=True, text=True, timeout=300, env=ISOLATED
    )
    assert result.returncode == 0, result.stdout + result.stderr
    shares = {name: json.loads((tmp_path / "plan" / f"{name}.json").read_text())["packages"] for name in ("dependencies", "torch")}
    assert shares == {"dependencies": ["demo==1.0"], "torch": ["torch==2.14.1+cu130"]}


# --- reproducible layers, the same under every Python where their wheels allow ----------------------------


def tree(root: Path) -> list[tuple]:
    """Everything a layer's tar records of its files: path, kind, mode, mtime, content."""
    entries = []
    for path in sorted(root.rglob("*")):
        status = path.lstat()
        content = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else ""
        entries.append((str(path.relative_to(root)), stat.S_IFMT(status.st_mode), stat.S_IMODE(status.st_mode), status.st_mtime, content))
    return entries


@pytest.mark.parametrize("installer", ["uv", "pip"])
def test_a_layer_built_twice_from_the_same_wheels_is_the_same_byte_for_byte(neutral_venv, index, tmp_path, installer):
    """Two builds a second apart (another day, another builder): the same files, modes and timestamps, bytecode
    included, so BuildKit writes the same layer blob. Nothing records the download folder or the wheel file's time."""
    first = run_layer(neutral_venv, tmp_path / "first", index, "dependencies", ["demo==1.0", "nvidia-demo-lib==1.0"], installer)
    time.sleep(1.1)
    second = run_layer(neutral_venv, tmp_path / "second", index, "dependencies", ["demo==1.0", "nvidia-demo-lib==1.0"], installer)
    assert tree(first) == tree(second)
    assert {entry[3] for entry in tree(first)} == {LAYER_EPOCH}
    site = prefixed(first, neutral_venv) / "lib" / "python" / "site-packages"
    assert not list(site.glob("*.dist-info/direct_url.json")) and not list(site.glob("*.dist-info/uv_cache.json"))
    record = (site / "demo-1.0.dist-info" / "RECORD").read_text()
    assert "direct_url.json" not in record and f"demo/__pycache__/__init__.{sys.implementation.cache_tag}.pyc,sha256=" in record


def test_in_a_venv_with_the_neutral_folder_a_layer_names_no_python_version(neutral_venv, index, tmp_path):
    root = run_layer(neutral_venv, tmp_path, index, "dependencies", ["demo==1.0"], "uv")
    venv = prefixed(root, neutral_venv)
    assert (venv / "lib" / "python" / "site-packages" / "demo" / "__init__.py").is_file()
    assert not (venv / "lib" / PYTHON).exists()  # the image's venv has its link there
    assert (venv / "bin" / "demo-tool").read_text().startswith(f"#!{neutral_venv}/bin/python")


def test_a_python_neutral_layer_of_wheels_for_any_python_holds_no_bytecode(neutral_venv, index, tmp_path):
    said = []
    root = run_layer(neutral_venv, tmp_path, index, "nvidia-libraries", ["nvidia-demo-lib==1.0"], "uv", python_neutral=True, output=said)
    site = prefixed(root, neutral_venv) / "lib" / "python" / "site-packages"
    assert (site / "nvidia" / "demo" / "lib" / "libdemo.so").is_file()
    assert not list(root.rglob("__pycache__")) and not list(root.rglob("*.pyc"))
    assert "installed without bytecode" in said[0]


def test_a_wheel_built_for_one_python_makes_its_layer_that_pythons_own(neutral_venv, index, tmp_path):
    said = []
    root = run_layer(
        neutral_venv, tmp_path, index, "nvidia-libraries", ["nvidia-demo-lib==1.0", "nvidia-demo-ext==1.0"], "uv", python_neutral=True, output=said
    )
    assert list(root.rglob(f"__init__.{sys.implementation.cache_tag}.pyc"))  # compiled: imports stay fast
    assert "built for one Python: the layer is this Python's own" in said[0] and "nvidia_demo_ext-1.0-cp" in said[0]


def test_a_layer_built_for_one_python_gives_its_files_no_python_changes_a_layer_of_their_own(neutral_venv, index, tmp_path):
    """triton's layer: its sources, headers and tools go to triton-any-python without bytecode, the same in every
    Python's image (two builds whose shared objects differ, as two Pythons' wheels of one release do); the shared
    objects, the metadata and the sources' bytecode stay in the layer, which is that Python's own."""
    said = []
    layers = {}
    for channel in ("idx", "other-build"):
        root = run_layer(
            neutral_venv, tmp_path / channel, index, "triton", ["triton-demo==1.0"], "uv", output=said, any_python="triton-any-python", channel=channel
        )
        layers[channel] = (root, root.parent / "triton-any-python")
    (root, share), (other_root, other_share) = layers["idx"], layers["other-build"]
    assert tree(share) == tree(other_share) and {entry[3] for entry in tree(share)} == {LAYER_EPOCH}
    assert tree(root) != tree(other_root)
    site, shared_site = (prefixed(folder, neutral_venv) / "lib" / "python" / "site-packages" for folder in (root, share))
    moved = {str(path.relative_to(shared_site)) for path in shared_site.rglob("*") if path.is_file()}
    assert moved == {"triton_demo/__init__.py", "triton_demo/language/__init__.py", "triton_demo/include/demo.h", "triton_demo/bin/ptxas-demo"}
    kept = {str(path.relative_to(site)) for path in site.rglob("*") if path.is_file()}
    assert "triton_demo/_C/libtriton_demo.so" in kept and "triton_demo-1.0.dist-info/RECORD" in kept
    assert {name for name in kept if name.endswith(".pyc")} == {
        f"triton_demo/__pycache__/__init__.{sys.implementation.cache_tag}.pyc",
        f"triton_demo/language/__pycache__/__init__.{sys.implementation.cache_tag}.pyc",
    }
    assert "4 files no Python build changes moved to layer triton-any-python" in said[0]
    # the two layers copied into one venv, as the image holds them: the bytecode matches its moved sources, so
    # importing reads it (a stale pyc would be compiled again, on every start of a non-root user)
    merged = tmp_path / "merged"
    for folder in (share, root):
        subprocess.run(["cp", "-a", f"{prefixed(folder, neutral_venv)}/.", str(merged)], check=True)
    probe = (
        "import importlib.util, sys, triton_demo.language as language;print(language.VALUE, type(language.__spec__.loader).__name__, language.__spec__.cached)"
    )
    result = subprocess.run(
        [sys.executable, "-B", "-c", probe],
        env={**ISOLATED, "PYTHONPATH": str(merged / "lib" / "python" / "site-packages")},
        capture_output=True,
        text=True,
        check=True,
    )
    value, loader, cached = result.stdout.split()
    assert (value, loader) == ("7", "SourceFileLoader") and Path(cached).is_file()
    source = merged / "lib" / "python" / "site-packages" / "triton_demo" / "language" / "__init__.py"
    header = Path(cached).read_bytes()[8:16]  # a timestamp pyc: the source's mtime and size it was compiled from
    assert int.from_bytes(header[:4], "little") == int(source.stat().st_mtime) and int.from_bytes(header[4:], "little") == source.stat().st_size
