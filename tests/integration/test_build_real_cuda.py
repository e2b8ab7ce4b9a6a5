"""A real CUDA runtime image from the default templates: torch 2.14.1 (CUDA 13.0) for Python 3.11.

The wheels are the ones lying on this machine (found through its pip configuration, served on 127.0.0.1);
what they do not cover comes from the machine's default index, reached with its CA bundle as a secret.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from support.machine_wheels import local_wheels
from support.runner import run_buildkit
from support.wheel_index import WheelIndex

pytestmark = pytest.mark.engine
TARGET = "2.14.1-cuda13.0-py3.11-runtime"


def machine_ca_bundle() -> Path | None:
    for name in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        if os.environ.get(name) and Path(os.environ[name]).is_file():
            return Path(os.environ[name])
    return None


@pytest.fixture(scope="module")
def real_wheels():
    wheels = local_wheels()
    if not any(w.name.startswith("torch-2.14.1-cp311") for w in wheels):
        pytest.fail("this machine's pip configuration names no torch 2.14.1 cp311 wheel")
    index = WheelIndex({"cu130": wheels, "all": wheels}, flat={"all"}).start()
    yield index
    index.stop()


@pytest.fixture(scope="module")
def cuda_image(real_wheels, base_image, docker_env, tmp_path_factory, repository, cleanup_images):
    folder = tmp_path_factory.mktemp("real-cuda")
    matrix = folder / "matrix.toml"
    matrix.write_text(textwrap.dedent(f"""
        extends = "default"
        registry = "localhost:5000"
        repository = "{repository}"
        wheel_index = "{real_wheels.url}"
        include = [{{ id = "{TARGET}" }}]
    """))
    # find-links pages are read before the index, so pip takes these wheels instead of downloading them
    pip_conf = folder / "pip.conf"
    pip_conf.write_text(f"[global]\nfind-links = {real_wheels.url}/all/\n")
    arguments = ["build", "--matrix", matrix, "--network", "host", "--pip-conf", pip_conf, "--out", folder / "out"]
    if machine_ca_bundle():
        arguments += ["--ca-bundle", machine_ca_bundle()]
    result = run_buildkit(*arguments, env=docker_env, timeout=3000)
    report = json.loads((folder / "out" / "report.json").read_text())
    return result, report["targets"][0]


def test_real_cuda_image_builds(cuda_image):
    result, target = cuda_image
    assert result.returncode == 0, result.stderr[-3000:] + "\n".join(target["log_tail"])
    assert target["status"] == "built"


def test_torch_in_the_image_is_the_cuda_13_0_build(cuda_image, client):
    _, target = cuda_image
    script = "import torch; print(torch.__version__, torch.version.cuda, torch.version.hip)"
    output = client.containers.run(target["image_id"], ["python", "-c", script], remove=True).decode().split()
    assert output[1:] == ["13.0", "None"]
    assert output[0].startswith("2.14.1")


def test_real_image_is_lean(cuda_image):
    _, target = cuda_image
    assert target["efficiency"] <= 1.02, target
