"""matrix.lock against a registry whose base tag moves: `buildkit lock` pins each base by digest, a moved
tag changes the fingerprints of exactly the images built on it, and `publish --refresh` rebuilds those and
nothing else. The registry is Debian's docker-registry; images are seeded through its API (no engine)."""

from __future__ import annotations

import json

import pytest

from buildkit.adapters.files.bundled import tomllib
from testkit.registry import RegistryProcess, Seeder
from testkit.runner import run_buildkit

BASES = {"3.11": "base/python:3.11-slim", "3.12": "base/python:3.12-slim", "cuda": "base/dev-ubuntu-24.04:cuda", "rocm": "base/dev-ubuntu-24.04:rocm"}


@pytest.fixture
def setup(tmp_path):
    registry = RegistryProcess(tmp_path / "registry").start()
    seeder = Seeder(registry.address)
    for name, reference in BASES.items():
        repository, tag = reference.split(":")
        seeder.image(repository, tag, {"base": name})
    address = registry.address
    matrix = tmp_path / "matrix.toml"
    matrix.write_text(
        f'extends = "default"\nregistry = "{address}"\nrepository = "team/pytorch"\n'
        f'runtime_base = "{address}/base/python:{{python}}-slim"\npython = ["3.11", "3.12"]\ncompanions = []\n'
        'include = [{ torch = "2.14.1" }]\n'
        f'[compat.cuda."13.0"]\ndevel_base = "{address}/{BASES["cuda"]}"\n[compat.rocm."7.2"]\ndevel_base = "{address}/{BASES["rocm"]}"\n'
        '[[torch]]\nversion = "2.14.1"\ncuda = ["13.0"]\nrocm = ["7.2"]\n'
    )
    yield registry, seeder, matrix
    registry.stop()


def fingerprints(matrix) -> dict[str, str]:
    result = run_buildkit("plan", "--matrix", matrix, "--format", "json")
    assert result.returncode == 0, result.stderr
    return {t["id"]: t["fingerprint"] for t in json.loads(result.stdout)}


def test_a_moved_base_rebuilds_exactly_the_images_built_on_it(setup):
    registry, seeder, matrix = setup
    locked = run_buildkit("lock", "--matrix", matrix)
    assert locked.returncode == 0, locked.stderr
    lock = tomllib.loads((matrix.parent / "matrix.lock").read_text())
    assert set(lock["bases"]) == {f"{registry.address}/{reference}" for reference in BASES.values()}
    before = fingerprints(matrix)
    assert len(before) == 6  # runtime for 3.11 and 3.12, devel (3.12, the OS's) for each backend
    # what the nightly published yesterday: every image, carrying today's fingerprints
    plan = json.loads(run_buildkit("plan", "--matrix", matrix, "--format", "json").stdout)
    for target in plan:
        seeder.image("team/pytorch", target["id"], target["labels"])
    dry = run_buildkit("publish", "--matrix", matrix, "--dry-run", "--out", matrix.parent / "dry")
    assert dry.returncode == 0, dry.stderr
    assert {t["status"] for t in json.loads((matrix.parent / "dry" / "publish.json").read_text())["targets"]} == {"skipped-unchanged"}

    seeder.image("base/python", "3.12-slim", {"base": "3.12", "security-fix": "1"})  # the base's tag moves
    assert fingerprints(matrix) == before  # the lock holds: builds stay reproducible until a refresh
    refreshed = run_buildkit("publish", "--matrix", matrix, "--dry-run", "--refresh", "--out", matrix.parent / "refresh")
    assert refreshed.returncode == 0, refreshed.stderr
    statuses = {t["id"]: t["status"] for t in json.loads((matrix.parent / "refresh" / "publish.json").read_text())["targets"]}
    assert {i for i, s in statuses.items() if s == "would-build"} == {"2.14.1-cuda13.0-py3.12-runtime", "2.14.1-rocm7.2-py3.12-runtime"}
    after = fingerprints(matrix)
    assert {i for i in before if before[i] != after[i]} == {"2.14.1-cuda13.0-py3.12-runtime", "2.14.1-rocm7.2-py3.12-runtime"}
    relock = run_buildkit("lock", "--matrix", matrix)
    assert "  moved:" not in relock.stdout  # the refresh already wrote it
