"""Running the installed `buildkit` console script and the docker CLI the way a user would."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

INDEX_USER = "ci-robot"
INDEX_PASSWORD = "pw-" + uuid.uuid4().hex  # given to builds only as a secret; must appear nowhere else


def run_buildkit(*args: object, env: Mapping[str, str] | None = None, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    executable = shutil.which("buildkit") or str(Path(sys.executable).parent / "buildkit")
    return subprocess.run([executable, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout)


def docker_output(docker: str, *args: object) -> str:
    result = subprocess.run([docker, *map(str, args)], capture_output=True, text=True, env={**os.environ, "DOCKER_BUILDKIT": "1"})
    return result.stdout + result.stderr


def tool(name: str) -> str | None:
    """A console script of the test extras: on PATH, or next to this interpreter (venv not activated)."""
    return shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))


def remove_images(repository: str) -> None:
    """Removes the buildkit images tagged into a repository, and untagged ones that rebuilds left."""
    import docker

    client = docker.from_env()
    for image in client.images.list(filters={"label": "dev.buildkit.target"}):
        if any(repository in tag for tag in image.tags) or not image.tags:
            client.images.remove(image.id, force=True)
