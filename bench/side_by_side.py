"""buildkit against the same image written by hand, on one engine: the real CUDA 13.0 runtime image (torch
2.14.1, torchvision 0.29.1, g++ and the Python headers for torch.compile), cold build and full pull as
before, and what a node that already holds one image pays to pull another:

    python -m bench.side_by_side

(a) a node holding nightly N pulls nightly N+1 in which only torch changed (the same release built again: one
    file of the torch wheel differs, served from the next day's index, so every step that reads the index runs
    again; the OS steps come from the build cache, as a nightly runner gets them from its registry cache);
(b) a node holding the Python 3.13 image pulls the Python 3.11 one (this machine's Debian has those two Pythons:
    bookworm's 3.11, trixie's 3.13; torch, torchvision, triton, numpy, pillow and markupsafe for 3.13 come from
    the machine's package index, fetched once);
(c) a node holding the MI300 image pulls the MI350 one (TEST DOUBLES of ROCm 7.14's thin wheels at a tenth of
    their real sizes, testkit/thin_rocm.py; no hand-written image: pip installs torch's device-all there).

- by hand: one Dockerfile, pip, the engine's default compression (gzip), `docker buildx build --load`; the next
  day's build runs its pip step again (the index changed) and takes the OS steps from the cache; the node that
  holds nightly N is given N's OS layers alone (its pip layer has nothing for N+1), so that no pull needs room
  for two 6 GB images;
- buildkit: `buildkit build` (uv, zstd layers, torch's large dependencies in layers of their own, the CUDA
  libraries in layers that are the same for every Python, every layer reproducible, the smoke test with
  torch.compile), then a warm rebuild of the unchanged image, then `--efficiency` on its own. Nightly N+1 is
  also built again from nothing (build cache pruned): its dependency layers must be the same blobs.

Builds run on a throwaway dockerd (its own data root: the local base image loaded, the 3.13 one built from
Debian by .ci/base-image.sh; the build cache and cache mounts pruned before each cold build); every image is
pushed to a local docker-registry and leaves the build engine; each pull runs on a fresh empty engine (holding
the other image first where a scenario says so). Three parts (by hand, buildkit's CUDA images, the ROCm
doubles), each with a registry of its own emptied after it, keep the disk's peak near 20 GB (MIN_FREE). Bytes
are what the registry stores of the layers a pull fetches (compressed). The wheels are this machine's, served
on 127.0.0.1 as PyTorch's index names them (testkit.machine_wheels.cuda_index). Prints one JSON object;
docs/benchmarks.md records a run.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.common import thin_rocm_stack, timed_build
from buildkit.adapters.files.bundled import shipped_compat
from buildkit.core.render.planned import SHARED_STAGE
from testkit.builds import index_pip_conf, machine_ca_bundle, machine_pip_conf, team_matrix
from testkit.daemon import SpareEngine
from testkit.machine_wheels import cuda_index
from testkit.registry import RegistryProcess, image_layers
from testkit.thin_rocm import thin_rocm_index
from testkit.wheel_index import WheelIndex

TARGET = "2.14.1-cuda13.0-py3.11-runtime"
BASE = "python:3.11-slim-bookworm"
OTHER_PYTHON, OTHER_BASE = "3.13", "python:3.13-slim-trixie"
FAMILIES = ("mi300", "mi350")
ROCM_SCALE = 1 / 10  # the thin ROCm doubles at a tenth of the real sizes: device-gfx942 80 MB, torch 140 MB
MIN_FREE = 20 * 10**9  # bytes of disk a run needs: a 6 GB image's build cache and store, a part's registry
NEXT_NIGHTLY = "nightly-n-plus-1"  # the git_version torch's wheel names on the next day
# The same content as buildkit's image, the way a Dockerfile written by hand installs it: one pip install.
# The OS part is a stage of its own (`os`) so that the benchmark can keep it alone in the build cache; the image
# is the same as without it. torch.compile needs the Python headers: the official python images carry them,
# this machine's stand-ins (Debian's Python) need the -dev package, which buildkit's template installs too.
HAND_WRITTEN = """FROM {base} AS os
RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libnuma1 g++ \\
 && if [ ! -e "$(python{python} -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ]; then \\
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python{python}-dev; fi \\
 && rm -rf /var/lib/apt/lists/*
RUN python{python} -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
FROM os
ARG INDEX
RUN --mount=type=secret,id=pip_conf,target=/run/secrets/pip.conf --mount=type=secret,id=ca_bundle,target=/run/secrets/ca.crt \\
    PIP_CONFIG_FILE=/run/secrets/pip.conf PIP_CERT=/run/secrets/ca.crt \\
    pip install --no-cache-dir --extra-index-url "$INDEX" torch==2.14.1+cu130 torchvision==0.29.1+cu130
RUN useradd --uid 1000 --create-home buildkit
USER 1000
"""
ROCM_STACK = thin_rocm_stack("2.14.1", FAMILIES)


def run(command: list, env: dict, what: str) -> float:
    started = time.perf_counter()
    result = subprocess.run([str(part) for part in command], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"{what} failed:\n{(result.stdout + result.stderr)[-3000:]}")
    return time.perf_counter() - started


def prune(engine: SpareEngine) -> None:
    """An empty build cache (cache mounts too): a cold build's starting point."""
    run([engine.docker, "builder", "prune", "--all", "--force"], engine.env, "pruning the build cache")


class Bench:
    def __init__(self, folder: Path, engine: SpareEngine):
        self.folder, self.engine = folder, engine
        self.ca = machine_ca_bundle()
        self.registry: RegistryProcess | None = None

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """A registry of its own for one part of the benchmark, emptied after it, and an empty build cache to
        start from: the disk holds one part's images at a time."""
        prune(self.engine)
        self.registry = RegistryProcess(self.folder / f"registry-{name}").start()
        try:
            yield
        finally:
            self.registry.stop()
            shutil.rmtree(self.folder / f"registry-{name}", ignore_errors=True)
            self.registry = None

    def reference(self, name: str) -> str:
        assert self.registry is not None, "outside a phase"
        return f"{self.registry.address}/bench/{name}"

    def hand_build(self, name: str, base: str, python: str, index: WheelIndex) -> float:
        folder = self.folder / f"hand-{name}"
        folder.mkdir()
        (folder / "Dockerfile").write_text(HAND_WRITTEN.format(base=base, python=python))
        pip_conf = machine_pip_conf(folder, index)
        secrets = ["--secret", f"id=pip_conf,src={pip_conf}", *(["--secret", f"id=ca_bundle,src={self.ca}"] if self.ca else [])]
        return run(
            [
                self.engine.docker,
                "buildx",
                "build",
                "--network",
                "host",
                "--provenance=false",
                "--load",
                "-t",
                self.reference(f"hand:{name}"),
                "--build-arg",
                f"INDEX={index.url}/cu130/",
                *secrets,
                folder,
            ],
            self.engine.env,
            f"the hand-written build {name}",
        )

    def buildkit_build(self, name: str, matrix: Path, pip_conf: Path, *extra: str) -> tuple[float, dict]:
        env = {**self.engine.env, "BUILDKIT_CACHE_DIR": str(self.folder / "buildkit-cache")}
        ca = ["--ca-bundle", str(self.ca)] if self.ca else []
        seconds, report = timed_build(matrix, pip_conf, self.folder / f"out-{name}", *ca, *extra, env=env, timeout=3600)
        return seconds, report

    def tag(self, report: dict, names: dict[str, str]) -> None:
        """Tags each built target (by id) as bench/buildkit:<name>."""
        for target in report["targets"]:
            if target["id"] in names:
                run(
                    [self.engine.docker, "tag", target["image_id"], self.reference(f"buildkit:{names[target['id']]}")],
                    self.engine.env,
                    "tagging buildkit's image",
                )

    def push(self, reference: str) -> float:
        """Seconds to push the image; then it leaves the build engine (its build cache stays): the disk holds
        the registry's copy, the build cache and at most one image at a time."""
        seconds = run([self.engine.docker, "push", "--quiet", self.reference(reference)], self.engine.env, f"pushing {reference}")
        image = subprocess.run(
            [self.engine.docker, "image", "inspect", "--format", "{{.Id}}", self.reference(reference)],
            env=self.engine.env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        run([self.engine.docker, "image", "rm", "--force", image], self.engine.env, f"removing {reference}")
        return seconds

    def keep_stage(self, context: Path, stage: str, pip_conf: Path, image: str = "") -> None:
        """Empty the build cache but for one stage of the image whose build context is `context`: its OS stage
        (the base, the venv and its installer, the OS packages and the user), what a nightly runner takes from
        its registry cache. Building that stage again makes its records the newest, and pruning down to a few GB
        drops the older ones first. `image`: the stage is also pushed as that image."""
        secrets = ["--secret", f"id=pip_conf,src={pip_conf}", *(["--secret", f"id=ca_bundle,src={self.ca}"] if self.ca else [])]
        tagged = ["--load", "-t", self.reference(image)] if image else []
        run(
            [self.engine.docker, "buildx", "build", "--network", "host", "--provenance=false", "--target", stage, *tagged, *secrets, context],
            self.engine.env,
            f"building the {stage} stage again",
        )
        if image:
            self.push(image)
        run([self.engine.docker, "builder", "prune", "--force", "--keep-storage", "3gb"], self.engine.env, "pruning the build cache")

    def diff_ids(self, reference: str) -> list[str]:
        """The image's layers in the build engine, by the digests of their files."""
        inspected = subprocess.run(
            [self.engine.docker, "image", "inspect", "--format", "{{json .RootFS.Layers}}", self.reference(reference)],
            env=self.engine.env,
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(inspected.stdout)

    def fetched(self, reference: str, holding: str) -> int:
        """The registry's bytes of the layers of `reference` that `holding` lacks."""
        held = {digest for digest, _ in self.layers(holding)}
        return sum(size for digest, size in self.layers(reference) if digest not in held)

    def layers(self, reference: str) -> list[tuple[str, int]]:
        assert self.registry is not None, "outside a phase"
        repository, tag = reference.split(":")
        return image_layers(self.registry.address, f"bench/{repository}", tag)

    def pull(self, reference: str, holding: str = "") -> dict:
        """Seconds and bytes to pull `reference` into a fresh engine, one that holds `holding` (pulled first, not
        timed) where given: the bytes of the layers it lacks, as the registry stores them."""
        puller = SpareEngine(self.engine.docker, self.folder / "dockerd-pull.log").start()
        try:
            if holding:
                run([puller.docker, "pull", "--quiet", self.reference(holding)], puller.env, f"pulling {holding}")
                # the held image's gigabytes on disk before the clock starts, so the timed pull does not pay for
                # their writeback (suspected, not measured, in the 2026-12-03 run: the same 626 MB of layers
                # pulled in 35.9 s and in 51.6 s, each right after a 6 GB pull)
                run(["sync"], puller.env, "flushing the held image to disk")
            seconds = run([puller.docker, "pull", "--quiet", self.reference(reference)], puller.env, f"pulling {reference}")
        finally:
            puller.stop()
        held = {digest for digest, _ in self.layers(holding)} if holding else set()
        layers = self.layers(reference)
        return {
            "seconds": round(seconds, 1),
            "bytes": self.fetched(reference, holding) if holding else sum(size for _, size in layers),
            "layers": sum(1 for digest, _ in layers if digest not in held),
            "of_layers": len(layers),
        }


def main() -> None:
    docker = shutil.which("docker") or sys.exit("no docker CLI")
    free = shutil.disk_usage(tempfile.gettempdir()).free
    if free < MIN_FREE:
        sys.exit(f"{free / 1e9:.0f} GB free in {tempfile.gettempdir()}: the benchmark needs about {MIN_FREE / 1e9:.0f} GB")
    today = cuda_index(pythons=("3.11", OTHER_PYTHON)) or sys.exit("this machine's pip configuration names no torch 2.14.1 cp311 wheels")
    tomorrow = cuda_index(git_version=NEXT_NIGHTLY)
    assert tomorrow is not None
    today.start()
    tomorrow.start()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        compat = shipped_compat()
        rocm = thin_rocm_index(folder / "rocm", "pytorch", compat.backend("rocm", "7.14").archs, compat.device_archs("7.14"), scale=ROCM_SCALE)
        rocm_index = WheelIndex({"rocm7.14": rocm.wheels, "simple": []}).start()
        engine = SpareEngine(docker, folder / "dockerd.log").start(BASE)
        try:
            run(
                ["bash", Path(__file__).resolve().parent.parent / ".ci" / "base-image.sh", OTHER_BASE],
                {**engine.env, "DOCKER": docker, "BASE_SUITE": "trixie", "BASE_PLATFORMS": "linux/amd64"},
                "building the 3.13 base image",
            )
            figures = measure(Bench(folder, engine), today, tomorrow, rocm_index)
        finally:
            engine.stop()
            rocm_index.stop()
    today.stop()
    tomorrow.stop()
    figures["total_seconds"] = round(time.perf_counter() - started, 1)
    print(json.dumps(figures, indent=2))


def ratio(part: dict, whole: dict) -> dict:
    return {"bytes": round(part["bytes"] / whole["bytes"], 3), "seconds": round(part["seconds"] / whole["seconds"], 3)}


def install_layer_digests(bench: Bench, name: str, report: dict, reference: str) -> dict[str, str]:
    """The registry digest of each layer of torch's install (its plan's) in the image built as `name`."""
    (target,) = report["targets"]
    plan = json.loads((bench.folder / f"out-{name}" / "contexts" / target["id"] / "buildkit" / "torch-install.json").read_text())
    installed = {layer["name"] for layer in plan["layers"]} | {f"{layer['name']}-any-python" for layer in plan["layers"] if layer["any_python"]}
    names = [layer["layer"] for layer in target["layer_sizes"]]
    layers = bench.layers(reference)
    assert len(names) == len(layers), (names, layers)
    return {name: digest for name, (digest, _) in zip(names, layers) if name in installed}


def measure(bench: Bench, today: WheelIndex, tomorrow: WheelIndex, rocm_index: WheelIndex) -> dict:
    folder, engine = bench.folder, bench.engine
    for name in ("today", "tomorrow", "other", "rocm"):
        (folder / name).mkdir(exist_ok=True)
    pip_today, pip_tomorrow = machine_pip_conf(folder / "today", today), machine_pip_conf(folder / "tomorrow", tomorrow)
    single = f'[{{ id = "{TARGET}" }}]'
    # Each part holds one image in the build engine at a time (a 6 GB image is about 15 GB of build cache and
    # store while it builds): an image leaves once pushed, and the build cache is pruned between builds that
    # share nothing.
    with bench.phase("hand"):  # by hand: nightly N cold, N+1 with the OS steps from the cache, the 3.13 image
        hand_build = bench.hand_build("n", BASE, "3.11", today)
        hand_layers = bench.diff_ids("hand:n")
        run([engine.docker, "image", "rm", "--force", bench.reference("hand:n")], engine.env, "removing hand:n")
        # what a node holding nightly N can reuse of N+1 is N's OS layers (N's pip layer holds the old torch):
        # pushed alone, so that no pull needs room for two 6 GB images; N+1, the same size as N, is the one
        # pushed and pulled whole
        bench.keep_stage(folder / "hand-n", "os", folder / "hand-n" / "pip.conf", image="hand:n-os")
        hand_nightly_build = bench.hand_build("n1", BASE, "3.11", tomorrow)
        hand_push = bench.push("hand:n1")
        prune(engine)
        hand_other_build = bench.hand_build("py313", OTHER_BASE, OTHER_PYTHON, today)
        hand_shared_across_pythons = len(set(bench.diff_ids("hand:py313")) & set(hand_layers))  # not pushed: this is the figure
        run([engine.docker, "image", "rm", "--force", bench.reference("hand:py313")], engine.env, "removing hand:py313")
        prune(engine)
        hand_full = {"hand:n1": bench.pull("hand:n1")}
        hand_nightly = bench.pull("hand:n1", holding="hand:n-os")

    with bench.phase("buildkit"):  # nightly N cold as before, N+1 with the OS stages cached, N+1 from nothing, 3.13
        matrix = team_matrix(folder / "today", today.url, "bench/buildkit", single, compile=True, installer="uv")
        matrix_tomorrow = team_matrix(folder / "tomorrow", tomorrow.url, "bench/buildkit", single, compile=True, installer="uv")
        cold, report = bench.buildkit_build("cold", matrix, pip_today)
        target = report["targets"][0]
        compile_check = next(c for c in target["smoke"]["checks"] if c["name"].startswith("torch.compile"))
        warm, warm_report = bench.buildkit_build("warm", matrix, pip_today)
        efficiency_run, measured = bench.buildkit_build("efficiency", matrix, pip_today, "--efficiency")
        bench.tag(report, {TARGET: "n"})
        ours_push = bench.push("buildkit:n")
        bench.keep_stage(folder / "out-cold" / "contexts" / TARGET, SHARED_STAGE, pip_today)
        nightly_build, nightly = bench.buildkit_build("n1", matrix_tomorrow, pip_tomorrow)
        bench.tag(nightly, {TARGET: "n1"})
        bench.push("buildkit:n1")
        prune(engine)
        fresh_build, fresh = bench.buildkit_build("n1-fresh", matrix_tomorrow, pip_tomorrow)
        bench.tag(fresh, {TARGET: "n1-fresh"})
        bench.push("buildkit:n1-fresh")
        prune(engine)
        other = TARGET.replace("py3.11", f"py{OTHER_PYTHON}")
        matrix_other = team_matrix(
            folder / "other",
            today.url,
            "bench/buildkit",
            f'[{{ id = "{other}" }}]',
            f'runtime_base = "{OTHER_BASE.replace(OTHER_PYTHON, "{python}")}"\n',
            compile=True,
            installer="uv",
        )
        other_build, other_report = bench.buildkit_build("py313", matrix_other, pip_today)
        bench.tag(other_report, {other: "py313"})
        bench.push("buildkit:py313")
        prune(engine)
        full = {name: bench.pull(name) for name in ("buildkit:n", "buildkit:n1")}
        ours = {
            "a_nightly": bench.pull("buildkit:n1", holding="buildkit:n"),
            "b_python": bench.pull("buildkit:n", holding="buildkit:py313"),
            "a_nightly_fresh_runner": bench.pull("buildkit:n1-fresh", holding="buildkit:n"),
        }
        # the dependency layers of nightly N+1 built twice, the second time from nothing, and of nightly N
        rebuilt = (install_layer_digests(bench, "n1", nightly, "buildkit:n1"), install_layer_digests(bench, "n1-fresh", fresh, "buildkit:n1-fresh"))
        yesterday = install_layer_digests(bench, "cold", report, "buildkit:n")

    with bench.phase("rocm"):  # the family images, TEST DOUBLES at a tenth of the real sizes
        families = {f"2.14.1-rocm7.14-{family}-py3.11-runtime": family for family in FAMILIES}
        matrix_rocm = team_matrix(folder / "rocm", rocm_index.url, "bench/buildkit", "[" + ", ".join(f'{{ id = "{t}" }}' for t in families) + "]", ROCM_STACK)
        rocm_build, rocm_report = bench.buildkit_build("rocm", matrix_rocm, index_pip_conf(folder / "rocm", rocm_index.url), "-j", "2")
        bench.tag(rocm_report, families)
        for family in FAMILIES:
            bench.push(f"buildkit:{family}")
        prune(engine)
        full["buildkit:mi350"] = bench.pull("buildkit:mi350")
        ours["c_family"] = bench.pull("buildkit:mi350", holding="buildkit:mi300")

    full.update(hand_full)
    delta = {
        "a_nightly": {"hand": hand_nightly, "buildkit": ours["a_nightly"]},
        # by hand, the 3.11 image shares no layer with the 3.13 one (another base, another pip layer: their digests
        # say so), so a node holding that one pulls this one whole: its full pull
        "b_python": {"hand": {**full["hand:n1"], "layers_shared": hand_shared_across_pythons, "timed": "the full pull"}, "buildkit": ours["b_python"]},
        "c_family": {"buildkit": ours["c_family"]},
        "a_nightly_fresh_runner": {"buildkit": ours["a_nightly_fresh_runner"]},
    }
    whole = {
        "a_nightly": ("hand:n1", "buildkit:n1"),
        "b_python": ("hand:n1", "buildkit:n"),
        "c_family": ("", "buildkit:mi350"),
        "a_nightly_fresh_runner": ("", "buildkit:n1"),
    }
    ratios = {
        scenario: {who: ratio(figures, full[whole[scenario][0 if who == "hand" else 1]]) for who, figures in pulls.items()} for scenario, pulls in delta.items()
    }
    return {
        "benchmark": f"real CUDA image {TARGET}: buildkit against the same content by hand, one engine",
        "hand_written": {
            "build_s": round(hand_build, 1),
            "push_s": round(hand_push, 1),
            "pull_s": full["hand:n1"]["seconds"],
            "pull_bytes": full["hand:n1"]["bytes"],
            "next_nightly_build_s": round(hand_nightly_build, 1),
            "py313_build_s": round(hand_other_build, 1),
        },
        "buildkit": {
            "build_s": round(cold, 1),
            "smoke_test_passed": target["smoke"]["passed"],
            "torch_compile_check": compile_check["detail"],
            "compression": target["compression"],
            "largest_layers": target["largest_layers"][:5],
            "warm_rebuild_s": round(warm, 1),
            "warm_reused_its_verdict": warm_report["targets"][0]["smoke"]["reused"],
            "push_s": round(ours_push, 1),
            "pull_s": full["buildkit:n"]["seconds"],
            "pull_bytes": full["buildkit:n"]["bytes"],
            "efficiency": measured["targets"][0]["efficiency"],
            "efficiency_run_s": round(efficiency_run, 1),
            "next_nightly_build_s": round(nightly_build, 1),
            "py313_build_s": round(other_build, 1),
            "rocm_families_build_s": round(rocm_build, 1),
            "next_nightly_fresh_build_s": round(fresh_build, 1),
            "smoke_tests_passed": all(t["smoke"]["passed"] for r in (nightly, other_report, rocm_report, fresh) for t in r["targets"]),
        },
        "full_pulls": full,
        "pulls_holding_another_image": delta,
        "ratios_to_a_full_pull_of_the_same_image": ratios,
        "reproducible": {
            "next_nightly_rebuilt_from_nothing_same_blobs": {name: rebuilt[0][name] == rebuilt[1].get(name) for name in rebuilt[0]},
            "same_blobs_as_nightly_n": {name: yesterday[name] == rebuilt[0].get(name) for name in yesterday},
        },
        "ratios": {
            "build": round(cold / hand_build, 3),
            "push": round(ours_push / hand_push, 3),
            "pull": round(full["buildkit:n"]["seconds"] / full["hand:n1"]["seconds"], 3),
            "warm_over_cold": round(warm / cold, 4),
        },
    }


if __name__ == "__main__":
    main()
