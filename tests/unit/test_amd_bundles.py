"""Images per bundle of AMD's hierarchy (rocm-bootstrap's): a stack asking for sub-family images plans one AMD image
per bundle, each with the device packages its layout publishes for it (torch's, and torchvision's where the layout
has them, each in a layer of its own), its bundle and its WheelNext variant in plan JSON and labels. ROCm 10's
release wheels are on AMD's whl-next index only; no torch release of the data lists them yet, so the stacks here
add 10.1 to torch 2.14 as a team would ([compat.torch]). The engine builds them in tests/integration/test_thin_rocm.py."""

from __future__ import annotations

import json

import pytest

from buildkit.app.targets import Choices, select_targets

ROCM10 = """
extends = "default"
[compat.torch."2.14"]
rocm = ["7.2", "7.14", "10.1"]
[[torch]]
version = "2.14.0"
python = ["3.12"]
flavors = ["runtime"]
cuda = []
rocm = ["10.1"]
rocm_families = ["gfx9_4", "gfx115x", "gfx12_0"]
"""
# a layout whose device packages are all cut at the sub-family level: one package of each kind per bundle
SUB_FAMILY_LAYOUT = """
[compat.rocm_layouts.amd-whl-next]
device = ["amd-torch-device-{sub_family}", "rocm-sdk-device-{sub_family}"]
companion_device = { torchvision = ["amd-torchvision-device-{sub_family}"] }
arch_extra = "device-{sub_family}"
"""
IDS = [f"2.14.0-rocm10.1-{bundle}-py3.12-runtime" for bundle in ("gfx9_4", "gfx115x", "gfx12_0")]


def plan_json(cli, path) -> dict[str, dict]:
    result = cli("plan", "--matrix", path, "--format", "json", "--select", "torch=2.14.0")
    assert result.code == 0, result.err
    return {target["id"]: target for target in json.loads(result.out)}


def rendered(team_matrix, text: str) -> dict:
    return {item.target.id: item for item in select_targets(Choices(matrix=team_matrix(text), selectors=("torch=2.14.0",))).render()}


def test_sub_family_images_plan_one_amd_image_per_bundle_with_the_whl_next_device_packages(cli, team_matrix):
    targets = plan_json(cli, team_matrix(ROCM10))
    assert list(targets) == IDS
    strix = targets[IDS[1]]
    assert strix["family"] == strix["bundle"] == "gfx115x" and strix["gpu_archs"] == ["gfx1150", "gfx1151"]  # those 10.1's wheels carry
    assert strix["index_url"] == "https://stable.repo.amd.com/rocm/whl-next/"
    # whl-next: torch's kernels per target and per sub-family, the ROCm libraries' per target; torchvision's per target
    assert strix["device_packages"] == [
        "amd-torch-device-gfx1150",
        "rocm-sdk-device-gfx1150",
        "amd-torch-device-gfx115x",
        "amd-torch-device-gfx1151",
        "rocm-sdk-device-gfx1151",
        "amd-torchvision-device-gfx1150",
        "amd-torchvision-device-gfx1151",
    ]
    assert strix["companion_device_packages"] == {"torchvision": ["amd-torchvision-device-gfx1150", "amd-torchvision-device-gfx1151"]}
    assert strix["wheel_variant"] == ["amd :: gfx_arch :: gfx1150", "amd :: gfx_arch :: gfx1151"]
    labels = strix["labels"]
    assert labels["dev.buildkit.rocm-bundle"] == "gfx115x" and labels["dev.buildkit.rocm-family"] == "gfx115x"
    assert labels["dev.buildkit.wheel-variant"] == "amd :: gfx_arch :: gfx1150; amd :: gfx_arch :: gfx1151"
    assert labels["dev.buildkit.companion-device-code"] == "torchvision"
    assert labels["dev.buildkit.device-packages"] == ",".join(strix["device_packages"])
    assert targets[IDS[0]]["device_packages"] == [
        "amd-torch-device-gfx942",
        "rocm-sdk-device-gfx942",
        "amd-torch-device-gfx9-4",
        "amd-torchvision-device-gfx942",
    ]
    assert targets[IDS[2]]["bundle"] == "gfx12_0" and "amd-torch-device-gfx12-0" in targets[IDS[2]]["device_packages"]


