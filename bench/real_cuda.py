"""The real CUDA runtime image (torch 2.14.1, CUDA 13.0, Python 3.11): cold build, warm rebuild, size and
efficiency ratio (image size / bytes of its final filesystem; goal <= 1.02).

Run: python -m bench.real_cuda   (needs dockerd, a BuildKit-capable docker CLI, the local base image from
.ci/base-image.sh, and the torch 2.14.1 cp311 wheels this machine's pip configuration points at).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

from bench.common import timed_build
from testkit.builds import machine_pip_conf, team_matrix
from testkit.machine_wheels import local_wheels
from testkit.runner import remove_images
from testkit.wheel_index import WheelIndex

TARGET = "2.14.1-cuda13.0-py3.11-runtime"


def main() -> None:
    wheels = local_wheels()
    index = WheelIndex({"cu130": wheels, "all": wheels}, flat={"all"}).start()
    repository = f"buildkit-bench-{int(time.time())}/pytorch"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        matrix = team_matrix(folder, index.url, repository, f'[{{ id = "{TARGET}" }}]')
        pip_conf = machine_pip_conf(folder, index)
        ca = os.environ.get("PIP_CERT") or os.environ.get("SSL_CERT_FILE")
        ca_bundle = ["--ca-bundle", ca] if ca else []
        timings, reports = {}, {}
        for name, extra in (("cold", ["--no-cache"]), ("warm", [])):
            timings[name], reports[name] = timed_build(matrix, pip_conf, folder / name, *ca_bundle, *extra, timeout=3600)
        target = reports["cold"]["targets"][0]
    index.stop()
    print(json.dumps({
        "benchmark": f"real CUDA image {TARGET}",
        "cold_s (includes the efficiency measurement)": round(timings["cold"], 1),
        "warm_s": round(timings["warm"], 1),
        "warm_over_cold": round(timings["warm"] / timings["cold"], 4),
        "image_bytes": target["size"],
        "filesystem_bytes": target["filesystem_bytes"],
        "efficiency": target["efficiency"],
    }, indent=2))
    remove_images(repository)


if __name__ == "__main__":
    main()
