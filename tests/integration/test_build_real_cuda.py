"""A real CUDA runtime image from the default templates: torch 2.14.1 (CUDA 13.0) for Python 3.11.

The wheels are the ones lying on this machine (found through its pip configuration, served on 127.0.0.1);
what they do not cover comes from the machine's default index, reached with its CA bundle as a secret.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.engine


def test_real_cuda_image_builds_and_passes_its_smoke_test(real_cuda_build):
    target = real_cuda_build.report["targets"][0]
    assert real_cuda_build.result.returncode == 0, real_cuda_build.result.stderr[-3000:] + "\n".join(target["log_tail"])
    assert target["status"] == "built"
    assert target["smoke"]["passed"] and target["smoke"]["kernels"] == "skipped (no NVIDIA GPU on this host)"


def test_torch_in_the_image_is_the_cuda_13_0_build(real_cuda_build, client):
    target = real_cuda_build.report["targets"][0]
    script = "import torch; print(torch.__version__, torch.version.cuda, torch.version.hip)"
    output = client.containers.run(target["image_id"], ["python", "-c", script], remove=True).decode().split()
    assert output[1:] == ["13.0", "None"]
    assert output[0].startswith("2.14.1")


def test_real_image_is_lean(real_cuda_build):
    target = real_cuda_build.report["targets"][0]
    assert target["efficiency"] <= 1.02, target
