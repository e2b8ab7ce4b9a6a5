"""Running `buildkit build` for a test and reading its report; team matrices over local wheel indexes."""

from __future__ import annotations

import json
import os
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from buildkit.adapters.files.bundled import compat_data
from buildkit.core.compat.facts import compat_from_data
from buildkit.core.vendors import NVIDIA
from testkit.runner import run_buildkit
from testkit.wheels import companion_double, torch_double

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Mapping

    from testkit.wheel_index import WheelIndex

# What torch doubles report as compiled: the official lists, as the real wheels would (release cu130 wheels
# carry no PTX, so no compute_120: see compat.toml's cuda-release-ptx source)
_COMPAT = compat_from_data(compat_data())
CUDA_13_ARCHS = list(NVIDIA.compiled_arch_names(_COMPAT.backends[("cuda", "13.0")].archs))
# the aarch64 (sbsa) wheels are built for other GPUs (Grace Hopper and Blackwell, Thor's sm_110)
CUDA_13_ARCHS_PER_MACHINE = {"x86_64": CUDA_13_ARCHS, "aarch64": list(NVIDIA.compiled_arch_names(_COMPAT.backends[("cuda", "13.0")].arm64_archs))}
ROCM_7_2_ARCHS = list(_COMPAT.backends[("rocm", "7.2")].archs)


def pair_doubles(folder: Path, cuda_releases: dict[str, str], rocm_releases: dict[str, str] | None = None) -> dict[str, list[Path]]:
    """TEST DOUBLES for the test pair's indexes: torch and its torchvision (release -> torchvision version) for
    CUDA 13.0 (/cu130) and ROCm 7.2 (/rocm7.2), reporting the official arch lists (CUDA's per machine). ROCm
    gets the CUDA releases unless told otherwise (a release missing there makes its ROCm twin fail)."""
    rocm_releases = cuda_releases if rocm_releases is None else rocm_releases
    cuda = [
        wheel
        for torch, vision in cuda_releases.items()
        for wheel in (
            torch_double(folder / "cu130", torch, "cu130", "13.0", None, CUDA_13_ARCHS_PER_MACHINE),
            companion_double(folder / "cu130", "torchvision", vision, "cu130", torch),
        )
    ]
    rocm = [
        wheel
        for torch, vision in rocm_releases.items()
        for wheel in (
            torch_double(folder / "rocm7.2", torch, "rocm7.2", None, "7.2.26015", ROCM_7_2_ARCHS),
            companion_double(folder / "rocm7.2", "torchvision", vision, "rocm7.2", torch),
        )
    ]
    return {"cu130": cuda, "rocm7.2": rocm}


@dataclass
class Build:
    """One `buildkit build` run: its process result, its JSON report and its output folder."""

    result: subprocess.CompletedProcess[str]
    report: dict[str, Any]  # report.json
    out: Path
    matrix: Path

    @property
    def targets(self) -> dict[str, dict[str, Any]]:
        return {t["id"]: t for t in self.report["targets"]}


def build(matrix: Path, pip_conf: Path, out: Path, env: Mapping[str, str] | None, *extra: object) -> Build:
    result = run_buildkit("build", "--matrix", matrix, "--network", "host", "--pip-conf", pip_conf, "--out", out, *extra, env=env)
    report_path = out / "report.json"
    if not report_path.exists():
        pytest.fail(f"buildkit build wrote no report (exit {result.returncode}):\n{result.stderr[-3000:]}")
    return Build(result, json.loads(report_path.read_text()), out, matrix)


def team_matrix(
    folder: Path,
    index_url: str,
    repository: str,
    include: str,
    stacks: str = "",
    compile: bool = False,
    registry: str = "localhost:5000",
    installer: str = "pip",
) -> Path:
    """A team fork of the default matrix whose wheels come from a local index. Torch doubles cannot compile,
    so their images leave out the torch.compile toolchain unless `compile` asks for it (the real image). The
    installer is pip unless a test asks for uv, whose wheel its index must then serve (uv_wheel)."""
    path = folder / "matrix.toml"
    path.write_text(
        f'extends = "default"\nregistry = "{registry}"\nrepository = "{repository}"\n'
        f'wheel_index = "{index_url}"\ninclude = {include}\ncompile = {str(compile).lower()}\n'
        f'installer = "{installer}"\n{textwrap.dedent(stacks)}'
    )
    return path


def machine_ca_bundle() -> Path | None:
    for name in ("PIP_CERT", "REQUESTS_CA_BUNDLE", "SSL_CERT_FILE"):
        if os.environ.get(name) and Path(os.environ[name]).is_file():
            return Path(os.environ[name])
    return None


def index_pip_conf(folder: Path, index_url: str) -> Path:
    """A pip.conf whose only index is a local test index: nothing reaches the internet."""
    path = folder / "pip.conf"
    path.write_text(f"[global]\nindex-url = {index_url}/simple/\n")
    return path


def machine_pip_conf(folder: Path, index: WheelIndex) -> Path:
    path = folder / "pip.conf"
    path.write_text(f"[global]\nfind-links = {index.url}/all/\n")
    return path
