"""The test pair (2.14.1, Python 3.11, CUDA 13.0 + ROCm 7.2, torch test doubles) built three ways, in one run:
cold (a fresh engine: empty BuildKit cache, no registry cache), with a warm registry cache (another fresh
engine, reading the cache the first build wrote to the registry: what a nightly runner sees), and warm
local (the same engine again). Each fresh engine is a throwaway dockerd (testkit.daemon).

Run: python -m bench.registry_cache   (needs dockerd with buildx on the containerd image store, Debian's
docker-registry and the local base image from .ci/base-image.sh; run as root: it starts dockerd)
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from bench.common import EXTRA_PACKAGE, pair_index, timed_build
from buildkit.adapters import buildx
from testkit.builds import index_pip_conf, team_matrix
from testkit.daemon import SpareEngine
from testkit.registry import RegistryProcess

BASE = "python:3.11-slim-bookworm"


def build(matrix: Path, pip_conf: Path, out: Path, engine: SpareEngine) -> float:
    seconds, _ = timed_build(matrix, pip_conf, out, "--registry-cache", "-j", "2", "--builder", engine.context,
                             env=engine.env)
    return seconds


def main() -> None:
    docker = buildx.find_builder().docker
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        index = pair_index(folder / "wheels")
        registry = RegistryProcess(folder / "registry").start()
        matrix = team_matrix(folder, index.url, "bench/pytorch", '[{ torch = "2.14.1", python = "3.11", flavor = "runtime" }]',
                             f'packages = ["{EXTRA_PACKAGE}"]\n'
                             '[[torch]]\nversion = "2.14.1"\ncuda = ["13.0"]\nrocm = ["7.2"]\n',
                             registry=registry.address)
        pip_conf = index_pip_conf(folder, index.url)
        timings = {}
        first = SpareEngine(docker, folder / "first.log").start(BASE, context=True)
        try:
            timings["cold"] = build(matrix, pip_conf, folder / "cold", first)
            timings["warm_local"] = build(matrix, pip_conf, folder / "local", first)
        finally:
            first.stop()
        second = SpareEngine(docker, folder / "second.log").start(BASE, context=True)
        try:
            timings["warm_registry_cache"] = build(matrix, pip_conf, folder / "cached", second)
        finally:
            second.stop()
        registry.stop()
        index.stop()
    print(json.dumps({
        "benchmark": "test pair on fresh engines, registry cache",
        **{f"{name}_s": round(seconds, 1) for name, seconds in timings.items()},
        "warm_registry_cache_over_cold": round(timings["warm_registry_cache"] / timings["cold"], 3),
        "warm_local_over_cold": round(timings["warm_local"] / timings["cold"], 3),
    }, indent=2))


if __name__ == "__main__":
    main()
