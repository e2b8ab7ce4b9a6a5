"""The GPU gate on floating tags, as the nightly runs it: build jobs publish and sign each twin with its
smoke test attached; the tag job (`--require-published`) builds nothing and moves a pair's floating tags
only when both twins carry a signed, passing GPU test of their vendor. No GPU exists here: the passing
GPU runs are TEST DOUBLE reports (testkit/gpu_reports.py), signed and attached exactly as a GPU runner's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid

import pytest

from buildkit.adapters.registry.client import Registry
from buildkit.adapters.supply_chain.cosign import Cosign, Signer
from buildkit.app.verify import attest_gpu
from buildkit.core.host.facts import Gpu, HostFacts
from buildkit.core.labels import ImageIdentity
from buildkit.core.release.judge import judge
from testkit.builds import index_pip_conf, pair_doubles, team_matrix
from testkit.gpu_reports import gpu_report_double
from testkit.registry import RegistryProcess
from testkit.runner import run_buildkit
from testkit.session import session_repository
from testkit.wheel_index import WheelIndex

pytestmark = pytest.mark.engine
CUDA, ROCM = "2.14.1-cuda13.0-py3.11-runtime", "2.14.1-rocm7.2-py3.11-runtime"
FLOATING = {"2.14.1-cuda-py3.11-runtime", "2.14.1-rocm-py3.11-runtime"}
PASSWORD = "pw-" + uuid.uuid4().hex
HOSTS = {
    "nvidia": HostFacts(gpus=(Gpu("nvidia", "0000:41:00.0", "0x2330", "NVIDIA H100 80GB HBM3", "sm_90"),), nvidia_driver="580.126.20"),
    "amd": HostFacts(gpus=(Gpu("amd", "0000:03:00.0", "0x74a1", "AMD Instinct MI300X", "gfx942"),), amdgpu_driver="6.12.12"),
}


@pytest.fixture(scope="module")
def nightly(tmp_path_factory, base_image, docker_env, cleanup_images):
    if shutil.which("cosign") is None:
        pytest.fail("cosign is not installed (Debian 13: apt-get install -t trixie cosign)")
    folder = tmp_path_factory.mktemp("gate")
    wheels = folder / "wheels"
    index = WheelIndex({**pair_doubles(wheels, {"2.14.1": "0.29.1"}), "simple": []}).start()
    registry = RegistryProcess(folder / "registry").start()
    subprocess.run(["cosign", "generate-key-pair"], cwd=folder, env={**os.environ, "COSIGN_PASSWORD": PASSWORD}, check=True, capture_output=True, timeout=60)
    repository = session_repository("gate")
    matrix = team_matrix(
        folder, index.url, repository, f'[{{ id = "{CUDA}" }}, {{ id = "{ROCM}" }}]', '[[torch]]\nversion = "2.14.1"\ncuda = ["13.0"]\nrocm = ["7.2"]\n'
    )
    pip_conf = index_pip_conf(folder, index.url)
    env = {**docker_env, "COSIGN_PASSWORD": PASSWORD}

    def publish(*extra: str, out: str):
        result = run_buildkit(
            "publish",
            "--matrix",
            matrix,
            "--registry",
            registry.address,
            "--network",
            "host",
            "--pip-conf",
            pip_conf,
            "--out",
            folder / out,
            "-j",
            "2",
            *extra,
            env=env,
        )
        report = folder / out / "publish.json"
        return result, json.loads(report.read_text()) if report.exists() else None

    yield folder, registry, repository, publish
    registry.stop()
    index.stop()


def tags(registry: RegistryProcess, repository: str) -> set[str]:
    return set(Registry(registry.address).list_tags(repository))


def test_tag_job_refuses_an_unpublished_twin_and_builds_nothing(nightly):
    folder, registry, repository, publish = nightly
    result, report = publish("--require-published", "--verify-key", folder / "cosign.pub", out="early")
    assert result.returncode == 1 and "building" not in result.stderr
    assert {t["id"]: t["status"] for t in report["targets"]} == {CUDA: "not-published", ROCM: "not-published"}
    assert "not in the registry: its build job did not publish it" in report["targets"][0]["error"]
    assert not tags(registry, repository)


def test_build_jobs_publish_and_sign_but_a_cpu_smoke_test_moves_no_floating_tag(nightly):
    folder, registry, repository, publish = nightly
    for target in (CUDA, ROCM):  # one build job per twin, as the nightly runs them
        result, report = publish("--select", f"id={target}", "--sign", folder / "cosign.key", out=f"build-{target}")
        assert result.returncode == 0, result.stderr[-3000:]
        assert report["targets"][0]["status"] == "published" and not report["targets"][0]["error"]
    result, report = publish("--require-published", "--verify-key", folder / "cosign.pub", out="tags-cpu")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "has no passing GPU test for its vendor" in report["pairs"]["2.14.1-py3.11-runtime"]
    assert not FLOATING & tags(registry, repository) and {CUDA, ROCM} <= tags(registry, repository)


def test_tag_job_moves_the_pair_once_both_twins_carry_a_signed_passing_gpu_test(nightly):
    folder, registry, repository, publish = nightly
    client = Registry(registry.address)
    cosign = Cosign(registry.address, environ={**os.environ, "COSIGN_PASSWORD": PASSWORD})
    signer = Signer(str(folder / "cosign.key"))

    def attest(target: str, vendor: str) -> None:
        digest = client.head_manifest(repository, target)
        identity = ImageIdentity.read(client.image_labels(repository, target)[1])
        verdict = judge(target, identity, gpu_report_double(vendor), "require", True)  # TEST DOUBLE: a GPU runner's run
        attest_gpu(cosign, f"{registry.address}/{repository}@{digest}", verdict, identity, HOSTS[vendor], "require", signer)

    attest(CUDA, "nvidia")
    result, report = publish("--require-published", "--verify-key", folder / "cosign.pub", out="tags-half")
    assert result.returncode == 0 and f"{ROCM} has no passing GPU test" in report["pairs"]["2.14.1-py3.11-runtime"]
    assert not FLOATING & tags(registry, repository)  # never half a pair

    attest(ROCM, "amd")
    result, report = publish("--require-published", "--verify-key", folder / "cosign.pub", out="tags-both")
    assert result.returncode == 0, result.stderr[-3000:]
    assert report["pairs"]["2.14.1-py3.11-runtime"] == "floating tags moved"
    assert tags(registry, repository) >= FLOATING
    assert client.head_manifest(repository, "2.14.1-rocm-py3.11-runtime") == client.head_manifest(repository, ROCM)
    # a key that did not sign those attestations proves nothing
    stranger = folder / "stranger"
    stranger.mkdir()
    subprocess.run(["cosign", "generate-key-pair"], cwd=stranger, env={**os.environ, "COSIGN_PASSWORD": "x"}, check=True, capture_output=True)
    result, report = publish("--require-published", "--verify-key", stranger / "cosign.pub", out="tags-stranger")
    assert "has no passing GPU test" in report["pairs"]["2.14.1-py3.11-runtime"]
