"""Running the installed `buildkit` console script and the docker CLI the way a user would."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

INDEX_USER = "ci-robot"
INDEX_PASSWORD = "pw-" + uuid.uuid4().hex  # given to builds only as a secret; must appear nowhere else


def run_buildkit(*args, env=None, timeout=1800) -> subprocess.CompletedProcess:
    executable = shutil.which("buildkit") or str(Path(sys.executable).parent / "buildkit")
    return subprocess.run([executable, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout)


def docker_output(docker: str, *args) -> str:
    result = subprocess.run([docker, *map(str, args)], capture_output=True, text=True, env={**os.environ, "DOCKER_BUILDKIT": "1"})
    return result.stdout + result.stderr
