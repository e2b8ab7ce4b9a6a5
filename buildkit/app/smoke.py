"""Running the probe in an image with the right GPU flags and a time limit, and judging it."""

from __future__ import annotations

import json
from importlib import resources

import docker
import docker.errors
import requests.exceptions

from buildkit.adapters.engine import image_facts
from buildkit.adapters.host import container_gpu_options
from buildkit.core.compat import VENDOR_OF
from buildkit.core.host import HostFacts
from buildkit.core.plan import LABEL_PREFIX
from buildkit.errors import Problem, UserError
from buildkit.core.judge import Expectation, Verdict, judge

DEFAULT_TIMEOUT = 300  # seconds: an `import torch` can hang on a host whose driver is missing or wedged


def probe_source() -> str:
    return resources.files("buildkit.image").joinpath("probe.py").read_text(encoding="utf-8")


def _parse(stdout: str) -> dict | None:
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and "probe_version" in value:
            return value
    return None


def run_probe(
    client: docker.DockerClient, image: str, backend: str, host: HostFacts, kernels: bool, timeout: int
) -> tuple[dict | None, str, str]:
    """(probe report or None, stderr tail, why there is no report)."""
    command = ["python", "-c", probe_source(), *(["--kernels"] if kernels else [])]
    container = client.containers.create(
        image, command=command, labels={f"{LABEL_PREFIX}probe": "1"}, **container_gpu_options(backend, host),
    )
    try:
        container.start()
        try:
            status = container.wait(timeout=timeout)
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            container.kill()
            stderr = container.logs(stdout=False, stderr=True).decode(errors="replace")
            return None, stderr[-2000:], f"the probe did not finish within {timeout} s (a hanging `import torch` or GPU call)"
        stdout = container.logs(stdout=True, stderr=False).decode(errors="replace")
        stderr = container.logs(stdout=False, stderr=True).decode(errors="replace")
        report = _parse(stdout)
        if report is None:
            why = f"the probe exited with {status.get('StatusCode')} without a report"
            return None, (stderr or stdout)[-2000:], why
        return report, stderr[-2000:], ""
    except docker.errors.APIError as error:
        return None, "", f"the container could not run: {error.explanation or error}"
    finally:
        container.remove(force=True)


def smoke_test(
    client: docker.DockerClient, image: str, mode: str, host: HostFacts, timeout: int = DEFAULT_TIMEOUT
) -> Verdict:
    try:
        labels = image_facts(client, image).labels
    except docker.errors.ImageNotFound:
        raise UserError(Problem(image, "no such image in the engine; build it or pull it first")) from None
    expect = Expectation.from_labels(labels)
    if expect is None:
        return judge(image, labels, None, mode, False)
    host_has_gpu = VENDOR_OF[expect.backend] in host.vendors()
    kernels = mode != "skip" and host_has_gpu
    report, stderr, failure = run_probe(client, image, expect.backend, host, kernels, timeout)
    return judge(image, labels, report, mode, host_has_gpu, stderr_tail=stderr, probe_failure=failure)


def probe_report(client: docker.DockerClient, image: str, timeout: int = DEFAULT_TIMEOUT) -> dict:
    """The probe's report without kernels or GPU flags (what parity compares), or a UserError saying why not."""
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        raise UserError(Problem(image, "no such image in the engine; build it or pull it first")) from None
    report, stderr, failure = run_probe(client, image, "cuda", HostFacts(), False, timeout)
    if report is None:
        raise UserError(Problem(image, f"{failure}; stderr: {stderr.strip()[-500:] or '(empty)'}"))
    return report
