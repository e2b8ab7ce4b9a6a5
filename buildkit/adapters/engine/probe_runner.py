"""Running the smoke-test probe (buildkit/image/probe.py) inside an image, with GPU access and a time limit.

The probe's text is passed to `python -c`, so nothing is mounted into the image or left behind in it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

import docker
import docker.errors

from buildkit.adapters.engine.containers import run_once
from buildkit.adapters.engine.docker_sdk import sdk_gpu_options
from buildkit.core import labels

if TYPE_CHECKING:
    from buildkit.core.host.access import GpuAccess

DEFAULT_TIMEOUT = 600  # seconds: an `import torch` can hang on a wedged driver, and a first torch.compile takes a minute


@dataclass(frozen=True)
class ProbeRun:
    report: dict[str, Any] | None  # the probe's JSON, or None when it printed none
    stderr: str  # its tail
    failure: str = ""  # why there is no report


def probe_source() -> str:
    return resources.files("buildkit.image").joinpath("probe.py").read_text(encoding="utf-8")


def _parse(stdout: str) -> dict[str, Any] | None:
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and "probe_version" in value:
            return value
    return None


def run_probe(
    client: docker.DockerClient,
    image: str,
    access: GpuAccess,
    kernels: bool,
    timeout: int = DEFAULT_TIMEOUT,
    platform: str | None = None,
) -> ProbeRun:
    """The probe in a container of `image` (its `platform` image of an index, under emulation where it is not
    the engine's own)."""
    command = ["python", "-c", probe_source(), *(["--kernels"] if kernels else [])]
    try:
        ran = run_once(client, image, timeout, command=command, labels={labels.PROBE_CONTAINER: "1"}, platform=platform, **sdk_gpu_options(access))
    except docker.errors.APIError as error:
        return ProbeRun(None, "", f"the container could not run: {error.explanation or error}")
    if ran.timed_out:
        return ProbeRun(None, ran.stderr[-2000:], f"the probe did not finish within {timeout} s (a hanging `import torch` or GPU call)")
    report = _parse(ran.stdout)
    if report is None:
        return ProbeRun(None, (ran.stderr or ran.stdout)[-2000:], f"the probe exited with {ran.status} without a report")
    return ProbeRun(report, ran.stderr[-2000:])
