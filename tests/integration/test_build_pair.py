"""A whole pair built on the real engine from the default templates, with torch test doubles.

One build run (two pairs, -j 2) is shared by the tests below: tags, labels, shared layers, the report,
a failing target with its log tail while its twin builds, image hygiene, and secrets that stay secret.
"""

from __future__ import annotations

import contextlib
import json
import subprocess

import docker
import pytest

from testkit.builds import team_matrix
from testkit.registry import RegistryProcess, layer_media_types
from testkit.runner import INDEX_PASSWORD, INDEX_USER, docker_output, run_buildkit
from testkit.wheel_index import WheelIndex

pytestmark = pytest.mark.engine

PAIR = "2.14.1-py3.11-runtime"
CUDA = "2.14.1-cuda13.0-py3.11-runtime"
ROCM = "2.14.1-rocm7.2-py3.11-runtime"
BROKEN = "2.13.0-rocm7.2-py3.11-runtime"  # the ROCm double index has no torch 2.13.0
BROKEN_TWIN = "2.13.0-cuda13.0-py3.11-runtime"


@pytest.fixture(scope="module")
def built(pair_build):
    return pair_build.result, pair_build.report, pair_build.out, pair_build.targets


def test_one_failure_fails_the_run_but_not_the_others(built):
    result, report, _, targets = built
    assert result.returncode == 1, result.stderr
    assert {i: t["status"] for i, t in targets.items()} == {CUDA: "built", ROCM: "built", BROKEN_TWIN: "built", BROKEN: "failed"}
    assert report["totals"] == {"built": 3, "failed": 1, "cancelled": 0, "not-started": 0}


def test_waits_outside_buildkit_are_said_as_they_start(built):
    """Smoke tests and the layer reading that follows a build take minutes on real images: a log (the plain
    display, as CI sees it) says each as it starts instead of going quiet."""
    result, _, _, _ = built
    assert f"[{CUDA}] smoke test (linux/amd64)" in result.stderr
    assert f"[{CUDA}] reading its layers and filesystem (docker save) for its efficiency" in result.stderr


def test_failure_is_reported_with_its_log_tail(built):
    _, _, out, targets = built
    broken = targets[BROKEN]
    assert broken["tags"] == [] and broken["image_id"] is None
    assert any("torch==2.14.1" in line or "torch==2.13.0" in line for line in broken["log_tail"])
    # what is missing, in the resolver's words (uv's here; pip says "No matching distribution found for")
    assert any("there is no version of torch==2.13.0+rocm7.2" in line for line in broken["log_tail"])
    markdown = (out / "report.md").read_text()
    assert f"{BROKEN}: last lines of" in markdown


def test_built_images_carry_their_tags_and_labels(built, client, repository):
    _, _, _, targets = built
    image = client.images.get(targets[ROCM]["image_id"])
    assert f"localhost:5000/{repository}:2.14.1-rocm7.2-py3.11-runtime" in image.tags
    assert f"localhost:5000/{repository}:2.14.1-rocm-py3.11-runtime" in image.tags
    labels = image.labels
    assert labels["dev.buildkit.backend"] == "rocm" and labels["dev.buildkit.backend-version"] == "7.2"
    assert labels["dev.buildkit.pair"] == PAIR and labels["dev.buildkit.gpu-archs"].startswith("gfx900;")
    assert labels["org.opencontainers.image.created"].endswith("Z")


def test_fingerprint_label_is_the_plans(pair_build, client):
    image = client.images.get(pair_build.targets[ROCM]["image_id"])
    plan = json.loads(run_buildkit("plan", "--matrix", pair_build.matrix, "--format", "json").stdout)
    assert image.labels["dev.buildkit.fingerprint"] == next(t["fingerprint"] for t in plan if t["id"] == ROCM)


def test_torch_inside_is_the_backend_build(built, client):
    _, _, _, targets = built
    script = "import torch, torchvision; print(torch.__version__, torch.version.cuda, torch.version.hip, torchvision.__version__)"
    for target_id, expected in ((CUDA, "2.14.1+cu130 13.0 None 0.29.1+cu130"), (ROCM, "2.14.1+rocm7.2 None 7.2.26015 0.29.1+rocm7.2")):
        output = client.containers.run(targets[target_id]["image_id"], ["python", "-c", script], remove=True).decode()
        assert output.strip() == expected


