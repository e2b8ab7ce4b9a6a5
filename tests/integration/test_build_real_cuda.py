"""A real CUDA runtime image from the default templates: torch 2.14.1 (CUDA 13.0) for Python 3.11.

The wheels are the ones lying on this machine (found through its pip configuration, served on 127.0.0.1);
what they do not cover comes from the machine's default index, reached with its CA bundle as a secret.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from testkit.runner import run_buildkit

pytestmark = pytest.mark.engine


def test_real_cuda_image_builds_and_passes_its_smoke_test(real_cuda_build):
    target = real_cuda_build.report["targets"][0]
    assert real_cuda_build.result.returncode == 0, real_cuda_build.result.stderr[-3000:] + "\n".join(target["log_tail"])
    assert target["status"] == "built"
    assert target["smoke"]["passed"] and target["smoke"]["kernels"] == "skipped (no NVIDIA GPU on this host)"
    checks = {check["name"]: check for check in target["smoke"]["checks"]}
    # inductor really compiled and ran C++ in the image: the toolchain the runtime template installs works
    assert checks["torch.compile (CPU)"]["passed"] and "skipped" not in checks["torch.compile (CPU)"]["detail"], checks


def test_an_image_without_a_compiler_fails_its_smoke_test_naming_the_compiler(real_cuda_build, docker_env, tmp_path, client):
    """What a slim image that dropped the toolchain looks like: `buildkit test` fails it, saying that inductor
    found no g++, the error a user's first torch.compile would hit."""
    target = real_cuda_build.report["targets"][0]
    slim = f"{target['tags'][0].rsplit(':', 1)[0]}:no-compiler"
    user = client.images.get(target["image_id"]).attrs["Config"]["User"]
    (tmp_path / "Dockerfile").write_text(f"FROM {target['tags'][0]}\nUSER root\nRUN apt-get purge -y --auto-remove g++ gcc\nUSER {user}\n")
    built = subprocess.run([docker_env["BUILDKIT_DOCKER"], "build", "-t", slim, str(tmp_path)], env=docker_env, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-2000:]
    try:
        tested = run_buildkit("test", slim, "--json", tmp_path / "verdicts.json", env=docker_env)
        assert tested.returncode == 1, tested.stdout + tested.stderr
        (verdict,) = json.loads((tmp_path / "verdicts.json").read_text())
        checks = {check["name"]: check for check in verdict["checks"]}
        assert not verdict["passed"] and not checks["torch.compile (CPU)"]["passed"]
        assert "InvalidCxxCompiler: no working C++ compiler (g++)" in checks["torch.compile (CPU)"]["detail"], checks
    finally:
        client.images.remove(slim, force=True)


def test_torch_in_the_image_is_the_cuda_13_0_build(real_cuda_build, client):
    target = real_cuda_build.report["targets"][0]
    script = "import torch; print(torch.__version__, torch.version.cuda, torch.version.hip)"
    output = client.containers.run(target["image_id"], ["python", "-c", script], remove=True).decode().split()
    assert output[1:] == ["13.0", "None"]
    assert output[0].startswith("2.14.1")


def test_the_image_history_names_each_layer_it_holds(real_cuda_build, client):
    """Assembled on its official Python base: torch's layers that are the same under every Python first, by name,
    then the shared stage's files as one layer (the base, the venv, the OS packages, the user), then torch's
    other layers in the plan's order (BuildKit 0.13 once gave a stage the history of a stage written after it on
    the same base: the report then named every layer's size after the step below it)."""
    target = real_cuda_build.report["targets"][0]
    plan = json.loads((real_cuda_build.out / "contexts" / target["id"] / "buildkit" / "torch-install.json").read_text())
    names = [layer["layer"] for layer in target["layer_sizes"]]
    below = [layer["name"] for layer in plan["layers"] if layer["python_neutral"] and not layer["name"].startswith("device-")]
    below += [f"{layer['name']}-any-python" for layer in plan["layers"] if layer["any_python"]]
    above = [layer["name"] for layer in plan["layers"] if layer["name"] not in below]
    assert below[-1] == "triton-any-python" and above[0] == "triton"
    assert names[: len(below)] == below
    assert names[len(below)].startswith("COPY / /")  # the shared stage's files
    assert names[len(below) + 1 : len(below) + 1 + len(above)] == above
    sizes = dict(zip(names, (layer["bytes"] for layer in target["layer_sizes"])))
    assert sizes["torch"] == max(sizes.values())  # the largest layer is torch's own (1.2 GB here)
    assert sizes["triton-any-python"] > 100 * 2**20  # triton's tools and headers (392 MB in 3.8.0's wheel) under every Python
    steps = [entry["CreatedBy"] for entry in client.api.history(target["image_id"])]
    assert any(step.startswith("COPY / /") for step in steps) and any(step.startswith("COPY /layers/torch/ /") for step in steps)


def test_the_assembled_image_runs_as_one_from_its_base_would(real_cuda_build, client):
    """An image from scratch inherits no configuration: the base's PATH and LANG are written out, the venv's
    Python comes first, the OS packages the shared stage installed are there for dpkg, and triton's two layers
    are one package again."""
    target = real_cuda_build.report["targets"][0]
    config = client.images.get(target["image_id"]).attrs["Config"]
    env = dict(item.split("=", 1) for item in config["Env"])
    assert env["PATH"] == "/opt/venv/bin:/usr/local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    assert env["LANG"] == "C.UTF-8" and env["VIRTUAL_ENV"] == "/opt/venv" and config["User"] == "1000"
    script = (
        "import shutil, subprocess, sys, triton, importlib.metadata as m;"
        "print(sys.executable, shutil.which('g++'), m.version('triton'), len(m.files('triton')),"
        " subprocess.run(['dpkg-query', '-W', '-f', '${Status}', 'g++'], capture_output=True, text=True).stdout.replace(' ', '-'))"
    )
    output = client.containers.run(target["image_id"], ["python", "-c", script], remove=True).decode().split()
    assert output[0] == "/opt/venv/bin/python" and output[1].endswith("/g++") and output[2].startswith("3.")
    assert int(output[3]) > 400 and output[4] == "install-ok-installed"
