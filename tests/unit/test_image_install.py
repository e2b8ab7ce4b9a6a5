"""The image-side installer (buildkit/image/install.py), run as builds run it: a script in a fresh Python."""

from __future__ import annotations

import subprocess
import sys
from importlib import resources

INSTALL = str(resources.files("buildkit.image").joinpath("install.py"))


def install(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, INSTALL, *args], capture_output=True, text=True, timeout=300)


def test_check_backend_refuses_the_cpu_torch_of_this_machine_naming_what_it_is():
    import torch

    assert torch.version.cuda is None and torch.version.hip is None  # the test extra's CPU build
    for backend, label in (("cuda", "CUDA 13.0"), ("rocm", "ROCm 13.0")):
        result = install("check-backend", backend, "13.0")
        assert result.returncode == 1
        assert result.stderr.strip() == (f"torch {torch.__version__} is not a {label} build "
                                         "(torch.version.cuda=None, hip=None)")


def test_a_command_it_does_not_know_is_refused_with_its_usage():
    result = install("check-backend", "xpu", "1.0")
    assert result.returncode == 1 and result.stderr.startswith("usage: install.py")
