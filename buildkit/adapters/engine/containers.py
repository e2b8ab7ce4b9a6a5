"""One container run to its end or its deadline, then removed.

What the smoke-test probe, an image's SBOM inventory and hipcc in a toolchain image each need.

The docker SDK's `containers.run` has no deadline (its wait blocks until the process ends, and an `import
torch` on a wedged driver never does), so the container is created, started and waited on with a timeout,
killed when the deadline passes, and removed whatever happened.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import docker
import docker.errors
import requests.exceptions


@dataclass(frozen=True)
class Exited:
    status: int | None  # the exit code; None when the deadline passed and the container was killed
    stdout: str
    stderr: str
    output: str  # stdout and stderr interleaved as the program wrote them (a compiler's messages read in order)

    @property
    def timed_out(self) -> bool:
        return self.status is None


def run_once(client: docker.DockerClient, image: str, deadline: int, **create: Any) -> Exited:
    """A fresh container of `image`, created with `create` (containers.create's keyword arguments), run until
    it exits or `deadline` seconds pass, its logs read and the container removed.

    Raises docker.errors.APIError (ImageNotFound among them) when the engine will not create or start it:
    each caller says what that means for its command.
    """
    container = client.containers.create(image, **create)
    try:
        container.start()
        try:
            status: int | None = container.wait(timeout=deadline).get("StatusCode", 1)
        except (requests.exceptions.ReadTimeout, requests.exceptions.ConnectionError):
            status = None
            # it may have ended between the timeout and the kill; removing it below stops it either way
            with contextlib.suppress(docker.errors.APIError):
                container.kill()
        return Exited(
            status,
            container.logs(stdout=True, stderr=False).decode(errors="replace"),
            container.logs(stdout=False, stderr=True).decode(errors="replace"),
            container.logs(stdout=True, stderr=True).decode(errors="replace"),
        )
    finally:
        container.remove(force=True)
