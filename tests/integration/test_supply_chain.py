"""Signatures, provenance, SBOM and the signed GPU test, end to end on 127.0.0.1: BuildKit pushes a small
image with SLSA provenance to Debian's docker-registry, the real cosign signs and attests it with a key pair
made here, and `buildkit verify` (and cosign itself) check the result.

The image carries a TEST DOUBLE torch (ROCm 7.2 build facts, no GPU): the real probe's CPU-only report of
it is real; GPU runs come from TEST DOUBLE reports (testkit.gpu_reports) since no GPU exists here.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import uuid
from dataclasses import dataclass
from pathlib import Path

import docker.errors
import pytest

from buildkit.adapters.engine import buildx, docker_sdk
from buildkit.adapters.registry.client import Registry, load_credentials
from buildkit.adapters.supply_chain.cosign import Cosign, CosignError, Signer, Trust
from buildkit.app.smoke import smoke_test
from buildkit.app.verify import attach_sbom, attest_gpu, gpu_attestation, published_facts, sign
from buildkit.core.host.facts import Gpu, HostFacts
from buildkit.core.labels import ImageIdentity
from buildkit.core.release.judge import judge
from buildkit.core.supply_chain.attestation import GPU_TEST_TYPE
from buildkit.ui import views
from testkit.gpu_reports import gpu_report_double
from testkit.registry import RegistryProcess, free_port
from testkit.wheels import torch_double
from tests.integration.conftest import unavailable

pytestmark = pytest.mark.engine

FINGERPRINT = "5" * 64
LABELS = {
    "dev.buildkit.target": "2.14.1-rocm7.2-py3.11-runtime",
    "dev.buildkit.vendor": "amd",
    "dev.buildkit.backend": "rocm",
    "dev.buildkit.backend-version": "7.2",
    "dev.buildkit.gpu-archs": "gfx90a;gfx942",
    "dev.buildkit.torch": "2.14.1",
    "dev.buildkit.fingerprint": FINGERPRINT,
}
MI300X_HOST = HostFacts(gpus=(Gpu("amd", "0000:03:00.0", "0x74a1", "AMD Instinct MI300X", "gfx942"),), amdgpu_driver="6.12.12", amdgpu_loaded=True)
H100_HOST = HostFacts(gpus=(Gpu("nvidia", "0000:41:00.0", "0x2330", "NVIDIA H100 80GB HBM3", "sm_90"),), nvidia_driver="580.65.06")
PASSWORD = "pw-" + uuid.uuid4().hex


@dataclass
class Setup:
    registry: RegistryProcess
    local: str  # the tag in the engine (and in the registry)
    pinned: str  # registry/repository@sha256:... of the pushed index
    keys: Path
    cosign: Cosign

    def key(self, name: str = "signer") -> str:
        return str(self.keys / name / "cosign.key")

    def pub(self, name: str = "signer") -> str:
        return str(self.keys / name / "cosign.pub")


def _key_pair(folder: Path, password: str) -> None:
    folder.mkdir(parents=True)
    subprocess.run(["cosign", "generate-key-pair"], cwd=folder, env={**os.environ, "COSIGN_PASSWORD": password}, check=True, capture_output=True, timeout=60)


@pytest.fixture(scope="module")
def setup(client, base_image, docker_env, tmp_path_factory):
    if shutil.which("cosign") is None:
        unavailable("cosign is not installed (Debian 13: apt-get install -t trixie cosign)")
    folder = tmp_path_factory.mktemp("supply")
    registry = RegistryProcess(folder / "registry").start()
    context = folder / "context"
    wheel = torch_double(context, "2.14.1", "rocm7.2", None, "7.2.26015", ["gfx90a", "gfx942"])
    (context / "Dockerfile").write_text(
        f"FROM {base_image}\nCOPY {wheel.name} /tmp/\n"
        f"RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install --no-index --no-deps /tmp/{wheel.name} && rm /tmp/{wheel.name}\n"
        "ENV PATH=/opt/venv/bin:$PATH\n"
    )
    local = f"{registry.address}/supply/pytorch:2.14.1-rocm7.2-py3.11-runtime"
    labels = [argument for key, value in LABELS.items() for argument in ("--label", f"{key}={value}")]
    # --label (not LABEL in the Dockerfile) so that mode=max provenance records them, the fingerprint among them
    subprocess.run(
        [docker_env[buildx.DOCKER_ENV], "buildx", "build", "--push", "--provenance=mode=max", *labels, "-t", local, str(context)],
        env=docker_env,
        check=True,
        capture_output=True,
        timeout=300,
    )
    keys = folder / "keys"
    _key_pair(keys / "signer", PASSWORD)
    _key_pair(keys / "stranger", "other-" + PASSWORD)
    digest = Registry(registry.address).head_manifest("supply/pytorch", local.rpartition(":")[2])
    cosign = Cosign(registry.address, environ={**os.environ, "COSIGN_PASSWORD": PASSWORD})
    yield Setup(registry, local, f"{registry.address}/supply/pytorch@{digest}", keys, cosign)
    registry.stop()
    _remove(client, local)


def _remove(client, reference: str) -> None:
    """Best effort, as the shared engine's other users may be removing images too."""
    with contextlib.suppress(docker.errors.APIError):
        client.images.remove(reference, force=True)


