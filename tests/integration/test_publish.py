"""Publishing to a real registry (Debian's docker-registry): skip-unchanged, pairs moving together,
nightly date tags and retention, basic and bearer-token auth, retries, an outage mid-publish."""

from __future__ import annotations

import json

import pytest

from buildkit.adapters.registry.client import Credentials, Registry
from testkit.builds import CUDA_13_ARCHS, index_pip_conf, pair_doubles, team_matrix
from testkit.registry import FaultProxy, RegistryProcess
from testkit.runner import run_buildkit
from testkit.session import session_repository
from testkit.wheel_index import WheelIndex
from testkit.wheels import build_wheel, companion_double, torch_double

pytestmark = pytest.mark.engine
STACKS = (
    '[[torch]]\nversion = "2.14.1"\ncuda = ["13.0"]\nrocm = ["7.2"]\n{extra_14}\n[[torch]]\nversion = "2.13.0"\ncuda = ["13.0"]\nrocm = ["7.2"]\n{extra_13}\n'
)
CUDA, ROCM = "2.14.1-cuda13.0-py3.11-runtime", "2.14.1-rocm7.2-py3.11-runtime"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """TEST DOUBLES for both pairs, plus a team package in two versions, and a ROCm index that hands out
    the CUDA build (to make one twin fail its smoke test)."""
    folder = tmp_path_factory.mktemp("publish-wheels")
    doubles = pair_doubles(folder, {"2.14.1": "0.29.1", "2.13.0": "0.28.0"})
    # a mislabelled wheel: named +rocm7.2, built for CUDA 13.0 (TEST DOUBLE)
    wrong = [
        torch_double(folder / "wrong", "2.14.1", "rocm7.2", "13.0", None, CUDA_13_ARCHS),
        companion_double(folder / "wrong", "torchvision", "0.29.1", "rocm7.2", "2.14.1"),
    ]
    extras = [build_wheel(folder / f"extra{v}", "team-extra", v, {"team_extra/__init__.py": ""}) for v in ("1.0", "2.0")]
    server = WheelIndex({**doubles, "simple": extras}).start()
    wrong_server = WheelIndex({**doubles, "rocm7.2": wrong, "simple": extras}).start()
    yield server, wrong_server
    server.stop()
    wrong_server.stop()


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    process = RegistryProcess(tmp_path_factory.mktemp("registry"), auth="htpasswd").start()
    yield process
    process.stop()


class Publisher:
    """Runs `buildkit publish` for one repository of a test, and reads the registry directly."""

    def __init__(self, folder, index_url, registry_address, auth_file, env):
        self.folder, self.index_url, self.registry, self.auth_file, self.env = folder, index_url, registry_address, auth_file, env
        self.repository = session_repository("publish")
        self.runs = 0

    def matrix(self, extra_14: str = "", extra_13: str = "", include: str = '[{ python = "3.11", flavor = "runtime", torch = "2.1[34].*" }]'):
        folder = self.folder / f"m{self.runs}"
        folder.mkdir(exist_ok=True)
        path = team_matrix(folder, self.index_url, self.repository, include, STACKS.format(extra_14=extra_14, extra_13=extra_13))
        index_pip_conf(folder, self.index_url)
        return path

    def publish(self, matrix, *extra, auth_file=None, registry=None, gpu_gate="off"):
        """No GPU here: the pair logic is tested with the GPU gate off unless a test is about the gate."""
        self.runs += 1
        out = self.folder / f"out{self.runs}"
        result = run_buildkit(
            "publish",
            "--matrix",
            matrix,
            "--registry",
            registry or self.registry,
            "--registry-auth-file",
            auth_file or self.auth_file,
            "--network",
            "host",
            "--gpu-gate",
            gpu_gate,
            "--pip-conf",
            matrix.parent / "pip.conf",
            "--out",
            out,
            "-j",
            "2",
            *extra,
            env=self.env,
        )
        report = json.loads((out / "publish.json").read_text()) if (out / "publish.json").exists() else None
        return result, report

    def client(self, password=None) -> Registry:
        return Registry(self.registry, Credentials(*json.loads(self.auth_file.read_text()).values()))

    def digest(self, tag: str) -> str | None:
        return self.client().head_manifest(self.repository, tag)

    def tags(self) -> set[str]:
        return set(self.client().list_tags(self.repository))


