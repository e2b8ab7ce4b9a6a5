"""`buildkit test` and the smoke test inside `build`: the probe run in an image and judged.

The probe's report is judged against what the image's labels say it is."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import docker
import docker.errors

from buildkit.adapters.engine import docker_sdk
from buildkit.adapters.engine.docker_sdk import ImageFacts, image_facts
from buildkit.adapters.engine.probe_runner import DEFAULT_TIMEOUT, probe_source, run_probe
from buildkit.adapters.engine.proven import ProvenImages
from buildkit.adapters.host import read_host
from buildkit.app.targets import Choices, select_targets
from buildkit.core.host.access import NO_GPU_ACCESS, gpu_access
from buildkit.core.labels import ImageIdentity
from buildkit.core.release.judge import GPU_MODES, Verdict, judge
from buildkit.core.release.parity import Parity, compare, pair_images
from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from collections.abc import Callable

    from buildkit.core.host.facts import HostFacts

__all__ = ["DEFAULT_TIMEOUT", "GPU_MODES", "parity", "probe_report", "smoke_test", "test_images"]


def _require_image(client: docker.DockerClient, image: str) -> ImageFacts:
    try:
        return image_facts(client, image)
    except docker.errors.ImageNotFound:
        raise UserError(Problem(image, "no such image in the engine; build it or pull it first")) from None


def smoke_test(
    client: docker.DockerClient,
    image: str,
    mode: str,
    host: HostFacts,
    timeout: int = DEFAULT_TIMEOUT,
    platform: str | None = None,
    proven: ProvenImages | None = None,
) -> Verdict:
    """The smoke test of one image (of one platform of it; an emulated platform runs with --gpu skip). With
    `proven`, the recorded probe report of this very image (same probe, mode, platform and GPUs) is judged
    instead of running the probe again, and a new report is recorded."""
    facts = _require_image(client, image)
    identity = ImageIdentity.read(facts.labels, platform or "linux/amd64")
    if identity is None:
        return judge(image, None, None, mode, False)
    host_has_gpu = identity.vendor.name in host.vendors()
    kernels = mode != "skip" and host_has_gpu
    key = ProvenImages.probe_key(facts.content_id, probe_source(), mode, platform or "", host if kernels else None) if proven else ""
    recorded = proven.get(key) if proven else None
    if recorded is not None:
        return replace(judge(image, identity, recorded, mode, host_has_gpu), reused=True)
    run = run_probe(client, image, gpu_access(identity.vendor, host) if kernels else NO_GPU_ACCESS, kernels, timeout, platform)
    if proven and run.report is not None:
        proven.put(key, run.report)
    return judge(image, identity, run.report, mode, host_has_gpu, stderr_tail=run.stderr, probe_failure=run.failure)


def probe_report(client: docker.DockerClient, image: str, timeout: int = DEFAULT_TIMEOUT) -> dict[str, Any]:
    """The probe's report without kernels or GPU access (what parity compares), or a UserError saying why not."""
    _require_image(client, image)
    run = run_probe(client, image, NO_GPU_ACCESS, False, timeout)
    if run.report is None:
        raise UserError(Problem(image, f"{run.failure}; stderr: {run.stderr.strip()[-500:] or '(empty)'}"))
    return run.report


def test_images(choices: Choices, images: list[str], mode: str, timeout: int, progress: Callable[[str], None]) -> list[Verdict]:
    """`buildkit test`: the named images, or the selected targets' images."""
    selection = select_targets(choices)
    images = images or [target.tags[0] for target in selection.targets]
    if not images:
        raise UserError("no image to test: name images, or select targets whose images were built")
    client = docker_sdk.connect()
    host = read_host(selection.matrix.compat, engine=docker_sdk.engine_facts(client))  # CDI devices where `run` would use them
    verdicts = []
    for image in images:
        progress(f"testing {image}")
        verdicts.append(smoke_test(client, image, mode, host, timeout))
    return verdicts


@dataclass(frozen=True)
class ParityResult:
    images: tuple[str, str]
    parity: Parity


def parity(choices: Choices, subjects: list[str]) -> ParityResult:
    """`buildkit parity`: a pair of the matrix (by its key) or two images, compared by their probes."""
    selection = select_targets(choices)
    images = pair_images(selection.targets, subjects)
    client = docker_sdk.connect()
    reports = [probe_report(client, image) for image in images]
    return ParityResult(images, compare(images[0], reports[0], images[1], reports[1], selection.matrix.compat.vendor_packages))