# The diff of a step that changes no file: the same layer whatever the step was
EMPTY_LAYER = "sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"


def test_twins_share_the_os_layer_above_their_own_libraries(built, client):
    """On the official Python base the image is assembled from scratch: its Python-neutral layers (the doubles
    install none: empty layers) at the bottom, then the shared stage's files as one layer (the base image, apt's
    libnuma1, the venv, uv, the user), the same blob in both twins, then torch's layers, which differ."""
    _, report, _, targets = built
    cuda = client.images.get(targets[CUDA]["image_id"]).attrs["RootFS"]["Layers"]
    rocm = client.images.get(targets[ROCM]["image_id"]).attrs["RootFS"]["Layers"]
    # CUDA: its eight library layers and triton's files for any Python; ROCm 7.2: pytorch-triton-rocm's
    assert set(cuda[:9]) == {EMPTY_LAYER} and rocm[0] == EMPTY_LAYER
    os_layer = cuda[9]
    assert os_layer != EMPTY_LAYER and rocm[1] == os_layer
    shared = set(cuda) & set(rocm)  # each blob once (the empty layer is one blob, however often copied in)
    assert len(shared) < len(set(cuda))  # torch's own layers differ
    (pair,) = [p for p in report["pairs"] if p["pair"] == PAIR]
    assert pair["shared_layers"] == len(shared)
    assert pair["shared_bytes"] >= client.images.get("python:3.11-slim-bookworm").attrs["Size"]


def test_no_caches_apt_lists_or_secrets_in_the_image(built, client):
    _, _, _, targets = built
    script = (
        "import os, pathlib;"
        "lists=[p for p in pathlib.Path('/var/lib/apt/lists').rglob('*') if p.is_file() and p.stat().st_size];"
        "secrets=[p for p in pathlib.Path('/run/secrets').rglob('*') if p.is_file() and p.stat().st_size] if os.path.isdir('/run/secrets') else [];"
        "cache=[p for p in pathlib.Path('/root/.cache').rglob('*') if p.is_file()];"
        "print(len(lists), len(cache), len(secrets), os.getuid(), os.environ['PIP_CONSTRAINT'])"
    )
    output = client.containers.run(targets[CUDA]["image_id"], ["python", "-c", script], user="0", remove=True).decode().split()
    assert output == ["0", "0", "0", "0", "/opt/venv/torch-constraint.txt"]
    default_user = client.containers.run(targets[CUDA]["image_id"], ["id", "-u"], remove=True).decode().strip()
    assert default_user == "1000"


def test_index_password_is_used_but_appears_nowhere(built, client, buildkit_cli, double_index):
    result, _, out, targets = built
    # pip really authenticated against the index (the secret was mounted and read)...
    assert any(path.startswith("/simple/team-extra") for path in double_index.requests)
    # ...and the password is in no layer, config, Dockerfile, log, report or output
    for target in targets.values():
        if target["image_id"]:
            assert INDEX_PASSWORD not in docker_output(buildkit_cli.docker, "history", "--no-trunc", target["image_id"])
            assert INDEX_PASSWORD not in docker_output(buildkit_cli.docker, "inspect", target["image_id"])
            assert INDEX_USER not in docker_output(buildkit_cli.docker, "inspect", target["image_id"])
    for path in out.rglob("*"):
        if path.is_file():
            assert INDEX_PASSWORD not in path.read_text(errors="replace"), path
    assert INDEX_PASSWORD not in result.stdout + result.stderr


