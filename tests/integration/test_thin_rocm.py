"""ROCm's thin wheels on the real engine, from TEST DOUBLES of the index layouts (testkit/thin_rocm.py): ROCm 7.14's
family images carrying only their device code, the layered install under max_layer_size, an oversized package
failing before any push, later installs that keep an image narrow; and ROCm 10.1's images per bundle of AMD's
hierarchy (sub-families gfx9_4 and gfx115x) from AMD's whl-next layout, each with its torch and torchvision device
packages in layers of their own (built in the same run as the 7.14 family images: one engine pass)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import requests

from buildkit.adapters.files.bundled import shipped_compat
from testkit.builds import Build, build, index_pip_conf, team_matrix
from testkit.daemon import SpareEngine
from testkit.registry import RegistryProcess
from testkit.runner import run_buildkit
from testkit.thin_rocm import amd_layout_index, thin_rocm_index
from testkit.wheel_index import WheelIndex
from testkit.wheels import build_wheel

pytestmark = pytest.mark.engine

COMPAT = shipped_compat()
TORCH_ARCHS = COMPAT.backend("rocm", "7.14").archs
DEVICE_ARCHS = COMPAT.device_archs("7.14")
MI300, RDNA3 = "2.14.1-rocm7.14-mi300-py3.11-runtime", "2.14.1-rocm7.14-rdna3-py3.11-runtime"
DEVICE_ALL = "2.15.0-rocm7.14-py3.11-runtime"
# ROCm 10.1 from AMD's whl-next index: torch 2.14.0 (the newest it carries), one image per sub-family bundle
GFX9_4, GFX115X = "2.14.0-rocm10.1-gfx9_4-py3.11-runtime", "2.14.0-rocm10.1-gfx115x-py3.11-runtime"
WHL_NEXT = COMPAT.rocm_layouts["amd-whl-next"]
ROCM10_ARCHS = ("gfx942", "gfx1150", "gfx1151")  # what the two bundles carry of 10.1's wheel archs
BUDGET = "30MB"  # the doubles are a hundredth of the real sizes: device-all's ~100 MB cannot be one layer
STACKS = f'''
[[torch]]
version = "2.14.1"
cuda = []
rocm = ["7.14"]
rocm_families = ["mi300", "rdna3"]

[[torch]]
version = "2.15.0"
cuda = []
rocm = ["7.14"]
rocm_families = []
max_layer_size = "{BUDGET}"

# ROCm 10.1's release wheels are on AMD's whl-next index only: no torch release of the data lists them yet
[compat.torch."2.14"]
rocm = ["7.2", "7.14", "10.1"]

[[torch]]
version = "2.14.0"
cuda = []
rocm = ["10.1"]
rocm_families = ["gfx9_4", "gfx115x"]
'''
READ_DISTRIBUTIONS = "import importlib.metadata as m, json; print(json.dumps(sorted(d.metadata['Name'] for d in m.distributions())))"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """PyTorch's layout at /rocm7.14/ (torch 2.14.1 and 2.15.0), AMD's multi-arch layout at /amd/, and a team
    plugin that requires torch (what a user installs into an image later)."""
    folder = tmp_path_factory.mktemp("thin-wheels")
    pytorch = thin_rocm_index(folder / "pytorch", "pytorch", TORCH_ARCHS, DEVICE_ARCHS).wheels
    pytorch += [
        wheel
        for wheel in thin_rocm_index(folder / "pytorch-2.15", "pytorch", TORCH_ARCHS, DEVICE_ARCHS, "2.15.0").wheels
        if wheel.name.startswith(("torch-", "torchvision-"))
    ]
    amd = thin_rocm_index(folder / "amd", "amd-multi-arch", TORCH_ARCHS, DEVICE_ARCHS).wheels
    whl_next = amd_layout_index(folder / "whl-next", WHL_NEXT, COMPAT.amd, "10.1", "2.14.0", COMPAT.backend("rocm", "10.1").archs, ROCM10_ARCHS).wheels
    plugin = build_wheel(folder / "plugin", "team-plugin", "1.0", {"team_plugin/__init__.py": ""}, requires=["torch"])
    server = WheelIndex({"rocm7.14": [*pytorch, plugin], "amd": amd, "whl-next": whl_next, "simple": []}).start()
    yield server
    server.stop()


def matrix(folder: Path, index: WheelIndex, repository: str, include: str, stacks: str = STACKS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    index_pip_conf(folder, index.url)
    return team_matrix(folder, index.url, repository, include, stacks)


@pytest.fixture(scope="module")
def families(index, base_image, docker_env, cleanup_images, repository, tmp_path_factory) -> Build:
    folder = tmp_path_factory.mktemp("families")
    stacks = STACKS + f'\n[compat.rocm_layouts.amd-whl-next]\nindex = "{index.url}/whl-next/"\n'
    path = matrix(folder, index, f"{repository}-thin", '[{ python = "3.11", flavor = "runtime", torch = "2.1[45].*" }]', stacks)
    return build(path, folder / "pip.conf", folder / "out", docker_env, "-j", "2")


def distributions(client, image_id: str) -> list[str]:
    return json.loads(client.containers.run(image_id, ["python", "-c", READ_DISTRIBUTIONS], remove=True).decode())


def device_packages(client, image_id: str) -> set[str]:
    return {name for name in distributions(client, image_id) if "-device-" in name}


def test_family_images_and_device_all_build_and_pass_their_smoke_test(families):
    assert set(families.targets) == {MI300, RDNA3, DEVICE_ALL, GFX9_4, GFX115X}, families.result.stderr[-3000:]
    for target in families.targets.values():
        assert target["status"] == "built", (target["id"], target["error"], target["log_tail"])
        (device_code,) = [check for check in target["smoke"]["checks"] if check["name"] == "device code"]
        assert device_code["passed"], device_code


def test_each_family_image_holds_exactly_its_device_packages(families, client):
    assert device_packages(client, families.targets[MI300]["image_id"]) == {"rocm-sdk-device-gfx942"}
    assert device_packages(client, families.targets[RDNA3]["image_id"]) == {f"rocm-sdk-device-gfx110{n}" for n in range(4)}
    assert device_packages(client, families.targets[DEVICE_ALL]["image_id"]) == {f"rocm-sdk-device-{gfx}" for gfx in DEVICE_ARCHS}


def test_rocm_10_bundle_images_hold_their_torch_and_torchvision_device_packages(families, client):
    """AMD's whl-next layout: per gfx target torch's and the ROCm libraries' packages, per sub-family torch's
    (amd-torch-device-gfx115x), per target torchvision's; the smoke test finds exactly those and torchvision's ops."""
    assert device_packages(client, families.targets[GFX9_4]["image_id"]) == {
        "amd-torch-device-gfx942",
        "amd-torch-device-gfx9-4",
        "rocm-sdk-device-gfx942",
        "amd-torchvision-device-gfx942",
    }
    assert device_packages(client, families.targets[GFX115X]["image_id"]) == {
        *(f"{prefix}-gfx115{n}" for prefix in ("amd-torch-device", "rocm-sdk-device", "amd-torchvision-device") for n in (0, 1)),
        "amd-torch-device-gfx115x",
    }
    for target in (families.targets[GFX9_4], families.targets[GFX115X]):
        checks = {check["name"]: check for check in target["smoke"]["checks"]}
        assert checks["device code"]["passed"] and checks["torchvision ops"]["passed"], (checks["device code"], checks["torchvision ops"])


def test_rocm_10_bundle_images_say_their_bundle_and_variant_and_layer_each_bundle_s_device_code(families, client):
    labels = client.images.get(families.targets[GFX115X]["image_id"]).labels
    assert labels["dev.buildkit.rocm-bundle"] == "gfx115x" and labels["dev.buildkit.companion-device-code"] == "torchvision"
    assert labels["dev.buildkit.wheel-variant"] == "amd :: gfx_arch :: gfx1150; amd :: gfx_arch :: gfx1151"
    layers = [layer["layer"] for layer in families.targets[GFX115X]["layer_sizes"]]
    assert [name for name in layers if name.startswith("device-")] == [
        "device-gfx1150",
        "device-gfx115x",
        "device-gfx1151",
        "device-torchvision-gfx1150",
        "device-torchvision-gfx1151",
    ]
    # the two bundles' images share what comes before their device code: torch's layer and its companions'
    gfx9_4 = families.targets[GFX9_4]
    shared = [layer["layer"] for layer in gfx9_4["layer_sizes"]].index("device-gfx942")
    assert gfx9_4["layers"][:shared] == families.targets[GFX115X]["layers"][:shared]


def test_family_images_share_every_layer_but_their_device_code(families):
    """Built once by BuildKit, stored and pulled once: only the device layers differ."""
    mi300, rdna3 = families.targets[MI300], families.targets[RDNA3]
    assert len(rdna3["layers"]) == len(mi300["layers"]) + 3  # gfx1100-gfx1103 against gfx942
    # everything up to the device code: torch's layer, then its companions'
    shared = [layer["layer"] for layer in mi300["layer_sizes"]].index("device-gfx942")
    assert rdna3["layers"][:shared] == mi300["layers"][:shared]
    assert rdna3["layers"][shared] != mi300["layers"][shared]  # device-gfx1100 against device-gfx942


def test_torch_s_layers_built_again_from_nothing_are_the_same_blobs(families, index, base_image, buildkit_cli, docker_env, repository, tmp_path):
    """A nightly on a fresh runner: the MI300 image built twice on a throwaway engine, its build cache pruned in
    between (every wheel downloaded and installed again, minutes later), has the same digest for every layer of
    torch's install, so a registry and a node that hold the first build's layers take nothing new. (On a throwaway
    engine: a second result for the same cache keys would leave the shared engine's later builds a choice.)"""
    path = matrix(tmp_path, index, f"{repository}-again", f'[{{ id = "{MI300}" }}]')
    spare = SpareEngine(buildkit_cli.docker, tmp_path / "spare.log").start(base_image, context=True)
    try:
        env = {**docker_env, "BUILDKIT_CACHE_DIR": str(tmp_path / "proven")}
        first = build(path, tmp_path / "pip.conf", tmp_path / "first", env, "--builder", spare.context).targets[MI300]
        subprocess.run([buildkit_cli.docker, "builder", "prune", "--all", "--force"], env=spare.env, check=True, capture_output=True)
        second = build(path, tmp_path / "pip.conf", tmp_path / "second", env, "--builder", spare.context).targets[MI300]
    finally:
        spare.stop()
    assert first["status"] == second["status"] == "built", (first["error"], second["error"])
    plan = json.loads((tmp_path / "first" / "contexts" / MI300 / "buildkit" / "torch-install.json").read_text())

    def digests(target):
        return {layer["layer"]: digest for layer, digest in zip(target["layer_sizes"], target["layers"], strict=True)}

    installed = [layer["name"] for layer in plan["layers"]]
    assert {name: digests(first)[name] for name in installed} == {name: digests(second)[name] for name in installed}
    assert digests(first)[installed[0]] == digests(families.targets[MI300])[installed[0]]  # and the shared engine's build's


def test_the_report_says_what_a_node_holding_one_family_image_pays_for_another(families):
    # what the first build's report says a node holding the MI300 image pays for the RDNA3 one: it unpacks its device
    # code and its own steps above it, and fetches those but the few of its steps whose files are the MI300 image's
    cost = {share["held"]: share for share in families.targets[RDNA3]["shares"]}[MI300]
    sizes = families.targets[RDNA3]["layer_sizes"]
    above = sum(layer["bytes"] for layer in sizes[[layer["layer"] for layer in sizes].index("device-gfx1100") :])
    device = sum(layer["bytes"] for layer in sizes if layer["layer"].startswith("device-"))
    assert cost["unpacked_bytes"] == above and device <= cost["fetched_bytes"] <= above
    assert {"rocm-sdk-core", "rocm-sdk-libraries", "torch", "companions"} <= set(cost["shared_layers"])


def test_device_all_keeps_every_layer_under_max_layer_size(families):
    target = families.targets[DEVICE_ALL]
    budget = 30 * 10**6
    # the layers torch's install wrote (the base image's own layers are the base's)
    plan = json.loads((families.out / "contexts" / DEVICE_ALL / "buildkit" / "torch-install.json").read_text())
    installed = {layer["name"] for layer in plan["layers"]}
    sizes = {layer["layer"]: layer["bytes"] for layer in target["layer_sizes"] if layer["layer"] in installed}
    assert {"torch", "rocm-sdk-core", "rocm-sdk-libraries"} <= set(sizes)
    assert max(sizes.values()) <= budget, target["largest_layers"]
    device = sum(size for name, size in sizes.items() if name.startswith("device-"))
    assert len([name for name in sizes if name.startswith("device-")]) == len(DEVICE_ARCHS)
    assert device > 2 * budget  # one layer could not have held it
    assert target["largest_layers"][0] == max(target["layer_sizes"], key=lambda layer: layer["bytes"])


def test_a_later_pip_install_keeps_the_image_narrow(families, client, index):
    """torch's own metadata asks for rocm[device-all]: pip walks it whenever it resolves against torch, so the
    image's installer narrowed it; installing a package that requires torch adds no device package."""
    image = families.targets[MI300]["image_id"]
    command = ["sh", "-c", f'pip install --quiet --index-url {index.url}/rocm7.14/ team-plugin && python -c "{READ_DISTRIBUTIONS}"']
    # as root, as a Dockerfile FROM the image installs (its venv is root's; the image runs as UID 1000)
    output = client.containers.run(image, command, network_mode="host", user="0", remove=True).decode()
    installed = json.loads(output.splitlines()[-1])
    assert "team-plugin" in installed
    assert {name for name in installed if "-device-" in name} == {"rocm-sdk-device-gfx942"}


def test_gpu_arch_narrows_a_device_all_target_to_exactly_that_device_package(index, base_image, docker_env, cleanup_images, repository, client, tmp_path):
    path = matrix(tmp_path, index, f"{repository}-arch", f'[{{ id = "{DEVICE_ALL}" }}]')
    narrowed = build(path, tmp_path / "pip.conf", tmp_path / "out", docker_env, "--gpu-arch", "gfx942")
    target = narrowed.targets[DEVICE_ALL]
    assert target["status"] == "built", (target["error"], target["log_tail"])
    assert device_packages(client, target["image_id"]) == {"rocm-sdk-device-gfx942"}


def test_amd_multi_arch_layout_installs_torch_with_its_device_extra(index, base_image, docker_env, cleanup_images, repository, client, tmp_path):
    stacks = STACKS + f'\n[compat.rocm."7.14"]\nlayout = "amd-multi-arch"\n[compat.rocm_layouts.amd-multi-arch]\nindex = "{index.url}/amd/"\n'
    path = matrix(tmp_path, index, f"{repository}-amd", f'[{{ id = "{MI300}" }}]', stacks)
    built = build(path, tmp_path / "pip.conf", tmp_path / "out", docker_env)
    target = built.targets[MI300]
    assert target["status"] == "built", (target["error"], target["log_tail"])
    installed = distributions(client, target["image_id"])
    assert {name for name in installed if "-device-" in name} == {"amd-torch-device-gfx942", "rocm-sdk-device-gfx942"}
    assert "torch" in installed and "rocm-sdk-libraries" in installed


def test_a_package_above_the_budget_fails_the_publish_before_any_push(index, base_image, docker_env, cleanup_images, repository, tmp_path):
    registry = RegistryProcess(tmp_path / "registry").start()
    try:
        stacks = STACKS.replace(f'max_layer_size = "{BUDGET}"', 'max_layer_size = "5MB"')
        path = matrix(tmp_path, index, f"{repository}-budget", f'[{{ id = "{DEVICE_ALL}" }}]', stacks)
        result = run_buildkit(
            "publish",
            "--matrix",
            path,
            "--registry",
            registry.address,
            "--network",
            "host",
            "--gpu-gate",
            "off",
            "--pip-conf",
            tmp_path / "pip.conf",
            "--out",
            tmp_path / "out",
            env=docker_env,
        )
        assert result.returncode == 1
        report = json.loads((tmp_path / "out" / "publish.json").read_text())
        (target,) = report["targets"]
        # the layers build side by side: whichever oversized package's stage fails first is named, with its size
        found = re.search(r"(\S+\.whl) is ([0-9.]+) MB, more than max_layer_size \(5\.0 MB\)", target["error"])
        assert found, target["error"]
        wheel = next(path for path in index.indexes["rocm7.14"] if path.name == found.group(1))
        assert float(found.group(2)) == round(wheel.stat().st_size / 1e6, 1) > 5.0
        catalog = requests.get(f"http://{registry.address}/v2/_catalog", timeout=10).json()
        assert catalog["repositories"] == []  # nothing was pushed, not even a layer
    finally:
        registry.stop()
