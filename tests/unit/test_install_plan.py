"""ROCm families, thin-wheel layouts and the layered torch install, as planned and rendered (no engine)."""

from __future__ import annotations

import json
import re

import pytest

from buildkit.app.targets import Choices, SourceOptions, select_targets
from buildkit.core.install_plan import COMPANIONS, DEPENDENCIES, TORCH
from buildkit.image.install import with_extras
from testkit.dockerfiles import stages

PAIR = "2.14.1-py3.12-runtime"
DEFAULT_FAMILIES = ("mi200", "mi300", "mi350", "rdna3", "rdna4", "strix-halo")


@pytest.fixture(scope="module")
def pair():
    rendered = select_targets(Choices(selectors=("torch=2.14.1", "python=3.12", "flavor=runtime"))).render()
    return {item.target.id: item for item in rendered if item.target.pair == PAIR}


def plan_of(item) -> dict:
    return json.loads(item.support["torch-install.json"])


def test_the_default_matrix_pairs_each_cuda_twin_with_one_rocm_7_14_image_per_family(pair):
    assert sorted(pair) == ["2.14.1-cuda13.0-py3.12-runtime"] + [f"2.14.1-rocm7.14-{f}-py3.12-runtime" for f in sorted(DEFAULT_FAMILIES)]
    mi300 = pair["2.14.1-rocm7.14-mi300-py3.12-runtime"].target
    assert mi300.family == "mi300" and mi300.archs == ("gfx942",)
    assert mi300.tags[1].endswith(":2.14.1-rocm-mi300-py3.12-runtime")
    assert pair["2.14.1-rocm7.14-rdna3-py3.12-runtime"].target.archs == ("gfx1100", "gfx1101", "gfx1102", "gfx1103")
    assert pair["2.14.1-cuda13.0-py3.12-runtime"].target.tags[1].endswith(":2.14.1-cuda-py3.12-runtime")


def test_2_15_stacks_pair_cuda_13_2_with_rocm_7_14_family_images():
    selection = select_targets(Choices(selectors=("torch=2.15.0", "flavor=runtime", "python=3.12")))
    twins = {t.id for t in selection.targets if t.pair}
    assert "2.15.0-cuda13.2-py3.12-runtime" in twins
    assert {f"2.15.0-rocm7.14-{family}-py3.12-runtime" for family in DEFAULT_FAMILIES} <= twins
    assert all("rocm 7.14: devel_base" in t.unconfirmed or t.backend == "cuda" for t in selection.targets)


def test_a_family_image_installs_exactly_its_device_packages_and_never_device_all(pair):
    item = pair["2.14.1-rocm7.14-mi300-py3.12-runtime"]
    plan = plan_of(item)
    device = [layer for layer in plan["layers"] if layer["name"].startswith("device-")]
    assert device == [{"name": "device-gfx942", "packages": ["rocm-sdk-device-gfx942"], "python_neutral": True, "any_python": False}]
    assert plan["narrowing"] == {"requirement": "rocm", "drop": "device-all", "add": ["device-gfx942"]}
    assert plan["requirements"] == ["torch==2.14.1+rocm7.14", "torchvision==0.29.1+rocm7.14"]  # the exact local build
    assert "device-all" not in item.dockerfile
    assert item.labels["dev.buildkit.device-packages"] == "rocm-sdk-device-gfx942"
    assert item.labels["dev.buildkit.rocm-family"] == "mi300"


def test_layers_come_in_order_host_packages_then_the_rest_then_torch_then_device_code(pair):
    """What changes least comes first: a node holding yesterday's nightly has every layer below torch's, one
    holding another family's image every layer below the device code."""
    plan = plan_of(pair["2.14.1-rocm7.14-rdna3-py3.12-runtime"])
    names = [layer["name"] for layer in plan["layers"]]
    assert names == [
        "rocm-sdk-core",
        "rocm-sdk-libraries",
        DEPENDENCIES,
        TORCH,
        COMPANIONS,
        "device-gfx1100",
        "device-gfx1101",
        "device-gfx1102",
        "device-gfx1103",
    ]
    cuda = plan_of(pair["2.14.1-cuda13.0-py3.12-runtime"])
    names = [layer["name"] for layer in cuda["layers"]]
    assert names[:3] == ["nvidia-cudnn-cu13", "nvidia-cublas", "nvidia-nccl-cu13"]
    assert names[-5:] == ["nvidia-libraries", "triton", DEPENDENCIES, TORCH, COMPANIONS] and cuda["narrowing"] is None
    assert cuda["layers"][names.index("nvidia-libraries")]["packages"] == ["nvidia-*"]  # what no layer of its own names
    assert cuda["layers"][names.index(COMPANIONS)]["packages"] == ["torchvision"]


