"""Fixtures on the real engine: dockerd, BuildKit through the docker CLI, the local base image, local wheels.

Without an engine these tests skip on a laptop; under CI (BUILDKIT_REQUIRE_DOCKER=1) they fail instead.
"""

from __future__ import annotations

import os
import textwrap
import uuid
from pathlib import Path

import docker
import pytest

from buildkit.adapters import engine
from buildkit.errors import UserError
from support.runner import INDEX_PASSWORD, INDEX_USER
from support.wheel_index import WheelIndex
from support.wheels import companion_double, torch_double

BASE_IMAGE = "python:3.11-slim-bookworm"  # what the default runtime template uses for Python 3.11
REQUIRE = os.environ.get("BUILDKIT_REQUIRE_DOCKER") == "1"


def unavailable(reason: str):
    if REQUIRE:
        pytest.fail(f"{reason} (BUILDKIT_REQUIRE_DOCKER=1: engine tests must run here)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def client() -> docker.DockerClient:
    try:
        return engine.connect()
    except UserError as error:
        unavailable(str(error))


@pytest.fixture(scope="session")
def buildkit_cli(client) -> engine.BuildkitCli:
    try:
        return engine.detect_buildkit()
    except UserError as error:
        unavailable(str(error))


@pytest.fixture(scope="session")
def base_image(client) -> str:
    try:
        client.images.get(BASE_IMAGE)
    except docker.errors.ImageNotFound:
        unavailable(f"local base image {BASE_IMAGE} is missing: run `bash .ci/base-image.sh` (no test pulls from Docker Hub)")
    return BASE_IMAGE


@pytest.fixture(scope="session")
def docker_env(buildkit_cli) -> dict[str, str]:
    """Environment for `buildkit` subprocesses: the BuildKit-capable CLI chosen once."""
    return {**os.environ, engine.DOCKER_ENV: buildkit_cli.docker}


@pytest.fixture(scope="session")
def repository() -> str:
    return f"buildkit-test-{uuid.uuid4().hex[:8]}/pytorch"


@pytest.fixture(scope="session")
def cleanup_images(client, repository):
    """Removes, at the end, every image tagged into this session's repository and the untagged buildkit
    images that rebuilds left behind."""
    yield
    for image in client.images.list(filters={"label": "dev.buildkit.target"}):
        ours = [tag for tag in image.tags if tag.rpartition(":")[0].endswith(repository)]
        if ours or not image.tags:
            for reference in ours or [image.id]:
                try:
                    client.images.remove(reference, force=True)
                except docker.errors.APIError:
                    pass


@pytest.fixture(scope="session")
def double_index(tmp_path_factory):
    """TEST DOUBLES: torch/torchvision stand-ins for CUDA 13.0 and ROCm 7.2 (no ROCm wheel exists here).

    /simple/ is the pip.conf index and needs basic auth; it holds nothing, so nothing reaches PyPI.
    ROCm 7.2 has no torch 2.13.0: that target must fail while its CUDA twin builds.
    """
    folder = tmp_path_factory.mktemp("doubles")
    cuda = [
        torch_double(folder / "cu130", "2.14.1", "cu130", "13.0", None, ["sm_75", "sm_80", "sm_90"]),
        torch_double(folder / "cu130", "2.13.0", "cu130", "13.0", None, ["sm_75", "sm_80", "sm_90"]),
        companion_double(folder / "cu130", "torchvision", "0.29.1", "cu130", "2.14.1"),
        companion_double(folder / "cu130", "torchvision", "0.28.0", "cu130", "2.13.0"),
    ]
    rocm = [
        torch_double(folder / "rocm", "2.14.1", "rocm7.2", None, "7.2.26015", ["gfx90a", "gfx942"]),
        companion_double(folder / "rocm", "torchvision", "0.29.1", "rocm7.2", "2.14.1"),
    ]
    index = WheelIndex({"cu130": cuda, "rocm7.2": rocm, "simple": []}, auth={"simple": (INDEX_USER, INDEX_PASSWORD)}).start()
    yield index
    index.stop()


@pytest.fixture(scope="session")
def pair_setup(tmp_path_factory, double_index, repository):
    """A team matrix for the test pair (2.14.1) and a second pair (2.13.0) whose ROCm side cannot build."""
    folder = tmp_path_factory.mktemp("pair")
    matrix = folder / "matrix.toml"
    matrix.write_text(textwrap.dedent(f"""
        extends = "default"
        registry = "localhost:5000"
        repository = "{repository}"
        wheel_index = "{double_index.url}"
        include = [{{ torch = "2.1[34].*", python = "3.11", flavor = "runtime" }}]

        [[torch]]
        version = "2.14.1"
        cuda = ["13.0"]
        rocm = ["7.2"]

        [[torch]]
        version = "2.13.0"
        cuda = ["13.0"]
        rocm = ["7.2"]
    """))
    pip_conf = folder / "pip.conf"
    url = double_index.url.replace("http://", f"http://{INDEX_USER}:{INDEX_PASSWORD}@")
    pip_conf.write_text(f"[global]\nindex-url = {url}/simple/\n")
    return matrix, pip_conf