def verify(cli, setup: Setup, *extra: str, key: str | None = None):
    return cli("verify", setup.local, "--key", key or setup.pub(), *extra)


def test_supply_chain_end_to_end(cli, client, setup):
    signer = Signer(setup.key())
    identity = ImageIdentity.read(LABELS)

    # an unsigned image: every signed fact is missing, provenance is there (BuildKit pushed it)
    result = verify(cli, setup)
    assert result.code == 1
    assert "FAIL  signature: no signature" in result.out
    assert "ok    provenance: built by https://mobyproject.org/buildkit@v1; from pkg:docker/python@3.11-slim-bookworm" in result.out
    assert f"fingerprint {FINGERPRINT[:12]}" in result.out
    assert "FAIL  sbom: no SBOM attestation" in result.out and "FAIL  gpu test: no GPU test attestation" in result.out
    facts, why = published_facts(setup.local)  # doctor's view, signatures not checked
    assert why == "" and [(f.name, f.ok, f.detail) for f in facts.facts][2:] == [
        ("sbom", False, "no SBOM attestation is attached"),
        ("gpu test", False, "no GPU test attestation is attached"),
    ]

    # signed, SBOM attached: the GPU test is what is missing
    sign(setup.cosign, setup.pinned, signer)
    document = attach_sbom(setup.cosign, client, setup.local, setup.pinned, signer)
    result = verify(cli, setup)
    assert result.code == 1
    assert f"ok    signature: signed (key {setup.pub()})" in result.out
    assert "ok    sbom: CycloneDX 1.5" in result.out and "FAIL  gpu test: no GPU test attestation" in result.out
    assert result.out.splitlines()[-1] == "NOT verified: gpu test failed"
    purls = {c.get("purl", "") for c in document["components"]}
    assert "pkg:pypi/torch@2.14.1%2Brocm7.2" in purls
    assert any(p.startswith("pkg:deb/debian/libc6@") for p in purls)

    # the real smoke test of the image here, on the CPU, passes its checks but ran no kernel: not a GPU test
    verdict = smoke_test(client, setup.local, "auto", HostFacts())
    assert verdict.passed and verdict.kernels == "skipped (no AMD GPU on this host)", verdict.failures
    attest_gpu(setup.cosign, setup.pinned, verdict, identity, HostFacts(), "auto", signer)
    result = verify(cli, setup)
    assert result.code == 1
    assert "FAIL  gpu test: no passing test on an AMD GPU: kernels did not run on any AMD GPU (kernels: skipped (no AMD GPU on this host))" in result.out

    # TEST DOUBLE: an H100 run of a CUDA twin, attached to this ROCm image: the other vendor does not count
    cuda_identity = ImageIdentity.read(
        {**LABELS, "dev.buildkit.backend": "cuda", "dev.buildkit.backend-version": "13.0", "dev.buildkit.vendor": "nvidia", "dev.buildkit.gpu-archs": "9.0"}
    )
    h100 = judge(setup.local, cuda_identity, gpu_report_double("nvidia"), "require", True)
    attest_gpu(setup.cosign, setup.pinned, h100, cuda_identity, H100_HOST, "require", signer)
    result = verify(cli, setup)
    assert result.code == 1 and "the GPU test is for a nvidia image, this image is AMD's" in result.out
    assert gpu_attestation(setup.cosign, setup.pinned, Trust(key=setup.pub()), "amd") is None

    # TEST DOUBLE: an MI300X run with every kernel passing: verified
    mi300x = judge(setup.local, identity, gpu_report_double("amd", devices=8), "require", True)
    predicate = attest_gpu(setup.cosign, setup.pinned, mi300x, identity, MI300X_HOST, "require", signer)
    result = verify(cli, setup)
    assert result.code == 0, result.out + result.err
    assert "ok    gpu test: passed on an AMD GPU (1 run(s))" in result.out
    assert "  tested: 8 x AMD Instinct MI300X (gfx942); amdgpu 6.12.12; torch 2.14.1+rocm7.2 (HIP 7.2.26015);" in result.out
    assert result.out.splitlines()[-1].startswith("verified: ")
    found = gpu_attestation(setup.cosign, setup.pinned, Trust(key=setup.pub()), "amd", "gfx942")
    assert found == predicate

    # an arch the test did not cover
    result = verify(cli, setup, "--tested-arch", "gfx90a")
    assert result.code == 1 and "kernels ran on gfx942, not on gfx90a" in result.out
    assert verify(cli, setup, "--tested-arch", "gfx942").code == 0

    # another key: nothing verifies
    result = verify(cli, setup, key=setup.pub("stranger"))
    assert result.code == 1
    assert f"FAIL  signature: signature present, but none verifies with key {setup.pub('stranger')}" in result.out
    assert "FAIL  sbom: SBOM attestation present, but none verifies" in result.out
    assert "FAIL  gpu test: GPU test attestation present, but none verifies" in result.out

    # JSON for machines
    result = verify(cli, setup, "--json")
    report = json.loads(result.out)
    assert result.code == 0 and report["passed"] and report["vendor"] == "amd" and report["image"] == setup.pinned
    assert [c["name"] for c in report["checks"]] == ["signature", "provenance", "sbom", "gpu test"]
    assert report["gpu_tests"][0]["predicate"]["devices"][7]["name"] == "AMD Instinct MI300X"
    # the image's layers as the registry stores them (what `report --html` shows a node pulls), each by its step
    manifest = Registry(setup.registry.address).get_manifest("supply/pytorch", setup.pinned.partition("@")[2])
    platform = json.loads(manifest.body)["manifests"][0]["digest"] if manifest.is_index else manifest.digest
    layers = json.loads(Registry(setup.registry.address).get_manifest("supply/pytorch", platform).body)["layers"]
    assert [(layer["digest"], layer["bytes"]) for layer in report["layers"]] == [(layer["digest"], layer["size"]) for layer in layers]
    assert report["layers"][-1]["name"].startswith("RUN /bin/sh -c python3 -m venv /opt/venv"), report["layers"]

    # cosign itself agrees
    flags = ["--key", setup.pub(), "--insecure-ignore-tlog", "--allow-insecure-registry"]
    assert subprocess.run(["cosign", "verify", *flags, setup.pinned], capture_output=True, timeout=60).returncode == 0
    attested = subprocess.run(["cosign", "verify-attestation", "--type", GPU_TEST_TYPE, *flags, setup.pinned], capture_output=True, text=True, timeout=60)
    assert attested.returncode == 0 and len(attested.stdout.splitlines()) == 3  # CPU-only, H100, MI300X: all signed
    stranger = ["--key", setup.pub("stranger"), "--insecure-ignore-tlog", "--allow-insecure-registry"]
    assert subprocess.run(["cosign", "verify", *stranger, setup.pinned], capture_output=True, timeout=60).returncode != 0
    assert subprocess.run(["cosign", "verify-attestation", "--type", "cyclonedx", *flags, setup.pinned], capture_output=True, timeout=60).returncode == 0

    # the SBOM from the registry (verified), and generated from the local image
    result = cli("sbom", setup.local, "--key", setup.pub())
    assert result.code == 0 and json.loads(result.out) == document
    assert "signature verified with key" in result.err
    result = cli("sbom", setup.local, "--local")
    local = json.loads(result.out)
    assert result.code == 0 and {c.get("purl", "") for c in local["components"]} == purls
    assert "generated from" in result.err

    # doctor's view without a key: the same facts, marked as not checked
    facts, why = published_facts(setup.local)
    assert why == "" and not facts.verified and not facts.passed
    assert [(f.name, f.ok) for f in facts.facts] == [("signature", True), ("provenance", True), ("sbom", True), ("gpu test", True)]
    assert facts.facts[0].detail.startswith("not checked")
    assert views.verification_lines(facts)[-1].startswith("signatures not checked")
    assert published_facts("python:3.11-slim-bookworm") == (None, "the image names no registry: signatures and attestations live in a registry")