def test_serial_build_gives_the_same_images_and_reuses_their_tests(built, pair_setup, docker_env, tmp_path, client):
    _, _, _, parallel = built
    matrix, pip_conf = pair_setup
    out = tmp_path / "serial"
    result = run_buildkit(
        "build",
        "--matrix",
        matrix,
        "--network",
        "host",
        "--pip-conf",
        pip_conf,
        "-j",
        "1",
        "--out",
        out,
        "--select",
        "torch=2.14.1",
        env=docker_env,
    )
    assert result.returncode == 0, result.stderr
    serial = {t["id"]: t for t in json.loads((out / "report.json").read_text())["targets"]}
    for target_id in (CUDA, ROCM):
        a = client.images.get(parallel[target_id]["image_id"]).attrs
        b = client.images.get(serial[target_id]["image_id"]).attrs
        assert a["RootFS"]["Layers"] == b["RootFS"]["Layers"]
        drop = "org.opencontainers.image.created"
        assert {k: v for k, v in a["Config"]["Labels"].items() if k != drop} == {k: v for k, v in b["Config"]["Labels"].items() if k != drop}
        assert parallel[target_id]["tags"] == serial[target_id]["tags"]
        # a new image id (its build date), the same content: its recorded probe report is judged again
        assert serial[target_id]["image_id"] != parallel[target_id]["image_id"]
        assert serial[target_id]["smoke"]["reused"] and serial[target_id]["smoke"]["passed"]
        assert f"[{target_id}] smoke test (linux/amd64): the same image passed before here" in result.stderr
    retested = run_buildkit(
        "build",
        "--matrix",
        matrix,
        "--network",
        "host",
        "--pip-conf",
        pip_conf,
        "--out",
        tmp_path / "retest",
        "--select",
        f"id={CUDA}",
        "--retest",
        env=docker_env,
    )
    assert retested.returncode == 0, retested.stderr
    (again,) = json.loads((tmp_path / "retest" / "report.json").read_text())["targets"]
    assert not again["smoke"]["reused"] and again["smoke"]["passed"]


def test_efficiency_ratio_is_measured(built):
    _, _, _, targets = built
    ratio = targets[CUDA]["efficiency"]
    assert ratio is not None and 1.0 <= ratio <= 1.02


