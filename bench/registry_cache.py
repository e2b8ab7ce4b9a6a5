"""The test pair (2.14.1, Python 3.11, CUDA 13.0 + ROCm 7.2, torch test doubles) built three ways, in one run:
cold (a fresh engine: empty BuildKit cache, no registry cache), with a warm registry cache (another fresh
engine, reading the cache the first build wrote to the registry: what a nightly runner sees), and warm
local (the same engine again). Each fresh engine is a throwaway dockerd (testkit.daemon) with a buildkit
cache folder of its own, so the runner with only the registry cache proves its images again, as a fresh
runner does. With --real, the real CUDA 13.0 image of bench.side_by_side instead (this machine's wheels).

Run: python -m bench.registry_cache [--real]   (needs dockerd with buildx on the containerd image store,
Debian's docker-registry and the local base image from .ci/base-image.sh; run as root: it starts dockerd)
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from bench.common import EXTRA_PACKAGE, pair_index, timed_build
from bench.side_by_side import BASE
from bench.side_by_side import TARGET as REAL_TARGET
from buildkit.adapters.engine import buildx
from testkit.builds import index_pip_conf, machine_ca_bundle, machine_pip_conf, team_matrix
from testkit.daemon import SpareEngine
from testkit.machine_wheels import cuda_index
from testkit.registry import RegistryProcess


def build(matrix: Path, pip_conf: Path, out: Path, engine: SpareEngine, extra: list[str]) -> float:
    env = {**engine.env, "BUILDKIT_CACHE_DIR": str(out.parent / f"buildkit-cache-{engine.context}")}
    seconds, _ = timed_build(matrix, pip_conf, out, "--registry-cache", "-j", "2", "--builder", engine.context, *extra, env=env, timeout=3600)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--real", action="store_true", help=f"the real image {REAL_TARGET} instead of the test pair")
    real = parser.parse_args().real
    docker = buildx.find_builder().docker
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        registry = RegistryProcess(folder / "registry").start()
        extra: list[str] = []
        if real:
            index = cuda_index() or sys.exit("this machine's pip configuration names no torch 2.14.1 cp311 wheels")
            index.start()
            matrix = team_matrix(folder, index.url, "bench/buildkit", f'[{{ id = "{REAL_TARGET}" }}]', compile=True, installer="uv", registry=registry.address)
            pip_conf = machine_pip_conf(folder, index)
            ca = machine_ca_bundle()
            extra = ["--ca-bundle", str(ca)] if ca else []
        else:
            index = pair_index(folder / "wheels")
            matrix = team_matrix(
                folder,
                index.url,
                "bench/pytorch",
                '[{ torch = "2.14.1", python = "3.11", flavor = "runtime" }]',
                f'packages = ["{EXTRA_PACKAGE}"]\n[[torch]]\nversion = "2.14.1"\ncuda = ["13.0"]\nrocm = ["7.2"]\n',
                registry=registry.address,
            )
            pip_conf = index_pip_conf(folder, index.url)
        timings = {}
        first = SpareEngine(docker, folder / "first.log").start(BASE, context=True)
        try:
            timings["cold"] = build(matrix, pip_conf, folder / "cold", first, extra)
            timings["warm_local"] = build(matrix, pip_conf, folder / "local", first, extra)
        finally:
            first.stop()
        second = SpareEngine(docker, folder / "second.log").start(BASE, context=True)
        try:
            timings["warm_registry_cache"] = build(matrix, pip_conf, folder / "cached", second, extra)
        finally:
            second.stop()
        registry.stop()
        index.stop()
    print(
        json.dumps(
            {
                "benchmark": f"{'real image ' + REAL_TARGET if real else 'test pair'} on fresh engines, registry cache",
                **{f"{name}_s": round(seconds, 1) for name, seconds in timings.items()},
                "warm_registry_cache_over_cold": round(timings["warm_registry_cache"] / timings["cold"], 3),
                "warm_local_over_cold": round(timings["warm_local"] / timings["cold"], 3),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