def test_an_image_the_registry_lacks_is_named(cli, setup):
    missing = f"{setup.registry.address}/supply/pytorch@sha256:{'0' * 64}"
    result = cli("verify", missing, "--key", setup.pub())
    assert result.code == 2 and result.err == f"error: {missing}: no such image in {setup.registry.address}\n"
    result = cli("sbom", f"{setup.registry.address}/supply/pytorch:no-such-tag")
    assert result.code == 2 and "no such image" in result.err
    facts, why = published_facts(missing)
    assert facts is None and why == f"{missing}: no such image in {setup.registry.address}"


def test_cosign_refusals_are_one_message_exit_1(setup):
    wrong = Cosign(setup.registry.address, environ={**os.environ, "COSIGN_PASSWORD": "not-the-password"})
    with pytest.raises(CosignError) as raised:
        wrong.sign(setup.pinned, Signer(setup.key()))
    assert raised.value.exit_code == 1
    assert str(raised.value).endswith(f"cosign sign: $COSIGN_PASSWORD does not open the key {setup.key()}")
    assert "not-the-password" not in str(raised.value)

    down = f"127.0.0.1:{free_port()}/supply/pytorch@{setup.pinned.rpartition('@')[2]}"
    gone = Cosign(down.split("/")[0], environ=dict(os.environ))
    with pytest.raises(CosignError, match=r"the registry 127\.0\.0\.1:\d+ refused cosign verify: .*connection refused"):
        gone.verify(down, Trust(key=setup.pub()))


