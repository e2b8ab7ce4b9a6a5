"""What the torch.compile toolchain (g++ and the Python headers) adds to a runtime image: the same runtime
image (CUDA 13.0 twin, torch test double) built with `compile = true` and `compile = false`, its filesystem
bytes compared, in one run.

Run: python -m bench.compile_toolchain   (needs dockerd with buildx and the local base image)
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from bench.common import timed_build
from testkit.builds import CUDA_13_ARCHS, index_pip_conf, team_matrix
from testkit.runner import remove_images
from testkit.wheel_index import WheelIndex
from testkit.wheels import torch_double

TARGET = "2.14.1-cuda13.0-py3.11-runtime"


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        index = WheelIndex({"cu130": [torch_double(folder / "w", "2.14.1", "cu130", "13.0", None, CUDA_13_ARCHS)], "simple": []}).start()
        sizes = {}
        for compile_ in (False, True):
            name = "with" if compile_ else "without"
            (folder / name).mkdir()
            matrix = team_matrix(
                folder / name,
                index.url,
                f"bench-toolchain/{name}",
                f'[{{ id = "{TARGET}" }}]',
                '[[torch]]\nversion = "2.14.1"\ncompanions = []\n',
                compile=compile_,
            )
            _, report = timed_build(matrix, index_pip_conf(folder / name, index.url), folder / name / "out")
            sizes[name] = report["targets"][0]["filesystem_bytes"]
        index.stop()
    for name in sizes:
        remove_images(f"bench-toolchain/{name}")
    print(
        json.dumps(
            {
                "benchmark": "torch.compile toolchain in the runtime image",
                "filesystem_bytes_without": sizes["without"],
                "filesystem_bytes_with": sizes["with"],
                "added_mb": round((sizes["with"] - sizes["without"]) / 1e6, 1),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
