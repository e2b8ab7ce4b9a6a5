"""Arch trimming: the ROCm 7.2 runtime image (torch 2.14.1, Python 3.11) built with every arch of the wheels
and narrowed to gfx942, from the ROCm torch TEST DOUBLE, on the real engine; the byte ratio trimmed /
untrimmed (goal for a single-arch runtime image: at most 1/3), for the whole image, for what the build
adds above the base image, and for the torch package alone (the part that scales with a real wheel).

Run: python -m bench.rocm_trim [--unit-mib N] [--shared-mib N]   (needs dockerd, a BuildKit-capable docker
CLI and the local base image from .ci/base-image.sh). The double gives each arch N MiB of library files
(3N for gfx90a, gfx942, gfx950) and its arch-independent files --shared-mib; docs/benchmarks.md relates
those proportions to the real wheels'.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

from buildkit.adapters.engine import docker_sdk
from testkit.trim_pair import DECLARED, TARGET, build_trim_pair


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.rocm_trim")
    parser.add_argument("--unit-mib", type=float, default=4, help="library bytes per arch (x3 for datacenter archs)")
    parser.add_argument("--shared-mib", type=float, default=9, help="arch-independent library bytes")
    args = parser.parse_args(argv)
    repository = f"buildkit-bench-{uuid.uuid4().hex[:8]}/pytorch"
    client = docker_sdk.connect()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        pair = build_trim_pair(Path(tmp), repository, None, client, int(args.unit_mib * 2**20), int(args.shared_mib * 2**20))
        failed = [b.targets[TARGET]["error"] for b in (pair.untrimmed, pair.trimmed) if b.targets[TARGET]["status"] != "built"]
        if failed:
            pair.remove_images(client)
            sys.exit(f"build failed: {failed}")
        files, removed = pair.logged_removal()
        figures = {
            "benchmark": f"{TARGET}, all ROCm 7.2 archs vs {DECLARED} only (torch test double)",
            "date": time.strftime("%Y-%m-%d"),
            "double": {"unit_mib": args.unit_mib, "shared_mib": args.shared_mib, "wheel_bytes": pair.wheel_bytes},
            "base_image_bytes": pair.base_bytes,
            "untrimmed_filesystem_bytes": pair.filesystem(pair.untrimmed),
            "trimmed_filesystem_bytes": pair.filesystem(pair.trimmed),
            "image_ratio": round(pair.image_ratio, 4),
            "untrimmed_above_base_bytes": pair.above_base(pair.untrimmed),
            "trimmed_above_base_bytes": pair.above_base(pair.trimmed),
            "above_base_ratio": round(pair.added_ratio, 4),
            "untrimmed_torch_bytes": pair.read["untrimmed"].torch_bytes,
            "trimmed_torch_bytes": pair.read["trimmed"].torch_bytes,
            "torch_ratio": round(pair.torch_ratio, 4),
            "removed_files": files,
            "removed_bytes": removed,
            "smoke_compiled_archs_trimmed": pair.target(pair.trimmed)["smoke"]["probe"]["compiled_archs"],
            "build_seconds": {"untrimmed": pair.target(pair.untrimmed)["seconds"], "trimmed": pair.target(pair.trimmed)["seconds"]},
            "total_seconds": round(time.perf_counter() - started, 1),
        }
    print(json.dumps(figures, indent=2))
    pair.remove_images(client)


if __name__ == "__main__":
    main(sys.argv[1:])