def test_credentials_reach_cosign_through_a_private_docker_config(client, setup, tmp_path):
    """A registry with htpasswd auth: cosign gets the credentials (never as an argument) and signs; without
    them the registry's refusal is one message."""
    private = RegistryProcess(tmp_path / "private", auth="htpasswd").start()
    reference = f"{private.address}/supply/pytorch:auth"
    try:
        client.images.get(setup.local).tag(f"{private.address}/supply/pytorch", "auth")
        docker_sdk.push_image(client, reference, private.user, private.password)
        credentials = load_credentials(private.address, private.auth_file())
        digest = Registry(private.address, credentials).head_manifest("supply/pytorch", "auth")
        pinned = f"{private.address}/supply/pytorch@{digest}"
        environ = {**os.environ, "COSIGN_PASSWORD": PASSWORD, "DOCKER_CONFIG": str(tmp_path / "no-docker-config")}
        Cosign(private.address, credentials, environ=environ).sign(pinned, Signer(setup.key()))
        assert Cosign(private.address, credentials, environ=environ).verify(pinned, Trust(key=setup.pub())).ok
        with pytest.raises(CosignError) as raised:
            Cosign(private.address, environ=environ).verify(pinned, Trust(key=setup.pub()))
        assert raised.value.exit_code == 1
        assert str(raised.value).startswith(f"{pinned}: the registry {private.address} refused cosign verify: ")
        assert private.password not in str(raised.value)
    finally:
        private.stop()
        _remove(client, reference)