@pytest.fixture
def publisher(tmp_path, index, registry, docker_env, base_image, cleanup_images):
    return Publisher(tmp_path, index[0].url, registry.address, registry.auth_file(), docker_env)


def statuses(report) -> dict[str, str]:
    return {t["id"]: t["status"] for t in report["targets"]}


def test_publish_skips_what_is_unchanged_and_republishes_only_what_changed(publisher):
    matrix = publisher.matrix()
    first, report = publisher.publish(matrix)
    assert first.returncode == 0, first.stderr[-3000:]
    assert set(statuses(report).values()) == {"published"} and len(report["targets"]) == 4
    assert publisher.tags() == {
        "2.14.1-cuda13.0-py3.11-runtime",
        "2.14.1-rocm7.2-py3.11-runtime",
        "2.13.0-cuda13.0-py3.11-runtime",
        "2.13.0-rocm7.2-py3.11-runtime",
        "2.14.1-cuda-py3.11-runtime",
        "2.14.1-rocm-py3.11-runtime",
        "2.13.0-cuda-py3.11-runtime",
        "2.13.0-rocm-py3.11-runtime",
    }
    assert publisher.digest("2.14.1-cuda-py3.11-runtime") == publisher.digest(CUDA)

    second, report = publisher.publish(matrix)
    assert second.returncode == 0
    assert set(statuses(report).values()) == {"skipped-unchanged"}
    assert "building" not in second.stderr  # nothing was built

    changed = publisher.matrix(extra_13='packages = ["team-extra==1.0"]')
    third, report = publisher.publish(changed)
    assert third.returncode == 0, third.stderr[-3000:]
    assert statuses(report) == {
        CUDA: "skipped-unchanged",
        ROCM: "skipped-unchanged",
        "2.13.0-cuda13.0-py3.11-runtime": "published",
        "2.13.0-rocm7.2-py3.11-runtime": "published",
    }


def test_dry_run_builds_and_pushes_nothing(publisher):
    result, report = publisher.publish(publisher.matrix(), "--dry-run")
    assert result.returncode == 0
    assert set(statuses(report).values()) == {"would-build"} and publisher.tags() == set()


def test_failed_twin_keeps_the_pair_floating_tags_on_the_previous_good_pair(publisher, index):
    matrix = publisher.matrix(include=f'[{{ id = "{CUDA}" }}, {{ id = "{ROCM}" }}]')
    result, _ = publisher.publish(matrix)
    assert result.returncode == 0, result.stderr[-3000:]
    before = {tag: publisher.digest(tag) for tag in ("2.14.1-cuda-py3.11-runtime", "2.14.1-rocm-py3.11-runtime")}
    # the next publish changes a package (both twins rebuild) but the ROCm index now hands out a CUDA torch
    publisher.index_url = index[1].url
    broken = publisher.matrix(extra_14='packages = ["team-extra==2.0"]', include=f'[{{ id = "{CUDA}" }}, {{ id = "{ROCM}" }}]')
    result, report = publisher.publish(broken)
    assert result.returncode == 1
    assert statuses(report) == {CUDA: "published", ROCM: "failed"}
    assert "is not a ROCm 7.2 build (torch.version.cuda=13.0, hip=None)" in next(t for t in report["targets"] if t["id"] == ROCM)["error"]
    assert "floating tags not moved" in report["pairs"]["2.14.1-py3.11-runtime"]
    assert publisher.digest(CUDA) != before["2.14.1-cuda-py3.11-runtime"]  # its immutable tag was pushed...
    assert {tag: publisher.digest(tag) for tag in before} == before  # ...but the pair's floating tags stayed


