"""The GPU guard in real containers of the real test pair: each twin started with the other vendor's device
nodes warns and names its twin, refuses with strict, and is silent with off and without GPU devices.

No GPU exists here, so the device nodes are /dev/null's (major 1, minor 3) mapped in under a GPU's name
(`--device /dev/null:/dev/kfd`): the container really has /dev/kfd, which is all the guard reads of it.
This machine's own PCI functions are virtio and a host bridge: the GPU-less host.
"""

from __future__ import annotations

import subprocess
import uuid

import pytest

from buildkit.adapters.engine import buildx
from buildkit.image.gpu_guard import EXIT_WRONG_GPU
from testkit import hosts

pytestmark = pytest.mark.engine
CUDA = "2.14.1-cuda13.0-py3.11-runtime"
ROCM = "2.14.1-rocm7.2-py3.11-runtime"
AMD_NODES = ("--device", "/dev/null:/dev/kfd", "--device", "/dev/null:/dev/dri/renderD128")
NVIDIA_NODES = ("--device", "/dev/null:/dev/nvidia0", "--device", "/dev/null:/dev/nvidiactl")
USER_CODE = "print('user code ran')"


def start(docker_env, image, *flags, mode=None):
    """`docker run` as a person types it; --rm and a name of its own, so nothing is left behind."""
    env = ["-e", f"BUILDKIT_GPU_GUARD={mode}"] if mode else []
    name = f"buildkit-guard-test-{uuid.uuid4().hex[:8]}"
    command = [docker_env[buildx.DOCKER_ENV], "run", "--rm", "--name", name, *flags, *env, image, "python", "-c", USER_CODE]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=120)
    finally:
        subprocess.run([docker_env[buildx.DOCKER_ENV], "rm", "-f", name], capture_output=True)


def tags(pair_build):
    return pair_build.targets[CUDA]["tags"][0], pair_build.targets[ROCM]["tags"][0]


@pytest.mark.parametrize("twin", ["cuda", "rocm"])
def test_a_twin_on_the_other_vendors_devices_warns_and_names_its_twin(pair_build, docker_env, twin):
    cuda, rocm = tags(pair_build)
    image, other, nodes, found = (
        (cuda, rocm, AMD_NODES, "AMD GPU devices (/dev/kfd)")
        if twin == "cuda"
        else (rocm, cuda, NVIDIA_NODES, "NVIDIA GPU devices (/dev/nvidia0, /dev/nvidiactl)")
    )
    for mode in (None, "warn"):
        result = start(docker_env, image, *nodes, mode=mode)
        assert result.returncode == 0 and result.stdout == "user code ran\n", result.stderr
        lines = result.stderr.splitlines()
        assert len(lines) == 1, result.stderr
        line = lines[0]
        assert line.startswith(f"buildkit: {image} is a ")
        assert f"but this container was given {found}" in line and "run on the CPU" in line
        assert f"twin instead: {other} (" in line
    print(f"{twin} twin, {' '.join(nodes)}: {line}")


@pytest.mark.parametrize("twin", ["cuda", "rocm"])
def test_strict_refuses_before_the_users_code(pair_build, docker_env, twin):
    cuda, rocm = tags(pair_build)
    image, nodes = (cuda, AMD_NODES) if twin == "cuda" else (rocm, NVIDIA_NODES)
    result = start(docker_env, image, *nodes, mode="strict")
    assert result.returncode == EXIT_WRONG_GPU and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1 and "twin instead" in result.stderr


@pytest.mark.parametrize("twin", ["cuda", "rocm"])
def test_silent_with_off_on_the_right_vendor_and_without_gpus(pair_build, docker_env, twin):
    cuda, rocm = tags(pair_build)
    image, wrong, right = (cuda, AMD_NODES, NVIDIA_NODES) if twin == "cuda" else (rocm, NVIDIA_NODES, AMD_NODES)
    for flags, mode in ((wrong, "off"), (right, None), ((), None), ((), "strict")):
        result = start(docker_env, image, *flags, mode=mode)
        assert (result.returncode, result.stdout, result.stderr) == (0, "user code ran\n", ""), (flags, mode)


def test_no_devices_on_an_amd_host_is_told_by_the_hosts_pci_functions(pair_build, docker_env, tmp_path):
    """A container started with no GPU flags on an AMD host: the host's sysfs (a fixture tree bind-mounted
    over this machine's) shows AMD GPUs and no NVIDIA one."""
    cuda, rocm = tags(pair_build)
    root = hosts.mi300x(tmp_path / "host")
    result = start(docker_env, cuda, "-v", f"{root}/sys/bus/pci/devices:/sys/bus/pci/devices:ro")
    assert result.returncode == 0
    assert "but this host has AMD GPUs (PCI 0000:0c:00.0, PCI 0000:22:00.0) and no NVIDIA one" in result.stderr
    assert f"twin instead: {rocm} (" in result.stderr