def test_the_layers_of_library_wheels_are_python_neutral_and_the_rest_are_not(pair):
    """The vendor's library wheels (nvidia-*, rocm-sdk-*: py3-none) hold the same files under every Python;
    triton, torch, its companions and the other dependencies are built per Python."""
    for item in pair.values():
        neutral = {layer["name"] for layer in plan_of(item)["layers"] if layer["python_neutral"]}
        everything = {layer["name"] for layer in plan_of(item)["layers"]}
        if item.target.backend == "cuda":
            assert neutral == {name for name in everything if name.startswith("nvidia-")}
        else:
            assert neutral == {name for name in everything if name.startswith(("rocm-sdk-", "device-"))}
        assert not neutral & {"triton", "pytorch-triton-rocm", DEPENDENCIES, TORCH, COMPANIONS}


def test_a_stack_without_companions_has_no_companions_layer(team_matrix):
    path = team_matrix('extends = "default"\ncompanions = []\ninclude = [{ id = "2.14.1-cuda13.0-py3.12-runtime" }]\n')
    (item,) = select_targets(Choices(matrix=path)).render()
    assert COMPANIONS not in [layer["name"] for layer in plan_of(item)["layers"]]
    assert "layer-companions" not in item.dockerfile


def test_family_images_render_the_same_dockerfile_up_to_their_device_code(pair):
    """BuildKit builds the layers they share once: the same stages, the same text, the same mounts (each layer's
    stage mounts only the installer and its own share of the resolution, so a family's other files do not
    change its cache key), copied into each image in the same order before its own device code."""
    family_images = [item for item in pair.values() if item.target.family]
    named = [stages(item.dockerfile) for item in family_images]
    shared = {name for name in named[0] if not name.startswith("layer-device-") and name != "image"}
    assert "layer-torch" in shared and "layer-rocm-sdk-libraries" in shared
    for name in shared:
        assert len({stages_of[name] for stages_of in named}) == 1, name
    for item, stages_of in zip(family_images, named):
        layers = [layer["name"] for layer in plan_of(item)["layers"]]
        assert [name for name in stages_of if name.startswith("layer-")] == [f"layer-{name}" for name in layers]
        copies = re.findall(r"^COPY --link --from=layer-(\S+) ", stages_of["image"], flags=re.M)
        assert copies == layers and all(name.startswith("device-") for name in layers[layers.index(COMPANIONS) + 1 :])
        for name in layers:
            binds = re.findall(r"--mount=type=bind,([^ ]+)", stages_of[f"layer-{name}"])
            assert binds == ["source=buildkit/install.py,target=/buildkit/install.py", f"from=resolve,source=/plan/{name}.json,target=/plan/{name}.json"], name


def test_every_layer_keeps_the_budget_and_the_label_records_it(team_matrix):
    path = team_matrix('extends = "default"\nmax_layer_size = "9.5GiB"\ninclude = [{ id = "2.14.1-rocm7.14-mi300-py3.12-runtime" }]\n')
    (item,) = select_targets(Choices(matrix=path)).render()
    assert plan_of(item)["max_layer_size"] == round(9.5 * 2**30)
    assert item.labels["dev.buildkit.max-layer-size"] == str(round(9.5 * 2**30))


def test_without_families_a_thin_image_carries_every_device_package_its_index_has(team_matrix):
    path = team_matrix('extends = "default"\nrocm_families = []\ninclude = [{ id = "2.14.1-rocm7.14-py3.12-runtime" }]\n')
    (item,) = select_targets(Choices(matrix=path)).render()
    plan = plan_of(item)
    devices = [layer["name"] for layer in plan["layers"] if layer["name"].startswith("device-")]
    assert len(devices) == 25 and "device-gfx1010" in devices and "device-gfx1250" in devices
    assert plan["narrowing"] is None  # torch's own rocm[device-all,libraries] asks for all of them


def test_gpu_arch_narrows_a_thin_image_to_that_device_package_and_leaves_out_families_without_it(team_matrix):
    path = team_matrix('extends = "default"\nrocm_families = []\ninclude = [{ id = "2.14.1-rocm7.14-py3.12-runtime" }]\n')
    (item,) = select_targets(Choices(matrix=path, source=SourceOptions(gpu_archs=("gfx942",)))).render()
    assert [layer["packages"] for layer in plan_of(item)["layers"] if layer["name"].startswith("device-")] == [["rocm-sdk-device-gfx942"]]
    families = select_targets(Choices(selectors=("id=2.14.1-rocm7.14-*-py3.12-runtime",), source=SourceOptions(gpu_archs=("gfx942",))))
    assert [t.id for t in families.targets] == ["2.14.1-rocm7.14-mi300-py3.12-runtime"]
    assert any("left out: family rdna3" in str(note) for note in families.notes)


