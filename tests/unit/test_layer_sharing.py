"""Which layers images share, planned from the matrix and counted from built layers (core/release/layer_sharing.py)."""

from __future__ import annotations

import json

import pytest

from buildkit.app.build import BuildRun, BuildStatus, TargetResult
from buildkit.app.targets import Choices, select_targets
from buildkit.core.release.layer_sharing import BASE, OS, OWN, BuiltLayer, node_costs, planned_layers, pushed_layers
from buildkit.ui.report import run_json, run_markdown

CUDA = "2.14.1-cuda13.0-py{python}-runtime"
FAMILY = "2.14.1-rocm7.14-{family}-py3.12-runtime"


@pytest.fixture(scope="module")
def layers():
    selection = select_targets(Choices(selectors=("torch=2.1[45].*", "flavor=runtime")))
    return {item.target.id: {layer.name: layer for layer in planned_layers(item)} for item in selection.plan()}


def test_the_cuda_libraries_are_one_layer_for_every_python_and_torch_s_own_are_not(layers):
    images = [layers[CUDA.format(python=python)] for python in ("3.11", "3.12", "3.13")]
    for name, layer in images[0].items():
        keys = {image[name].key for image in images}
        if name.startswith("nvidia-") or name == "triton-any-python":
            assert layer.python_neutral and len(keys) == 1, name
        else:  # the OS layer (a base with a Python of its own, the venv), triton, the other dependencies, torch, its companions
            assert not layer.python_neutral and len(keys) == 3, name


def test_on_an_official_python_base_the_layers_every_python_shares_come_first(layers):
    """An engine keeps a layer unpacked under the chain of layers below it: the layers the same under every
    Python at the bottom, under the base's files, are unpacked once for every Python of a stack."""
    for python in ("3.11", "3.12", "3.13"):
        names = list(layers[CUDA.format(python=python)])
        os_at = names.index(OS)
        assert BASE not in names  # the base's files are in the OS layer, copied in above them
        assert all(layers[CUDA.format(python=python)][name].python_neutral for name in names[:os_at])
        assert names[:os_at][-1] == "triton-any-python" and names[os_at + 1 :] == ["triton", "dependencies", "torch", "companions", OWN]
    mi300 = list(layers[FAMILY.format(family="mi300")])
    assert mi300[mi300.index(OS) - 1] == "rocm-sdk-libraries" and mi300[-2:] == ["device-gfx942", OWN]  # device code last


def test_on_another_base_the_image_starts_with_the_base_s_layers(team_matrix):
    path = team_matrix(
        'extends = "default"\nruntime_base = "registry.example.com/team/python:{python}-slim"\ninclude = [{ id = "2.14.1-cuda13.0-py3.12-runtime" }]\n'
    )
    (item,) = select_targets(Choices(matrix=path)).plan()
    names = [layer.name for layer in planned_layers(item)]
    assert names[:3] == [BASE, OS, "nvidia-cudnn-cu13"] and names[-3:] == ["torch", "companions", OWN]


def test_other_cuda_versions_and_torch_releases_share_no_library_layer(layers):
    ours = layers[CUDA.format(python="3.12")]
    for other in ("2.14.1-cuda13.2-py3.12-runtime", "2.15.0-cuda13.0-py3.12-runtime"):
        assert ours["nvidia-cudnn-cu13"].key != layers[other]["nvidia-cudnn-cu13"].key
        assert ours[OS].key == layers[other][OS].key  # one base, one venv


def test_family_images_share_every_layer_but_their_device_code_and_their_own_steps(layers):
    mi300, mi350 = layers[FAMILY.format(family="mi300")], layers[FAMILY.format(family="mi350")]
    assert [name for name in mi300 if name in mi350 and mi300[name].key != mi350[name].key] == [OWN]
    assert "device-gfx942" in mi300 and "device-gfx942" not in mi350 and mi300["device-gfx942"].python_neutral
    assert mi300["torch"].key == mi350["torch"].key  # torch's layer names no arch


def test_twins_share_the_os_layer_only(layers):
    cuda, rocm = layers[CUDA.format(python="3.12")], layers[FAMILY.format(family="mi300")]
    assert [name for name in cuda if name in rocm and cuda[name].key == rocm[name].key] == [OS]


def test_plan_json_keys_every_layer_and_counts_the_images_holding_it(cli):
    result = cli("plan", "--format", "json", "--layers", "--select", "torch=2.14.1", "--select", "flavor=runtime", "--select", "backend=cuda")
    assert result.code == 0, result.err
    plan = {target["id"]: target for target in json.loads(result.out)}
    cuda = plan[CUDA.format(python="3.12")]["layers"]
    assert [layer["name"] for layer in cuda][:2] == ["nvidia-cudnn-cu13", "nvidia-cublas"] and cuda[-1]["name"] == OWN
    by_name = {layer["name"]: layer for layer in cuda}
    pythons = sum(1 for target in plan.values() if target["backend_version"] == "13.0")
    assert by_name["nvidia-cudnn-cu13"]["shared_by"] == pythons - 1 and by_name["nvidia-cudnn-cu13"]["python_neutral"]
    assert by_name["torch"]["shared_by"] == 0 and by_name[OWN]["shared_by"] == 0
    plain = json.loads(cli("plan", "--format", "json", "--select", "torch=2.14.1", "--select", "flavor=runtime").out)
    assert "layers" not in plain[0]  # streamed, as before, without --layers


