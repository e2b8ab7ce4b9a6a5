"""buildkit against the same image written by hand, on one engine: cold build, push and pull of the real CUDA
13.0 runtime image (torch 2.14.1, torchvision 0.29.1, g++ and the Python headers for torch.compile).

    python -m bench.side_by_side

- by hand: one Dockerfile, pip, the engine's default compression (gzip), `docker buildx build --load`;
- buildkit: `buildkit build` (uv, zstd layers, torch's large dependencies in layers of their own, each built in
  a stage of its own, the smoke test with torch.compile), then a warm rebuild of the unchanged image, then
  `--efficiency` on its own.

Both build on a throwaway dockerd (its own data root: an empty build cache and image store, the local base
image loaded, as a fresh CI runner), the build cache and cache mounts pruned before each cold build; both
push to a local docker-registry and are pulled into a second empty engine. The wheels are this machine's,
served on 127.0.0.1 as PyTorch's index names them (testkit.machine_wheels.cuda_index). Prints one JSON
object; docs/benchmarks.md records a run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import timed_build
from testkit.builds import machine_ca_bundle, machine_pip_conf, team_matrix
from testkit.daemon import SpareEngine
from testkit.machine_wheels import cuda_index
from testkit.registry import RegistryProcess

TARGET = "2.14.1-cuda13.0-py3.11-runtime"
BASE = "python:3.11-slim-bookworm"
# The same content as buildkit's image, the way a Dockerfile written by hand installs it: one pip install.
HAND_WRITTEN = """FROM python:3.11-slim-bookworm
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libnuma1 g++ \\
 && rm -rf /var/lib/apt/lists/*
RUN python3.11 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
ARG INDEX
RUN --mount=type=secret,id=pip_conf,target=/run/secrets/pip.conf --mount=type=secret,id=ca_bundle,target=/run/secrets/ca.crt \\
    PIP_CONFIG_FILE=/run/secrets/pip.conf PIP_CERT=/run/secrets/ca.crt \\
    pip install --no-cache-dir --extra-index-url "$INDEX" torch==2.14.1+cu130 torchvision==0.29.1+cu130
RUN useradd --uid 1000 --create-home buildkit
USER 1000
"""


def run(command: list[str], env: dict, what: str) -> float:
    started = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{what} failed:\n{(result.stdout + result.stderr)[-3000:]}")
    return time.perf_counter() - started


def prune(engine: SpareEngine) -> None:
    """An empty build cache (cache mounts too) and no images but the base: a cold build's starting point."""
    run([engine.docker, "builder", "prune", "--all", "--force"], engine.env, "pruning the build cache")


def pull(engine: SpareEngine, reference: str) -> float:
    seconds = run([engine.docker, "pull", "--quiet", reference], engine.env, f"pulling {reference}")
    run([engine.docker, "image", "rm", reference], engine.env, "removing the pulled image")
    run([engine.docker, "system", "prune", "--all", "--force"], engine.env, "emptying the image store")
    return seconds


def main() -> None:
    docker = shutil.which("docker") or sys.exit("no docker CLI")
    index = cuda_index() or sys.exit("this machine's pip configuration names no torch 2.14.1 cp311 wheels")
    index.start()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        engine = SpareEngine(docker, folder / "dockerd.log").start(BASE)
        puller = SpareEngine(docker, folder / "dockerd-pull.log").start(BASE)
        registry = RegistryProcess(folder / "registry").start()
        try:
            figures = measure(folder, engine, puller, registry.address, index)
        finally:
            registry.stop()
            puller.stop()
            engine.stop()
    index.stop()
    print(json.dumps(figures, indent=2))


def measure(folder: Path, engine: SpareEngine, puller: SpareEngine, registry: str, index) -> dict:
    pip_conf = machine_pip_conf(folder, index)
    ca = machine_ca_bundle()
    secrets = ["--secret", f"id=pip_conf,src={pip_conf}", *(["--secret", f"id=ca_bundle,src={ca}"] if ca else [])]
    hand = folder / "hand"
    hand.mkdir()
    (hand / "Dockerfile").write_text(HAND_WRITTEN)
    hand_tag, ours_tag = f"{registry}/bench/hand:1", f"{registry}/bench/buildkit:1"

    prune(engine)
    hand_build = run([engine.docker, "buildx", "build", "--network", "host", "--provenance=false", "--load", "-t", hand_tag,
                      "--build-arg", f"INDEX={index.url}/cu130/", *secrets, str(hand)], engine.env, "the hand-written build")

    prune(engine)
    matrix = team_matrix(folder, index.url, "bench/buildkit", f'[{{ id = "{TARGET}" }}]', compile=True, installer="uv",
                         registry=registry)
    env = {**engine.env, "BUILDKIT_CACHE_DIR": str(folder / "buildkit-cache")}
    extra = ["--ca-bundle", str(ca)] if ca else []
    cold, report = timed_build(matrix, pip_conf, folder / "cold", *extra, env=env, timeout=3600)
    target = report["targets"][0]
    compile_check = next(c for c in target["smoke"]["checks"] if c["name"].startswith("torch.compile"))
    warm, warm_report = timed_build(matrix, pip_conf, folder / "warm", *extra, env=env)
    efficiency_run, measured = timed_build(matrix, pip_conf, folder / "efficiency", *extra, "--efficiency", env=env)
    measured_target = measured["targets"][0]

    run([engine.docker, "tag", target["image_id"], ours_tag], engine.env, "tagging buildkit's image")
    hand_push = run([engine.docker, "push", "--quiet", hand_tag], engine.env, "pushing the hand-written image")
    ours_push = run([engine.docker, "push", "--quiet", ours_tag], engine.env, "pushing buildkit's image")
    hand_pull, ours_pull = pull(puller, hand_tag), pull(puller, ours_tag)
    return {
        "benchmark": f"real CUDA image {TARGET}: buildkit against the same content by hand, one engine, cold",
        "hand_written": {"build_s": round(hand_build, 1), "push_s": round(hand_push, 1), "pull_s": round(hand_pull, 1)},
        "buildkit": {
            "build_s": round(cold, 1), "smoke_test_passed": target["smoke"]["passed"],
            "torch_compile_check": compile_check["detail"], "compression": target["compression"],
            "largest_layers": target["largest_layers"][:5],
            "warm_rebuild_s": round(warm, 1), "warm_reused_its_verdict": warm_report["targets"][0]["smoke"]["reused"],
            "push_s": round(ours_push, 1), "pull_s": round(ours_pull, 1),
            "efficiency": measured_target["efficiency"], "efficiency_run_s": round(efficiency_run, 1),
        },
        "ratios": {"build": round(cold / hand_build, 3), "push": round(ours_push / hand_push, 3),
                   "pull": round(ours_pull / hand_pull, 3), "warm_over_cold": round(warm / cold, 4)},
    }


if __name__ == "__main__":
    main()
