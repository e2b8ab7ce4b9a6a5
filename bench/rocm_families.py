"""ROCm 7.14's thin wheels: the size of each GPU family's image against the device-all image, built from the
TEST DOUBLES of PyTorch's rocm7.14 index (testkit/thin_rocm.py: the real packages' metadata, their sizes a
hundredth of the real ones, incompressible bytes) on the real engine.

    python -m bench.rocm_families

One build (`-j 2`) of the torch 2.15.0 / Python 3.11 runtime images: one per family of the default matrix
(mi200, mi300, mi350, rdna3, rdna4, strix-halo) and, as a second stack, the device-all image every arch's
device package goes into. `max_layer_size` is 100 MB, the doubles' scale of GHCR's 10 GB. Per image: the
bytes of the layers torch's install wrote (the base and the shared venv aside), those bytes times 100 (what the
real wheels would make), the ratio to device-all's, and the largest layer. Prints one JSON object;
docs/benchmarks.md records a run. Needs dockerd, a BuildKit-capable docker CLI and the local base image
(.ci/base-image.sh).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.common import thin_rocm_stack, timed_build
from buildkit.adapters.engine import docker_sdk
from buildkit.adapters.files.bundled import shipped_compat
from testkit.builds import index_pip_conf, team_matrix
from testkit.thin_rocm import SCALE, thin_rocm_index
from testkit.wheel_index import WheelIndex

FAMILIES = ("mi200", "mi300", "mi350", "rdna3", "rdna4", "strix-halo")
BUDGET_MB = 100  # 10 GB at the doubles' scale
# the two stacks below and none of the default matrix's others (the fork keeps them; no double serves them)
INCLUDE = '[{ torch = "2.15.0", python = "3.11", flavor = "runtime" }, { torch = "2.14.1", python = "3.11", flavor = "runtime" }]'
# torch 2.15.0 builds the family images; the device-all image is the same torch as a stack of its own
# (2.14.1 on the same index, so that both stacks resolve the same package sizes)
STACKS = thin_rocm_stack("2.15.0", FAMILIES, f"{BUDGET_MB}MB") + thin_rocm_stack("2.14.1", (), f"{BUDGET_MB}MB")


def installed_layers(out: Path, target: dict) -> dict[str, int]:
    """The layers torch's install wrote in one image, by name, with their bytes."""
    plan = json.loads((out / "contexts" / target["id"] / "buildkit" / "torch-install.json").read_text())
    names = {layer["name"] for layer in plan["layers"]}
    return {layer["layer"]: layer["bytes"] for layer in target["layer_sizes"] if layer["layer"] in names}


def main() -> None:
    compat = shipped_compat()
    torch_archs, device_archs = compat.backend("rocm", "7.14").archs, compat.device_archs("7.14")
    repository = f"buildkit-bench-{uuid.uuid4().hex[:8]}/pytorch"
    client = docker_sdk.connect()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        wheels = thin_rocm_index(folder / "2.14", "pytorch", torch_archs, device_archs).wheels
        wheels += [
            wheel
            for wheel in thin_rocm_index(folder / "2.15", "pytorch", torch_archs, device_archs, "2.15.0").wheels
            if wheel.name.startswith(("torch-", "torchvision-"))
        ]
        index = WheelIndex({"rocm7.14": wheels, "simple": []}).start()
        try:
            index_pip_conf(folder, index.url)
            matrix = team_matrix(folder, index.url, repository, INCLUDE, STACKS)
            seconds, report = timed_build(matrix, folder / "pip.conf", folder / "out", "-j", "2")
            targets = report["targets"]
            images = {}
            for target in targets:
                if target["status"] != "built":
                    sys.exit(f"{target['id']} failed: {target['error']}")
                layers = installed_layers(folder / "out", target)
                largest = max(layers.items(), key=lambda item: item[1])
                images[target["id"]] = {
                    "installed_bytes": sum(layers.values()),
                    "device_layers": sum(1 for n in layers if n.startswith("device-")),
                    "largest_layer": {"name": largest[0], "bytes": largest[1]},
                }
        finally:
            index.stop()
            # by repository, not by the report: a failed build ends the benchmark before there is one
            for image in client.images.list(filters={"label": "dev.buildkit.target"}):
                if any(repository in tag for tag in image.tags):
                    client.images.remove(image.id, force=True)
    (device_all,) = [name for name in images if "-rocm7.14-py" in name]
    for figures in images.values():
        figures["real_estimate_gb"] = round(figures["installed_bytes"] / SCALE / 1e9, 2)
        figures["of_device_all"] = round(figures["installed_bytes"] / images[device_all]["installed_bytes"], 3)
    print(
        json.dumps(
            {
                "benchmark": "thin ROCm 7.14 family images against device-all (test doubles, 1/100 scale)",
                "date": time.strftime("%Y-%m-%d"),
                "max_layer_size_mb": BUDGET_MB,
                "build_seconds": round(seconds, 1),
                "total_seconds": round(time.perf_counter() - started, 1),
                "device_all": device_all,
                "images": images,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