def built(*layers: tuple[str, int]) -> list[BuiltLayer]:
    return [BuiltLayer(digest, size, digest) for digest, size in layers]


def test_a_node_fetches_what_it_lacks_and_unpacks_everything_above_where_the_chains_part():
    """The py3.12 image next to the py3.13 one: other base, same library layers. Nothing of the libraries is
    fetched, but the engine's store keeps a layer per chain, so they are unpacked again."""
    py312 = built(("base-312", 100), ("cudnn", 1000), ("torch-312", 500))
    py313 = built(("base-313", 100), ("cudnn", 1000), ("torch-313", 500))
    nightly = built(("base-312", 100), ("cudnn", 1000), ("torch-next", 500))
    costs = node_costs({"py3.12": py312, "py3.13": py313, "next": nightly})
    by_held = {cost.held: cost for cost in costs["py3.12"]}
    assert (by_held["py3.13"].fetched_bytes, by_held["py3.13"].unpacked_bytes, by_held["py3.13"].shared_bytes) == (600, 1600, 1000)
    assert (by_held["next"].fetched_bytes, by_held["next"].unpacked_bytes, by_held["next"].shared_bytes) == (500, 500, 1100)
    assert by_held["next"].shared == ("base-312", "cudnn")
    assert [cost.held for cost in costs["py3.12"]] == ["next", "py3.13"]  # cheapest first
    assert node_costs({"a": built(("x", 1)), "b": built(("y", 1))}) == {"a": [], "b": []}


def result(name: str, layers: list[tuple[str, str, int]]) -> TargetResult:
    return TargetResult(
        name,
        "nvidia",
        None,
        [f"r/{name}"],
        status=BuildStatus.BUILT,
        layers=[digest for digest, _, _ in layers],
        history=[(step, size) for _, step, size in layers],
    )


def test_the_build_report_says_what_a_node_holding_another_image_pays_for_each_one():
    first = result("a", [("d1", "ADD rootfs.tar /", 100), ("d2", "COPY /layers/nvidia-cudnn-cu13/ /", 1000), ("d3", "COPY /layers/torch/ /", 500)])
    second = result("b", [("d1", "ADD rootfs.tar /", 100), ("d2", "COPY /layers/nvidia-cudnn-cu13/ /", 1000), ("d4", "COPY /layers/torch/ /", 600)])
    costs = node_costs({r.id: r.built_layers for r in (first, second)})
    run = BuildRun([first, second], [], costs)
    (shares,) = run_json(run, "engine")["targets"][1]["shares"]
    assert shares == {
        "held": "a",
        "shared_layers": ["ADD rootfs.tar /", "nvidia-cudnn-cu13"],
        "shared_bytes": 1100,
        "fetched_bytes": 600,
        "unpacked_bytes": 600,
    }
    assert "| `b` | `a` | 2 layers, 1.1 KiB | 600 B | 600 B |" in run_markdown(run)


def test_an_image_whose_history_does_not_line_up_with_its_layers_reports_no_sharing():
    odd = TargetResult("odd", "nvidia", None, [], status=BuildStatus.BUILT, layers=["d1", "d2"], history=[("ADD rootfs.tar /", 100)])
    assert odd.built_layers == []


def test_pushed_layers_are_the_manifests_blobs_named_by_their_steps():
    """What `verify --json` reports of a published image: each layer blob (what a node fetches) with the step
    that made it, from the config's history without its empty-layer steps; nothing where the two disagree."""
    manifest = {"layers": [{"digest": "sha256:" + "a" * 64, "size": 100}, {"digest": "sha256:" + "b" * 64, "size": 7}]}
    config = {
        "history": [
            {"created_by": "ADD rootfs.tar /"},
            {"created_by": "ENV PATH=/opt/venv/bin", "empty_layer": True},
            {"created_by": "COPY --link /layers/torch/ / # buildkit"},
        ]
    }
    assert [(layer.size, layer.name) for layer in pushed_layers(manifest, config)] == [(100, "ADD rootfs.tar /"), (7, "torch")]
    assert pushed_layers(manifest, {"history": config["history"][:1]}) == ()
    assert pushed_layers({"layers": [{"digest": "sha256:" + "a" * 64, "size": "100"}]}, {"history": config["history"][:1]}) == ()
