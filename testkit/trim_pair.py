"""The same ROCm runtime image built twice from the ROCm torch TEST DOUBLE: with every arch of ROCm 7.2's
wheels, and narrowed to gfx942 (arch-trimmed). Shared by the integration test and bench/rocm_trim.py.

Sizes: the image filesystem bytes `build` measures (buildkit.adapters.engine.docker_sdk.image_bytes, the report's
filesystem_bytes), and the bytes of the torch package's files in each image. What else the image holds
(the base's Debian and Python, the runtime flavor's g++ and headers, the venv) is a fixed half gigabyte:
small next to a real ROCm torch (gigabytes), large next to the double (a hundred megabytes), so the torch
package's ratio is the one that carries over to real images (docs/benchmarks.md projects it).

Each image is read right after its build: the engine is shared, and other sessions' clean-ups remove
buildkit images they did not make.
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import docker

from buildkit.adapters.engine.docker_sdk import image_bytes
from buildkit.core.trim import names_pattern
from testkit.builds import ROCM_7_2_ARCHS, Build, build, index_pip_conf, team_matrix
from testkit.wheel_index import WheelIndex
from testkit.wheels import companion_double, rocm_torch_double

if TYPE_CHECKING:
    from collections.abc import Mapping

TARGET = "2.14.1-rocm7.2-py3.11-runtime"
DECLARED = "gfx942"
REMOVED = tuple(arch for arch in ROCM_7_2_ARCHS if arch != DECLARED)
NARROWED = f'[[torch]]\nversion = "2.14.1"\narchs = {{ rocm = ["{DECLARED}"] }}\n'
TRIM_LINE = re.compile(r"arch trim: removed (\d+) files, (\d+) bytes")
# In the image: the bytes of the torch package's files (as image_bytes counts them), and every path of the
# whole filesystem that names an arch the trim removes, or the declared one
READ_IMAGE = """
import importlib.util, json, os, re, sys
removed, declared = (re.compile(p) for p in json.loads(sys.argv[1]))
# the real path: site-packages is reached through a link from the versioned python folder, and the walk
# below does not follow links
torch = os.path.realpath(importlib.util.find_spec("torch").submodule_search_locations[0])
found = {"torch_bytes": 0, "naming_removed": [], "naming_declared": []}
for top, folders, names in os.walk("/"):
    folders[:] = [f for f in folders if os.path.join(top, f) not in ("/proc", "/sys", "/dev")]
    for name in names:
        path = os.path.join(top, name)
        found["torch_bytes"] += os.lstat(path).st_size if path.startswith(torch + "/") else 0
        found["naming_removed"] += [path] if removed.search(path) else []
        found["naming_declared"] += [path] if declared.search(path) else []
print(json.dumps(found))
"""


@dataclass(frozen=True)
class ImageRead:
    labels: dict[str, str]
    torch_bytes: int
    naming_removed: list[str]  # paths anywhere in the image that name an arch the trim removes
    naming_declared: list[str]


@dataclass
class TrimPair:
    untrimmed: Build
    trimmed: Build
    base_bytes: int  # filesystem bytes of the base image both start from
    wheel_bytes: int
    read: dict[str, ImageRead]  # "untrimmed" / "trimmed", for each image that was built

    def target(self, which: Build) -> dict[str, Any]:
        return which.targets[TARGET]

    def filesystem(self, which: Build) -> int:
        size: int = self.target(which)["filesystem_bytes"]
        return size

    def above_base(self, which: Build) -> int:
        return self.filesystem(which) - self.base_bytes

    @property
    def image_ratio(self) -> float:
        return self.filesystem(self.trimmed) / self.filesystem(self.untrimmed)

    @property
    def added_ratio(self) -> float:
        return self.above_base(self.trimmed) / self.above_base(self.untrimmed)

    @property
    def torch_ratio(self) -> float:
        return self.read["trimmed"].torch_bytes / self.read["untrimmed"].torch_bytes

    def logged_removal(self) -> tuple[int, int]:
        """(files, bytes) the trim step printed in the trimmed build's log."""
        found = TRIM_LINE.search(Path(self.target(self.trimmed)["log"]).read_text())
        if not found:
            raise AssertionError("the trimmed build's log has no 'arch trim: removed' line")
        return int(found.group(1)), int(found.group(2))

    def remove_images(self, client: docker.DockerClient) -> None:
        """Removes the two images (by id: untagged rebuilds of other runs are not ours to remove)."""
        for which in (self.untrimmed, self.trimmed):
            with contextlib.suppress(docker.errors.ImageNotFound, docker.errors.NullResource):
                client.images.remove(self.target(which)["image_id"], force=True)


def read_image(client: docker.DockerClient, image_id: str) -> ImageRead:
    patterns = json.dumps([names_pattern(REMOVED), names_pattern((DECLARED,))])
    output = client.containers.run(image_id, ["python", "-c", READ_IMAGE, patterns], user="0", remove=True)
    found = json.loads(output.decode().splitlines()[-1])
    return ImageRead(client.images.get(image_id).labels, **found)


def build_trim_pair(
    folder: Path, repository: str, env: Mapping[str, str] | None, client: docker.DockerClient, unit: int = 4 << 20, shared: int = 9 << 20
) -> TrimPair:
    """Builds both images (one after the other: the engine is shared) with efficiency measured."""
    wheels = folder / "wheels"
    torch = rocm_torch_double(wheels, "2.14.1", "rocm7.2", "7.2.26015", ROCM_7_2_ARCHS, unit=unit, shared=shared)
    index = WheelIndex(
        {
            "rocm7.2": [torch, companion_double(wheels, "torchvision", "0.29.1", "rocm7.2", "2.14.1")],
            "simple": [],  # pip.conf's index: nothing reaches PyPI
        }
    ).start()
    built: dict[str, Build] = {}
    read: dict[str, ImageRead] = {}
    try:
        include = f'[{{ id = "{TARGET}" }}]'
        pip_conf = index_pip_conf(folder, index.url)
        # repositories of one length: each image records its own (the GPU guard names the twins' references),
        # so the two filesystems differ by exactly the trimmed bytes
        for name, stacks, suffix in (("untrimmed", "", "full"), ("trimmed", NARROWED, "trim")):
            (folder / name).mkdir()
            matrix = team_matrix(folder / name, index.url, f"{repository}-{suffix}", include, stacks)
            built[name] = build(matrix, pip_conf, folder / name / "out", env, "--efficiency")
            image_id = built[name].targets[TARGET]["image_id"]
            if image_id:
                read[name] = read_image(client, image_id)
    finally:
        index.stop()
    dockerfile = (built["untrimmed"].out / "contexts" / TARGET / "Dockerfile").read_text()
    # a rendered Dockerfile always has its tools stage (not narrowed by an assert: no engine here to run this with)
    base_image = re.search(r"^FROM (\S+) AS tools$", dockerfile, re.MULTILINE).group(1)  # type: ignore[union-attr]
    base_bytes = image_bytes(client, client.images.get(base_image).id).filesystem
    return TrimPair(built["untrimmed"], built["trimmed"], base_bytes, torch.stat().st_size, read)
