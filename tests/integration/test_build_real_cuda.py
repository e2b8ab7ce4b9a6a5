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
    (tmp_path / "Dockerfile").write_text(f"FROM {target['tags'][0]}\nUSER root\n"
                                         f"RUN apt-get purge -y --auto-remove g++ gcc\nUSER {user}\n")
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


def test_real_image_is_lean(real_cuda_build):
    target = real_cuda_build.report["targets"][0]
    assert target["efficiency"] <= 1.02, target


def test_the_image_history_names_each_layer_it_holds(real_cuda_build, client):
    """torch's layers by name, in the plan's order, right after the shared stage's own steps (BuildKit 0.13 once
    gave the shared stage the history of a stage written after it on the same base: the report then named every
    layer's size after the step below it)."""
    target = real_cuda_build.report["targets"][0]
    plan = json.loads((real_cuda_build.out / "contexts" / target["id"] / "buildkit" / "torch-install.json").read_text())
    names = [layer["layer"] for layer in target["layer_sizes"]]
    layers = [layer["name"] for layer in plan["layers"]]
    first = names.index(layers[0])
    assert names[first:first + len(layers)] == layers
    assert "apt-get update" in names[first - 2] and "$3 == 1000" in names[first - 1]  # the OS packages, the user
    sizes = dict(zip(names, (layer["bytes"] for layer in target["layer_sizes"])))
    assert sizes["torch"] == max(sizes.values())  # the largest layer is torch's own (1.2 GB here)
    steps = [entry["CreatedBy"] for entry in client.api.history(target["image_id"])]
    assert any("apt-get install" in step for step in steps) and any(step.startswith("COPY /layers/torch/ /") for step in steps)