def test_amd_multi_arch_layout_asks_torch_for_its_device_extras(team_matrix):
    path = team_matrix("""
        extends = "default"
        include = [{ id = "2.14.1-rocm7.14-mi300-py3.12-runtime" }]
        [compat.rocm."7.14"]
        layout = "amd-multi-arch"
    """)
    (item,) = select_targets(Choices(matrix=path)).render()
    plan = plan_of(item)
    assert plan["index_url"] == "https://repo.amd.com/rocm/whl-multi-arch/"
    assert plan["requirements"][0] == "torch[device-gfx942]==2.14.1+rocm7.14.0" and plan["narrowing"] is None
    assert [layer for layer in plan["layers"] if layer["name"] == "device-gfx942"] == [
        # torch's own kernels for the arch are not one of ROCm's library wheels: built per Python, for all we know
        {"name": "device-gfx942", "packages": ["amd-torch-device-gfx942", "rocm-sdk-device-gfx942"], "python_neutral": False, "any_python": False}
    ]


@pytest.mark.parametrize(
    "text, expected",
    [
        ('rocm_families = ["mi9000"]', "rocm_families[0]: unknown ROCm family 'mi9000'; known: mi100, mi200"),
        ('max_layer_size = "10 gigs"', 'max_layer_size: expected a size such as "10GB", "9.5 GiB" or "500MB", got \'10 gigs\''),
        # a name neither the data nor AMD's hierarchy knows: the known ones, families first, then rocm-bootstrap's bundles
        ('rocm_families = ["gfx9_9"]', "unknown ROCm family 'gfx9_9'; known: mi100, mi200, mi300"),
        ('rocm_families = ["gfx9_9"]', "mi450, rdna4, gfx9_0, gfx9_4, gfx9_5, gfx10_1, gfx10_3, gfx110x, gfx115x, gfx12_0, gfx12_5, gfx9, gfx10"),
        (
            '[compat.families.vega]\nbundles = ["gfx9_1"]',
            "compat.families.vega.bundles[0]: unknown bundle 'gfx9_1'; AMD's hierarchy (rocm-bootstrap) knows: gfx9_0, gfx9_4",
        ),
        (
            '[compat.families.vega]\nbundles = ["gfx906"]\n[[torch]]\nversion = "2.14.1"\nrocm_families = ["vega"]',
            "family vega (gfx906) has no gfx target in the ROCm 7.14 wheels' arch list",
        ),
        (
            '[compat.rocm."7.14"]\narchs = ["gfx906", "gfx942"]\n[[torch]]\nversion = "2.14.1"\nrocm_families = []\nrocm = ["7.14"]',
            "gfx906: no device package (rocm-sdk-device-gfx906) on the ROCm 7.14 wheel index (pytorch layout)",
        ),
        (
            '[[torch]]\nversion = "2.13.0"\nrocm_families = ["mi300"]',
            "rocm_families builds thin-wheel ROCm images per family, and this stack has no thin-wheel ROCm version (7.1, 7.2)",
        ),
    ],
)
def test_family_and_budget_mistakes_are_refused_with_where_and_what(cli, team_matrix, text, expected):
    path = team_matrix(f'extends = "default"\n{text}\n')
    result = cli("matrix", "validate", "--matrix", path)
    assert result.code == 2 and "Traceback" not in result.err
    assert expected in result.err, result.err


@pytest.mark.parametrize(
    "requirement, expected",
    [
        ("rocm[device-all,libraries]==7.14.*", "rocm[libraries,device-gfx942]==7.14.*"),
        ('rocm [ libraries , device-all ] ==7.14.*; platform_system == "Linux"', 'rocm[libraries,device-gfx942] ==7.14.*; platform_system == "Linux"'),
        ("ROCm[device-all]>=7.14", "ROCm[device-gfx942]>=7.14"),
        ("rocm-sdk-core==7.14.0", "rocm-sdk-core==7.14.0"),  # not the requirement that names device code
        ("filelock", "filelock"),
    ],
)
def test_the_installer_swaps_device_all_for_the_images_own_extras(requirement, expected):
    assert with_extras(requirement, "rocm", "device-all", ("device-gfx942",)) == expected


def test_a_rocm_10_image_checks_the_hip_version_its_torch_reports(team_matrix, pair):
    """ROCm 10.1's torch reports HIP 7.16 (compat `runtime`): its install step checks that, and its label says so for
    the smoke test; a ROCm 7.14 image checks its own version and carries no such label."""
    path = team_matrix("""
        extends = "default"
        include = [{ torch = "2.14.0", python = "3.11", flavor = "runtime" }]
        [compat.torch."2.14"]
        rocm = ["7.2", "7.14", "10.1"]
        [[torch]]
        version = "2.14.0"
        cuda = []
        rocm = ["10.1"]
        rocm_families = ["gfx9_4"]
    """)
    (item,) = select_targets(Choices(matrix=path)).render()
    assert item.target.backend_version == "10.1" and item.target.reported_backend_version == "7.16"
    assert "install.py check-backend rocm 7.16\n" in item.dockerfile
    assert item.labels["dev.buildkit.backend-runtime"] == "7.16"
    mi300 = pair["2.14.1-rocm7.14-mi300-py3.12-runtime"]
    assert "install.py check-backend rocm 7.14\n" in mi300.dockerfile and "dev.buildkit.backend-runtime" not in mi300.labels