def test_exported_bake_file_builds_the_same_images_with_the_real_buildx_bake(
    double_index, base_image, docker_env, tmp_path, client, repository, cleanup_images
):
    """`buildkit bake` exports a pair; `docker buildx bake` (no buildkit involved, run from / rather than the
    export's folder) builds it: the same layers and labels (the build's date aside) as `buildkit build`'s
    images of the same matrix, with the bake file's labels removed (the rendered Dockerfiles carry them). buildx 0.13's bake has no
    `network`, so builds reach the wheel index on the engine's bridge gateway instead of the host's 127.0.0.1, and
    pip is told to trust that plain-HTTP address the way a team trusts its in-house mirror: in the pip.conf secret."""
    gateway = client.networks.get("bridge").attrs["IPAM"]["Config"][0]["Gateway"]
    index = WheelIndex({name: double_index.indexes[name] for name in ("cu130", "rocm7.2")}, host=gateway).start()
    pip_conf = tmp_path / "pip.conf"
    pip_conf.write_text(f"[global]\ntrusted-host = {gateway}\n")
    try:
        # a repository of its own: the pair's tags in the session's repository belong to the pair build
        matrix = team_matrix(
            tmp_path,
            index.url,
            f"{repository}-bake",
            '[{ torch = "2.14.1", python = "3.11", flavor = "runtime" }]',
            '[[torch]]\nversion = "2.14.1"\ncuda = ["13.0"]\nrocm = ["7.2"]\n',
        )
        built = run_buildkit("build", "--matrix", matrix, "--pip-conf", pip_conf, "--out", tmp_path / "out", env=docker_env)
        assert built.returncode == 0, built.stderr[-3000:]
        ours = {t["id"]: t for t in json.loads((tmp_path / "out" / "report.json").read_text())["targets"]}
        out = tmp_path / "bake"
        exported = run_buildkit("bake", "--matrix", matrix, "--pip-conf", pip_conf, "--out", out, env=docker_env)
        assert exported.returncode == 0, exported.stderr
        document = json.loads((out / "docker-bake.json").read_text())
        assert document["group"]["pair-2_14_1-py3_11-runtime"]["targets"] == ["2_14_1-cuda13_0-py3_11-runtime", "2_14_1-rocm7_2-py3_11-runtime"]
        tags = {CUDA: f"bake-{tmp_path.name}-cuda:1", ROCM: f"bake-{tmp_path.name}-rocm:1"}
        overrides = [f"--set=2_14_1-cuda13_0-py3_11-runtime.tags={tags[CUDA]}", f"--set=2_14_1-rocm7_2-py3_11-runtime.tags={tags[ROCM]}"]
        # the bake file less its labels: the rendered Dockerfiles' own LABEL lines must describe the images
        for target in document["target"].values():
            assert target.pop("labels")
        (out / "docker-bake.unlabelled.json").write_text(json.dumps(document))
        baked = subprocess.run(
            [
                docker_env["BUILDKIT_DOCKER"],
                "buildx",
                "bake",
                "-f",
                str(out / "docker-bake.unlabelled.json"),
                "--load",
                *overrides,
                "pair-2_14_1-py3_11-runtime",
            ],
            cwd="/",
            env=docker_env,
            capture_output=True,
            text=True,
        )
        assert baked.returncode == 0, baked.stderr[-3000:]
        stamp = ("org.opencontainers.image.created", "org.opencontainers.image.revision")
        for target_id, tag in tags.items():
            mine, theirs = client.images.get(ours[target_id]["image_id"]).attrs, client.images.get(tag).attrs
            assert theirs["RootFS"]["Layers"] == mine["RootFS"]["Layers"], target_id
            assert {k: v for k, v in theirs["Config"]["Labels"].items() if k not in stamp} == {
                k: v for k, v in mine["Config"]["Labels"].items() if k not in stamp
            }
        for tag in tags.values():
            client.images.remove(tag, force=True)
        # pushed, the images' layers are zstd, as their dev.buildkit.compression label says
        registry = RegistryProcess(tmp_path / "registry").start()
        try:
            pushed = {CUDA: f"{registry.address}/bake-cuda:1", ROCM: f"{registry.address}/bake-rocm:1"}
            baked = subprocess.run(
                [
                    docker_env["BUILDKIT_DOCKER"],
                    "buildx",
                    "bake",
                    "-f",
                    str(out / "docker-bake.json"),
                    "--push",
                    f"--set=2_14_1-cuda13_0-py3_11-runtime.tags={pushed[CUDA]}",
                    f"--set=2_14_1-rocm7_2-py3_11-runtime.tags={pushed[ROCM]}",
                    "pair-2_14_1-py3_11-runtime",
                ],
                cwd="/",
                env=docker_env,
                capture_output=True,
                text=True,
            )
            assert baked.returncode == 0, baked.stderr[-3000:]
            for target_id, reference in pushed.items():
                repository_path, tag = reference.removeprefix(f"{registry.address}/").split(":")
                assert layer_media_types(registry.address, repository_path, tag) == {"application/vnd.oci.image.layer.v1.tar+zstd"}
                assert ours[target_id]["compression"] == "zstd"
        finally:
            registry.stop()
            # on the containerd image store a bake push also keeps the pushed images in the engine
            for reference in pushed.values():
                with contextlib.suppress(docker.errors.ImageNotFound):
                    client.images.remove(reference, force=True)
    finally:
        index.stop()


def test_a_twin_without_its_pair_gets_no_floating_tag(built, client, repository, pair_setup, docker_env, tmp_path):
    """Floating tags are for twins only: not for the twin whose other half failed, nor for one selected alone."""
    _, _, _, targets = built
    assert targets[BROKEN_TWIN]["status"] == "built"
    assert targets[BROKEN_TWIN]["tags"] == [f"localhost:5000/{repository}:{BROKEN_TWIN}"]
    assert f"localhost:5000/{repository}:2.13.0-cuda-py3.11-runtime" not in client.images.get(targets[BROKEN_TWIN]["image_id"]).tags
    matrix, pip_conf = pair_setup
    result = run_buildkit(
        "build", "--matrix", matrix, "--network", "host", "--pip-conf", pip_conf, "--out", tmp_path / "alone", "--select", f"id={CUDA}", env=docker_env
    )
    assert result.returncode == 0, result.stderr[-2000:]
    (alone,) = json.loads((tmp_path / "alone" / "report.json").read_text())["targets"]
    assert alone["tags"] == [f"localhost:5000/{repository}:{CUDA}"]
