"""Fixtures on the real engine: dockerd, BuildKit through the docker CLI, the local base image, local wheels.

Without an engine these tests skip on a laptop; under CI (BUILDKIT_REQUIRE_DOCKER=1) they fail instead.
"""

from __future__ import annotations

import calendar
import contextlib
import os
import time

import docker
import pytest

from buildkit.adapters.engine import buildx, docker_sdk
from buildkit.adapters.engine.proven import CACHE_ENV
from buildkit.adapters.files.bundled import shipped_compat
from buildkit.errors import UserError
from testkit.builds import (
    Build,
    build,
    machine_ca_bundle,
    machine_pip_conf,
    pair_doubles,
    team_matrix,
)
from testkit.machine_wheels import cuda_index, uv_wheel
from testkit.runner import INDEX_PASSWORD, INDEX_USER
from testkit.session import SESSION
from testkit.wheel_index import WheelIndex
from testkit.wheels import build_wheel

BASE_IMAGE = "python:3.11-slim-bookworm"  # what the default runtime template uses for Python 3.11
REQUIRE = os.environ.get("BUILDKIT_REQUIRE_DOCKER") == "1"
SESSION_START = time.time()


def unavailable(reason: str):
    if REQUIRE:
        pytest.fail(f"{reason} (BUILDKIT_REQUIRE_DOCKER=1: engine tests must run here)")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def client() -> docker.DockerClient:
    try:
        return docker_sdk.connect()
    except UserError as error:
        unavailable(str(error))


@pytest.fixture(scope="session")
def buildkit_cli(client) -> buildx.Builder:
    try:
        return buildx.find_builder()
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
def docker_env(buildkit_cli, tmp_path_factory) -> dict[str, str]:
    """Environment for `buildkit` subprocesses: the BuildKit-capable CLI chosen once, and a cache of proven
    images of this session's own (an image an earlier session proved is proved again here)."""
    return {**os.environ, buildx.DOCKER_ENV: buildkit_cli.docker, CACHE_ENV: str(tmp_path_factory.mktemp("buildkit-cache"))}


@pytest.fixture(scope="session")
def repository() -> str:
    return f"buildkit-test-{SESSION}/pytorch"


@pytest.fixture(scope="session")
def cleanup_images(client):
    """Removes, at the end, the buildkit-labelled images of this test session: those tagged into one of its
    repositories (they carry its token), and untagged ones created since it started (a failed smoke test
    leaves its image untagged). Another session sharing the engine keeps its images."""
    yield
    for image in client.images.list(all=True, filters={"label": "dev.buildkit.target"}):
        created = calendar.timegm(time.strptime(image.attrs["Created"][:19], "%Y-%m-%dT%H:%M:%S"))
        if any(SESSION in tag for tag in image.tags) or (not image.tags and created >= SESSION_START - 5):
            for reference in image.tags or [image.id]:
                with contextlib.suppress(docker.errors.APIError):
                    client.images.remove(reference, force=True)


@pytest.fixture(scope="session")
def double_index(tmp_path_factory):
    """TEST DOUBLES: torch/torchvision stand-ins for CUDA 13.0 and ROCm 7.2 (no ROCm wheel exists here).

    /simple/ is the pip.conf index and needs basic auth; it holds only the team's own package, so nothing
    reaches PyPI.
    ROCm 7.2 has no torch 2.13.0: that target must fail while its CUDA twin builds.
    """
    folder = tmp_path_factory.mktemp("doubles")
    doubles = pair_doubles(folder, {"2.14.1": "0.29.1", "2.13.0": "0.28.0"}, {"2.14.1": "0.29.1"})
    # the team's private index (pip.conf, basic auth): the stack's own package comes from there
    # uv, which the test pair installs with, comes from there too, as from a team's mirror of PyPI
    private = [build_wheel(folder / "private", "team-extra", "1.0", {"team_extra/__init__.py": ""}), uv_wheel(shipped_compat().uv)]
    index = WheelIndex({**doubles, "simple": private}, auth={"simple": (INDEX_USER, INDEX_PASSWORD)}).start()
    yield index
    index.stop()


