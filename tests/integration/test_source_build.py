"""The source flavor built for real, as far as this machine allows: the rendered Dockerfile's builder stage
(apt, the OS Python's venv, the checkout as the build context, pip install -r requirements.txt,
tools/amd_build/build_amd.py, then USE_ROCM=1 PYTORCH_ROCM_ARCH=gfx942 python setup.py bdist_wheel) runs on
the real engine, with the local ROCm toolchain image from Debian's packages standing in for the ROCm devel
image, on a stand-in PyTorch checkout (tests/fixtures/cuda_ext_source: a CUDA kernel in
aten/src/ATen/native/cuda, a setup.py that compiles the hipified kernel with hipcc, and torch/utils/hipify
copied out of the installed torch wheel, which its build_amd.py imports as PyTorch's does). The torch wheel
comes out through the torch-wheel stage, and its shared library's code objects must name gfx942.

Not built here, and why (docs/source-builds.md): torchvision (its stage clones pytorch/vision from GitHub),
the rocm-libs stage (it gathers /opt/rocm libraries of a real ROCm torch) and the runtime stage that needs
both; PyTorch itself (hours on a large builder)."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
import torch.utils.hipify

from buildkit.adapters.engine import buildx
from buildkit.app.targets import Choices, SourceOptions, select_targets
from testkit.builds import index_pip_conf
from testkit.machine_wheels import local_wheels
from testkit.wheel_index import WheelIndex

pytestmark = pytest.mark.engine
FIXTURE = Path(__file__).resolve().parent.parent / "fixtures" / "cuda_ext_source"
ARCH = "gfx942"


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """The stand-in PyTorch checkout, with torch/utils/hipify from the installed torch wheel (never committed)."""
    tree = tmp_path_factory.mktemp("source") / "pytorch"
    shutil.copytree(FIXTURE, tree)
    shutil.copytree(Path(torch.utils.hipify.__file__).parent, tree / "torch" / "utils" / "hipify", ignore=shutil.ignore_patterns("__pycache__"))
    return tree


@pytest.fixture(scope="module")
def setuptools_index():
    """setuptools, which the checkout's requirements.txt asks for, from this machine's wheels on 127.0.0.1."""
    wheels = [w for w in local_wheels() if w.name.startswith("setuptools-")]
    if not wheels:
        pytest.fail("this machine's pip configuration names no setuptools wheel")
    index = WheelIndex({"simple": wheels}).start()
    yield index
    index.stop()


def source_matrix(folder: Path, toolchain: str, python: str) -> Path:
    path = folder / "matrix.toml"
    path.write_text(
        'extends = "default"\nregistry = "localhost:5000"\nrepository = "buildkit-test/source"\n'
        'include = [{ torch = "2.14.1", flavor = "source" }]\nflavors = ["source"]\n'
        f'python = ["{python}"]\n\n'
        # the toolchain image stands in for ROCm 7.2's devel image, with the Python its Debian ships
        f'[compat.rocm."7.2"]\ndevel_base = "{toolchain}"\n\n[compat.os_python]\ndebiansid = "{python}"\n'
    )
    return path


def code_objects(client, image: str, library: Path) -> str:
    """clang-offload-bundler's list of the code objects in a library's .hip_fatbin section, run in the toolchain
    image (its clang wrote them)."""
    # objcopy writes its output over its input unless given another file, and the library is mounted read-only
    script = (
        'objcopy --dump-section .hip_fatbin=/tmp/fatbin "$0" /tmp/copy && '
        '"$(hipconfig --hipclangpath)/clang-offload-bundler" --list --type=o --input=/tmp/fatbin'
    )
    output = client.containers.run(
        image,
        ["sh", "-c", script, str(library)],
        remove=True,
        network_disabled=True,
        volumes={str(library.parent): {"bind": str(library.parent), "mode": "ro"}},
    )
    return output.decode()


def test_source_flavor_compiles_the_hipified_checkout_into_gfx942_code_objects(
    client, buildkit_cli, docker_env, rocm_toolchain, checkout, setuptools_index, tmp_path
):
    python = client.images.get(rocm_toolchain).labels["dev.buildkit.os-python"]
    choices = Choices(matrix=source_matrix(tmp_path, rocm_toolchain, python), source=SourceOptions(gpu_archs=(ARCH,), pytorch_src=checkout))
    (item,) = select_targets(choices).render()
    assert item.target.builder_image == rocm_toolchain and item.build_args["PYTORCH_ROCM_ARCH"] == ARCH
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(item.dockerfile)
    request = buildx.BuildRequest(
        dockerfile=dockerfile,
        context=checkout,
        build_args=dict(item.build_args),
        labels={},
        network="host",
        secrets={"pip_conf": index_pip_conf(tmp_path, setuptools_index.url)},
        stage="torch-wheel",
        no_cache=True,  # every step runs now: a wheel from an earlier run's cache would prove nothing
    )
    wheels = tmp_path / "wheels"
    argv = buildkit_cli.buildx("build", "--output", f"type=local,dest={wheels}", *buildx.build_arguments(request, tmp_path / "metadata.json"))
    build = subprocess.run(argv, env=docker_env, capture_output=True, text=True, timeout=1800)
    assert build.returncode == 0, build.stdout[-4000:] + build.stderr[-4000:]

    (wheel,) = wheels.glob("torch-2.14.1-*.whl")
    extracted = tmp_path / "extracted"
    with zipfile.ZipFile(wheel) as archive:
        archive.extract("torch/lib/libtorch_hip.so", extracted)
    objects = code_objects(client, rocm_toolchain, extracted / "torch" / "lib" / "libtorch_hip.so").split()
    assert objects == [f"hipv4-amdgcn-amd-amdhsa--{ARCH}", "host-x86_64-unknown-linux-gnu-"], objects
