"""Makes room on the disk before the suite, and says when there is not enough.

A CI machine that runs the suite again and again keeps, between runs, what they left: BuildKit's cache (kept so
a warm run stays warm), images of a test session that was killed before its cleanup (tagged `buildkit-test-*`,
or left untagged with buildkit's target label) and its spare engines' folders. One run filled such a disk
halfway through (`No space left on device`, 156 errors). So: what earlier test sessions left always goes;
where room is short, dangling images go, then build cache only as far as the suite's room needs, oldest first
(BuildKit's own keep-storage order); a disk that still lacks room is named, with its figures, before any test
runs.

Usage: python3 .ci/make_room.py NEED_GB   (the docker CLI from $DOCKER, else `docker`)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's testkit: run as a script from .ci/
from testkit import daemon

DOCKER = os.environ.get("DOCKER", "docker")
GB = 10**9
TEST_REPOSITORY = re.compile(r"^buildkit-test-")  # tests/integration/conftest.py's `repository`
_UNITS = {"B": 1, "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}


def docker(*args: str) -> str:
    return subprocess.run([DOCKER, *args], check=True, capture_output=True, text=True).stdout


def free_bytes(path: str) -> int:
    return shutil.disk_usage(path).free


def build_cache_bytes() -> int:
    """The build cache's size as `docker system df` prints it ("3.441GB")."""
    for line in docker("system", "df", "--format", "{{json .}}").splitlines():
        row = json.loads(line)
        if row["Type"] == "Build Cache":
            size = re.fullmatch(r"([\d.]+)\s*([kKMGT]?B)", row["Size"])
            return int(float(size[1]) * _UNITS[size[2]]) if size else 0
    return 0


def remove_test_leftovers() -> list[str]:
    """Images of earlier test sessions (their cleanup runs at a session's end, which a killed run never
    reaches) and the spare engines whose daemon is gone. Returns what was removed, for the log. (pytest's own
    folders of earlier runs go by its retention settings in pyproject.toml.)"""
    removed = []
    listing = docker("images", "--filter", "label=dev.buildkit.target", "--format", "{{.ID}} {{.Repository}}:{{.Tag}}")
    for line in sorted(set(listing.splitlines())):
        image, reference = line.split(" ", 1)
        # a test's tag goes by its name (the image may carry a team's tag too); an untagged image by its ID
        if TEST_REPOSITORY.match(reference) or reference == "<none>:<none>":
            name = image if reference == "<none>:<none>" else reference
            subprocess.run([DOCKER, "rmi", "--force", name], capture_output=True)
            removed.append(f"image {name}")
    removed += [f"spare engine {root}" for root in daemon.remove_abandoned(DOCKER)]
    return removed


def main(need_gb: float) -> int:
    root = docker("info", "--format", "{{.DockerRootDir}}").strip()
    need = int(need_gb * GB)
    for what in remove_test_leftovers():
        print(f"make_room: removed what an earlier run left: {what}")
    if free_bytes(root) < need:
        docker("image", "prune", "--force")  # dangling images only: no tag, no container (a rebuilt image's old self)
        print("make_room: removed dangling images")
    short = need - free_bytes(root)
    if short > 0:
        keep = max(0, build_cache_bytes() - short)
        docker("builder", "prune", "--force", "--keep-storage", str(keep))
        print(f"make_room: build cache pruned to {keep / GB:.1f} GB to free {short / GB:.1f} GB")
    free = min(free_bytes(root), free_bytes(tempfile.gettempdir()))
    if free < need:
        print(
            f"make_room: only {free / GB:.1f} GB free on {root} and {tempfile.gettempdir()}, with the build cache "
            f"pruned; the suite needs about {need_gb:g} GB at its peak. Free some disk (docker system prune "
            f"--all removes this machine's other images too) and run again; going on, tests may fail for room."
        )
    else:
        print(f"make_room: {free / GB:.1f} GB free; the suite needs about {need_gb:g} GB")
    return 0


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1])))