@pytest.fixture(scope="session")
def pair_setup(tmp_path_factory, double_index, repository):
    """A team matrix for the test pair (2.14.1) and a second pair (2.13.0) whose ROCm side cannot build."""
    folder = tmp_path_factory.mktemp("pair")
    matrix = team_matrix(
        folder,
        double_index.url,
        repository,
        '[{ torch = "2.1[34].*", python = "3.11", flavor = "runtime" }]',
        'packages = ["team-extra==1.0"]\n[[torch]]\nversion = "2.14.1"\ncuda = ["13.0"]\nrocm = ["7.2"]\n'
        'pair = { cuda = "13.0", rocm = "7.2" }\n\n[[torch]]\nversion = "2.13.0"\ncuda = ["13.0"]\nrocm = ["7.2"]\n',
        installer="uv",
    )
    pip_conf = folder / "pip.conf"
    url = double_index.url.replace("http://", f"http://{INDEX_USER}:{INDEX_PASSWORD}@")
    pip_conf.write_text(f"[global]\nindex-url = {url}/simple/\n")
    return matrix, pip_conf


@pytest.fixture(scope="session")
def pair_build(pair_setup, base_image, docker_env, tmp_path_factory, cleanup_images) -> Build:
    """The test pairs built once, two at a time."""
    matrix, pip_conf = pair_setup
    return build(matrix, pip_conf, tmp_path_factory.mktemp("build"), docker_env, "-j", "2", "--efficiency")


@pytest.fixture(scope="session")
def machine_index():
    """This machine's own wheels (found through its pip configuration) on 127.0.0.1: /cu130/ as a
    simple index for the torch install, /all/ as find-links, which pip reads before any index."""
    index = cuda_index()
    if index is None:
        pytest.fail("this machine's pip configuration names no torch 2.14.1 and torchvision 0.29.1 cp311 wheels")
    index.start()
    yield index
    index.stop()


REAL_CUDA = "2.14.1-cuda13.0-py3.11-runtime"


@pytest.fixture(scope="session")
def real_cuda_build(machine_index, base_image, docker_env, tmp_path_factory, repository, cleanup_images) -> Build:
    """The real CUDA 13.0 runtime image from the default templates and this machine's wheels. Built without
    `--efficiency`: reading its 6 GB back costs CI close to a minute, and the claim is a size figure, measured on
    this image by bench.side_by_side and recorded in docs/benchmarks.md (1.0000). CI measures the test pair's
    images, built from the same templates (test_build_pair); their torch doubles have no nvidia-* libraries, so
    those layers' leanness is the benchmark's to show."""
    folder = tmp_path_factory.mktemp("real-cuda")
    # its own repository: the test pair has a target of the same id, and each must keep its tags
    matrix = team_matrix(folder, machine_index.url, f"{repository}-real", f'[{{ id = "{REAL_CUDA}" }}]', compile=True, installer="uv")
    extra = ["--ca-bundle", machine_ca_bundle()] if machine_ca_bundle() else []
    return build(matrix, machine_pip_conf(folder, machine_index), folder / "out", docker_env, *extra)


ROCM_TOOLCHAIN = "buildkit-ci/rocm-toolchain:debian-sid"  # .ci/rocm-toolchain-image.sh's default tag


@pytest.fixture(scope="session")
def rocm_toolchain(client) -> str:
    """The local ROCm toolchain image (Debian's HIP, hipBLASLt's headers, python3): hipify's gfx942 compile
    check runs in it, and it stands in for the ROCm devel image in the source flavor's build test."""
    try:
        client.images.get(ROCM_TOOLCHAIN)
    except docker.errors.ImageNotFound:
        unavailable(f"local ROCm toolchain image {ROCM_TOOLCHAIN} is missing: run `bash .ci/rocm-toolchain-image.sh`")
    return ROCM_TOOLCHAIN
