"""The docker SDK's container arguments carry the same GPU access as `docker run`'s flags (adapters/engine/docker_sdk.py)."""

from __future__ import annotations

import docker.types

from buildkit.adapters.engine.docker_sdk import sdk_gpu_options
from buildkit.core.host.access import NO_GPU_ACCESS, GpuAccess


def test_cdi_names_become_the_cdi_drivers_device_request():
    """What the docker CLI sends for `--device amd.com/gpu=all`: a device request for the cdi driver."""
    access = GpuAccess(False, (), ("video", "109"), ("seccomp=unconfined",), cdi_devices=("amd.com/gpu=all",))
    assert access.docker_flags()[:2] == ["--device", "amd.com/gpu=all"]
    assert sdk_gpu_options(access) == {
        "shm_size": "8g",
        "device_requests": [docker.types.DeviceRequest(driver="cdi", device_ids=["amd.com/gpu=all"])],
        "group_add": ["video", "109"],
        "security_opt": ["seccomp=unconfined"],
    }


def test_raw_flags_and_the_nvidia_request():
    assert sdk_gpu_options(GpuAccess(True, (), (), ()))["device_requests"] == [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    assert sdk_gpu_options(GpuAccess(False, ("/dev/kfd",), (), ()))["devices"] == ["/dev/kfd:/dev/kfd:rwm"]
    assert sdk_gpu_options(NO_GPU_ACCESS) == {"shm_size": "8g"}