def test_nightly_retention_keeps_the_newest_and_leaves_foreign_tags(publisher, client):
    matrix = publisher.matrix(include=f'[{{ id = "{CUDA}" }}]')
    for date in ("20261101", "20261102"):
        result, _ = publisher.publish(matrix, "--nightly", "--date", date)
        assert result.returncode == 0, result.stderr[-3000:]
    # a tag of the same shape pushed by someone else (no buildkit labels): never touched
    foreign = f"{publisher.registry}/{publisher.repository}:{CUDA}-nightly-20250101"
    client.images.get("python:3.11-slim-bookworm").tag(foreign)
    client.images.push(foreign, auth_config=dict(zip(("username", "password"), json.loads(publisher.auth_file.read_text()).values())))
    client.images.remove(foreign)
    result, report = publisher.publish(matrix, "--nightly", "--date", "20261103", "--keep", "2")
    assert result.returncode == 0, result.stderr[-3000:]
    tags = publisher.tags()
    assert {t for t in tags if "-nightly-2026" in t} == {f"{CUDA}-nightly-20261102", f"{CUDA}-nightly-20261103"}
    assert f"{CUDA}-nightly-20250101" in tags
    assert {f"{CUDA}-nightly", CUDA} <= tags
    assert not {t for t in tags if t.startswith("2.14.1-cuda-py3.11-runtime")}  # its twin is not selected: no pair tag
    assert report["deleted"] == [f"{publisher.registry}/{publisher.repository}:{CUDA}-nightly-20261101"]


def test_wrong_credentials_fail_clearly_and_push_nothing(publisher, registry):
    result, report = publisher.publish(publisher.matrix(), auth_file=registry.auth_file(password="wrong"))
    assert result.returncode == 2 and report is None
    assert "authentication failed" in result.stderr and "Traceback" not in result.stderr
    assert "building" not in result.stderr
    assert publisher.tags() == set()


def test_bearer_token_registry(tmp_path, index, docker_env, base_image, cleanup_images):
    token_registry = RegistryProcess(tmp_path / "token-registry", auth="token").start()
    try:
        publisher = Publisher(tmp_path, index[0].url, token_registry.address, token_registry.auth_file(), docker_env)
        result, report = publisher.publish(publisher.matrix(include=f'[{{ id = "{CUDA}" }}, {{ id = "{ROCM}" }}]'))
        assert result.returncode == 0, result.stderr[-3000:]
        assert set(statuses(report).values()) == {"published"}
        assert token_registry.token.issued > 0
        assert publisher.tags() >= {CUDA, ROCM, "2.14.1-cuda-py3.11-runtime", "2.14.1-rocm-py3.11-runtime"}
    finally:
        token_registry.stop()


def test_retries_through_500_and_429(publisher, registry):
    proxy = FaultProxy(registry.address)
    proxy.faults = [500, 429, 503, 500, 429]
    try:
        result, report = publisher.publish(publisher.matrix(include=f'[{{ id = "{CUDA}" }}]'), registry=proxy.address)
        assert result.returncode == 0, result.stderr[-3000:]
        assert statuses(report) == {CUDA: "published"} and proxy.faults == []
    finally:
        proxy.stop()


def test_registry_outage_mid_publish_moves_no_floating_tag_and_a_rerun_completes(publisher, registry):
    matrix = publisher.matrix(include=f'[{{ id = "{CUDA}" }}, {{ id = "{ROCM}" }}]')
    proxy = FaultProxy(registry.address)
    proxy.stop_on = "PUT /v2/"  # the first tag move: the images are pushed, no floating tag has moved yet
    result, _ = publisher.publish(matrix, registry=proxy.address)
    assert result.returncode == 1 and "the connection was refused" in result.stderr
    upstream = Registry(registry.address, Credentials(*json.loads(publisher.auth_file.read_text()).values()))
    tags = set(upstream.list_tags(publisher.repository))
    assert {CUDA, ROCM} <= tags and not {"2.14.1-cuda-py3.11-runtime", "2.14.1-rocm-py3.11-runtime"} & tags
    again = FaultProxy(registry.address, port=proxy.port)
    try:
        result, report = publisher.publish(matrix, registry=again.address)
        assert result.returncode == 0, result.stderr[-3000:]
        assert set(statuses(report).values()) == {"skipped-unchanged"}
        assert {"2.14.1-cuda-py3.11-runtime", "2.14.1-rocm-py3.11-runtime"} <= set(upstream.list_tags(publisher.repository))
    finally:
        again.stop()
