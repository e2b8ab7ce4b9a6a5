"""Makes room on the disk before the suite, and says when there is not enough.

A CI machine that runs the suite again and again keeps, between runs, what they left: BuildKit's cache (kept so
a warm run stays warm), images of a test session that was killed before its cleanup (tagged `buildkit-test-*`,
or left untagged with buildkit's target label), its spare engines' folders and pytest's temporary folders.
One run filled such a disk halfway through (`No space left on device`, 156 errors). So: what earlier test sessions left always goes;
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
    reaches), pytest's folders of earlier runs, and the folders of spare engines whose daemon is gone. Returns
    what was removed, for the log."""
    removed = []
    listing = docker("images", "--filter", "label=dev.buildkit.target", "--format", "{{.ID}} {{.Repository}}:{{.Tag}}")
    for line in sorted(set(listing.splitlines())):
        image, reference = line.split(" ", 1)
        # a test's tag goes by its name (the image may carry a team's tag too); an untagged image by its ID
        if TEST_REPOSITORY.match(reference) or reference == "<none>:<none>":
            name = image if reference == "<none>:<none>" else reference
            subprocess.run([DOCKER, "rmi", "--force", name], capture_output=True)
            removed.append(f"image {name}")
    for folder in Path(tempfile.gettempdir()).glob("pytest-of-*/pytest-*"):  # a run's base folder (pytest-current links one)
        if folder.is_symlink():
            folder.unlink()
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(str(folder))
    for engine in Path("/tmp").glob("bk-engine-*"):  # testkit.daemon.SpareEngine's folders
        if _running(engine / "docker.pid"):
            continue  # a test session running now
        tag = engine.name.removeprefix("bk-engine-")
        _unmount_below(engine)
        subprocess.run(["ip", "link", "del", f"bk{tag}"], capture_output=True)
        subprocess.run([DOCKER, "context", "rm", "--force", f"bk-{tag}"], capture_output=True)
        shutil.rmtree(engine, ignore_errors=True)
        removed.append(f"spare engine {engine}")
    return removed


def _unmount_below(folder: Path) -> None:
    """What a killed daemon left mounted in its folder (its network namespace, its containers' and builds' file
    systems), deepest first, so that the folder can go."""
    below = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines() if line.split()[1].startswith(f"{folder}/")]
    for point in sorted(below, key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True)


def _running(pidfile: Path) -> bool:
    try:
        os.kill(int(pidfile.read_text().strip()), 0)
    except (OSError, ValueError):
        return False
    return True


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
        print(f"make_room: only {free / GB:.1f} GB free on {root} and {tempfile.gettempdir()}, with the build cache "
              f"pruned; the suite needs about {need_gb:g} GB at its peak. Free some disk (docker system prune "
              f"--all removes this machine's other images too) and run again; going on, tests may fail for room.")
    else:
        print(f"make_room: {free / GB:.1f} GB free; the suite needs about {need_gb:g} GB")
    return 0


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1])))
