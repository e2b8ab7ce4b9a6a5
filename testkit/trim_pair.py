"""The same ROCm runtime image built twice from the ROCm torch TEST DOUBLE: with every arch of ROCm 7.2's
wheels, and narrowed to gfx942 (arch-trimmed). Shared by the integration test and bench/rocm_trim.py.

Sizes: the image filesystem bytes `build` measures (buildkit.adapters.engine.image_bytes, the report's
filesystem_bytes), and the bytes of the torch package's files in each image. What else the image holds
(the base's Debian and Python, the runtime flavor's g++ and headers, the venv) is a fixed half gigabyte:
small next to a real ROCm torch (gigabytes), large next to the double (a hundred megabytes), so the torch
package's ratio is the one that carries over to real images (docs/benchmarks.md projects it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import docker

from buildkit.adapters.engine import image_bytes
from testkit.builds import ROCM_7_2_ARCHS, Build, build, index_pip_conf, team_matrix
from testkit.wheel_index import WheelIndex
from testkit.wheels import companion_double, rocm_torch_double

TARGET = "2.14.1-rocm7.2-py3.11-runtime"
DECLARED = "gfx942"
NARROWED = f'[[torch]]\nversion = "2.14.1"\narchs = {{ rocm = ["{DECLARED}"] }}\n'
TRIM_LINE = re.compile(r"arch trim: removed (\d+) files, (\d+) bytes")
# Bytes of the regular files under the torch package, as image_bytes counts them (symlinks by their target's name)
TORCH_BYTES = (
    "import importlib.util, os; root = importlib.util.find_spec('torch').submodule_search_locations[0]; "
    "print(sum(os.lstat(os.path.join(top, name)).st_size for top, _, names in os.walk(root) for name in names))"
)


@dataclass
class TrimPair:
    untrimmed: Build
    trimmed: Build
    base_bytes: int  # filesystem bytes of the base image both start from
    wheel_bytes: int
    torch_bytes: dict[str, int]  # untrimmed / trimmed: bytes of the files of the torch package

    def target(self, which: Build) -> dict:
        return which.targets[TARGET]

    def filesystem(self, which: Build) -> int:
        return self.target(which)["filesystem_bytes"]

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
        return self.torch_bytes["trimmed"] / self.torch_bytes["untrimmed"]

    def remove_images(self, client: docker.DockerClient) -> None:
        """Removes the two images (by id: untagged rebuilds of other runs are not ours to remove)."""
        for which in (self.untrimmed, self.trimmed):
            if self.target(which)["image_id"]:
                client.images.remove(self.target(which)["image_id"], force=True)

    def logged_removal(self) -> tuple[int, int]:
        """(files, bytes) the trim step printed in the trimmed build's log."""
        found = TRIM_LINE.search(Path(self.target(self.trimmed)["log"]).read_text())
        if not found:
            raise AssertionError("the trimmed build's log has no 'arch trim: removed' line")
        return int(found.group(1)), int(found.group(2))


def build_trim_pair(folder: Path, repository: str, env: dict, client: docker.DockerClient,
                    unit: int = 4 << 20, shared: int = 9 << 20) -> TrimPair:
    """Builds both images (one after the other: the engine is shared) with efficiency measured."""
    wheels = folder / "wheels"
    torch = rocm_torch_double(wheels, "2.14.1", "rocm7.2", "7.2.26015", ROCM_7_2_ARCHS, unit=unit, shared=shared)
    index = WheelIndex({
        "rocm7.2": [torch, companion_double(wheels, "torchvision", "0.29.1", "rocm7.2", "2.14.1")],
        "simple": [],  # pip.conf's index: nothing reaches PyPI
    }).start()
    try:
        include = f'[{{ id = "{TARGET}" }}]'
        pip_conf = index_pip_conf(folder, index.url)
        built = {}
        for name, stacks in (("untrimmed", ""), ("trimmed", NARROWED)):
            (folder / name).mkdir()
            matrix = team_matrix(folder / name, index.url, f"{repository}-{name}", include, stacks)
            built[name] = build(matrix, pip_conf, folder / name / "out", env)
    finally:
        index.stop()
    dockerfile = (built["untrimmed"].out / "contexts" / TARGET / "Dockerfile").read_text()
    base_image = re.search(r"^FROM (\S+)$", dockerfile, re.MULTILINE).group(1)
    base_bytes = image_bytes(client, client.images.get(base_image).id).filesystem
    torch_bytes = {
        name: int(client.containers.run(result.targets[TARGET]["image_id"], ["python", "-c", TORCH_BYTES], remove=True))
        for name, result in built.items() if result.targets[TARGET]["image_id"]
    }
    return TrimPair(built["untrimmed"], built["trimmed"], base_bytes, torch.stat().st_size, torch_bytes)