def test_each_bundle_s_device_code_is_a_layer_of_its_own_and_torchvision_asks_for_its_extras(team_matrix):
    item = rendered(team_matrix, ROCM10)[IDS[1]]
    plan = json.loads(item.support["torch-install.json"])
    assert plan["requirements"] == ["torch[device-gfx1150,device-gfx1151]==2.14.0+rocm10.1.0", "torchvision[device-gfx1150,device-gfx1151]==0.29.0+rocm10.1.0"]
    device = {layer["name"]: layer["packages"] for layer in plan["layers"] if layer["name"].startswith("device-")}
    assert device == {
        "device-gfx1150": ["amd-torch-device-gfx1150", "rocm-sdk-device-gfx1150"],
        "device-gfx115x": ["amd-torch-device-gfx115x"],
        "device-gfx1151": ["amd-torch-device-gfx1151", "rocm-sdk-device-gfx1151"],
        "device-torchvision-gfx1150": ["amd-torchvision-device-gfx1150"],
        "device-torchvision-gfx1151": ["amd-torchvision-device-gfx1151"],
    }
    assert [layer["name"] for layer in plan["layers"]][-len(device) :] == list(device)  # last: what a family changes


def test_a_layout_cut_at_the_sub_family_level_installs_one_package_of_each_kind_per_bundle(cli, team_matrix):
    targets = plan_json(cli, team_matrix(ROCM10 + SUB_FAMILY_LAYOUT))
    assert {target_id: target["device_packages"] for target_id, target in targets.items()} == {
        IDS[0]: ["amd-torch-device-gfx9-4", "rocm-sdk-device-gfx9-4", "amd-torchvision-device-gfx9-4"],
        IDS[1]: ["amd-torch-device-gfx115x", "rocm-sdk-device-gfx115x", "amd-torchvision-device-gfx115x"],
        IDS[2]: ["amd-torch-device-gfx12-0", "rocm-sdk-device-gfx12-0", "amd-torchvision-device-gfx12-0"],
    }
    plan = json.loads(rendered(team_matrix, ROCM10 + SUB_FAMILY_LAYOUT)[IDS[2]].support["torch-install.json"])
    assert plan["requirements"][0] == "torch[device-gfx12-0]==2.14.0+rocm10.1.0"  # the bundle's extra, named as AMD names it


def test_product_families_name_their_bundle_and_carry_the_same_device_code(cli, team_matrix):
    targets = plan_json(cli, team_matrix(ROCM10.replace('["gfx9_4", "gfx115x", "gfx12_0"]', '["mi300", "strix-point", "strix-halo"]')))
    assert {t["family"]: t["bundle"] for t in targets.values()} == {"mi300": "gfx9_4", "strix-point": "gfx115x", "strix-halo": "gfx1151"}
    assert targets["2.14.0-rocm10.1-strix-halo-py3.12-runtime"]["gpu_archs"] == ["gfx1151"]
    assert targets["2.14.0-rocm10.1-mi300-py3.12-runtime"]["device_packages"][:3] == [
        "amd-torch-device-gfx942",
        "rocm-sdk-device-gfx942",
        "amd-torch-device-gfx9-4",
    ]


@pytest.mark.parametrize(
    "families, expected",
    [
        ('["gfx9_9"]', "unknown ROCm family 'gfx9_9'"),
        ('["gfx10_1"]', "family gfx10_1 (gfx1010, gfx1011, gfx1012, gfx1013) has no gfx target in the ROCm 10.1 wheels' arch list"),
    ],
)
def test_a_bundle_neither_knows_or_the_wheels_lack_is_refused(cli, team_matrix, families, expected):
    result = cli("matrix", "validate", "--matrix", team_matrix(ROCM10.replace('["gfx9_4", "gfx115x", "gfx12_0"]', families)))
    assert result.code == 2 and expected in result.err, result.err


def test_gpu_arch_narrows_a_bundle_image_to_its_targets_device_code(team_matrix):
    from buildkit.app.targets import SourceOptions

    selection = select_targets(Choices(matrix=team_matrix(ROCM10), selectors=("torch=2.14.0",), source=SourceOptions(gpu_archs=("gfx1151",))))
    (target,) = selection.targets
    assert target.id == IDS[1] and target.archs == ("gfx1151",) and target.gfx_arch_variant == ("gfx1151",)
    assert target.device_packages == ("amd-torch-device-gfx1151", "rocm-sdk-device-gfx1151", "amd-torch-device-gfx115x", "amd-torchvision-device-gfx1151")
