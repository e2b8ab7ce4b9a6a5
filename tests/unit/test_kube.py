"""`buildkit kube`: manifests for both twins, valid against the Kubernetes API schemas (kubernetes-validate,
offline, strict: no field the API does not know), node affinity that selects exactly the nodes the image has
code for, images by digest from a real registry."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace

import kubernetes_validate
import pytest
import yaml

from buildkit.adapters.files.matrix import load_matrix
from buildkit.core.host.fit import arch_covered
from buildkit.core.host.kube import AMD_DEVICE_ID, AMD_FAMILY, NVIDIA_CUDA_MAJOR, NVIDIA_MAJOR, NVIDIA_MINOR, KubeOptions, amd_terms, manifests, nvidia_terms
from buildkit.core.targets.plan import expand
from testkit.registry import RegistryProcess, Seeder

MATRIX = load_matrix(None)
COMPAT = MATRIX.compat
PLAN = expand(MATRIX)
PAIR = "2.14.1-py3.12-runtime"
VERSIONS = ("1.34", kubernetes_validate.utils.latest_version())  # DRA's v1 API is there from 1.34


def documents(cli, *args):
    result = cli("kube", *args)
    assert result.code == 0, result.err
    return [item for item in yaml.safe_load_all(result.out) if item], result


def validate(items):
    for item, version in itertools.product(items, VERSIONS):
        kubernetes_validate.validate(item, version, strict=True)  # raises ValidationError with the failing path


FAMILIES = ("mi200", "mi300", "mi350", "rdna3", "rdna4", "strix-halo")  # the default matrix's ROCm 7.14 family images


def test_the_pair_gives_one_valid_job_per_twin(cli):
    items, result = documents(cli, PAIR, "--by-tag")
    validate(items)
    assert [(i["kind"], i["metadata"]["name"]) for i in items] == [("Job", "pytorch-2-14-1-cuda13-0-py3-12-runtime")] + [
        ("Job", f"pytorch-2-14-1-rocm7-14-{family}-py3-12-runtime") for family in FAMILIES
    ]
    nvidia, *amd = (item["spec"]["template"]["spec"] for item in items)
    assert nvidia["containers"][0]["image"] == "ghcr.io/buildkit-images/pytorch:2.14.1-cuda13.0-py3.12-runtime"
    assert nvidia["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    assert all(pod["containers"][0]["resources"] == {"limits": {"amd.com/gpu": 1}} for pod in amd)
    for pod in (nvidia, *amd):
        assert pod["securityContext"] == {"runAsNonRoot": True, "runAsUser": 1000, "runAsGroup": 1000}
        assert pod["containers"][0]["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
        assert {"name": "BUILDKIT_GPU_GUARD", "value": "strict"} in pod["containers"][0]["env"]
    assert items[0]["metadata"]["labels"]["buildkit.dev/pair"] == PAIR
    assert "&id" not in result.out  # no YAML anchors
    # each family image only on nodes of its GPUs: the MI300X node is the mi300 image's alone
    node = {AMD_FAMILY: "AI", AMD_DEVICE_ID: "74a1", "kubernetes.io/arch": "amd64"}
    placed = [family for family, pod in zip(FAMILIES, amd) if selected(terms_of(pod), node)]
    assert placed == ["mi300"]


def terms_of(pod):
    required = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return [term["matchExpressions"] for term in required["nodeSelectorTerms"]]


@pytest.mark.slow
def test_dra_claims_the_vendors_device_class(cli):
    items, _ = documents(cli, PAIR, "--by-tag", "--dra", "--gpus", "2", "--", "python", "train.py")
    validate(items)
    claims = {i["metadata"]["name"]: i for i in items if i["kind"] == "ResourceClaimTemplate"}
    jobs = [i for i in items if i["kind"] == "Job"]
    assert len(claims) == len(jobs) == 7
    for job, device_class in zip(jobs, ("gpu.nvidia.com", *["gpu.amd.com"] * 6)):
        pod = job["spec"]["template"]["spec"]
        (claim,) = pod["resourceClaims"]
        request = claims[claim["resourceClaimTemplateName"]]["spec"]["spec"]["devices"]["requests"][0]
        assert request["exactly"] == {"deviceClassName": device_class, "allocationMode": "ExactCount", "count": 2}
        assert pod["containers"][0]["resources"] == {"claims": [{"name": "gpu"}]}
        assert pod["containers"][0]["command"] == ["python", "train.py"]


@pytest.mark.slow
def test_json_is_a_list_the_schemas_accept(cli):
    result = cli("kube", "ghcr.io/buildkit-images/pytorch:2.14.1-rocm7.14-mi300-py3.12-runtime", "--by-tag", "--json")
    document = json.loads(result.out)
    assert document["kind"] == "List" and len(document["items"]) == 7  # an image's tag names its pair: CUDA and 6 families
    validate(document["items"])


def test_a_subject_that_is_no_pair_is_one_clear_error(cli):
    result = cli("kube", "no-such-pair", "--by-tag")
    assert result.code == 2 and "error: no-such-pair: not a pair key or an image of the matrix; pair keys: " in result.err
    assert "Traceback" not in result.err


def selected(terms, labels):
    """Whether a node with these labels matches any term (the scheduler's rule for In, Gt, Exists)."""

    def matches(expression):
        value = labels.get(expression["key"])
        if value is None:
            return False
        if expression["operator"] == "In":
            return value in expression["values"]
        assert expression["operator"] == "Gt"
        return int(value) > int(expression["values"][0])

    return any(all(matches(e) for e in term) for term in terms)


ARCH_LISTS = [
    ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0"),  # CUDA 13.x x86_64
    ("5.0", "6.0", "7.0", "7.5", "8.0", "8.6", "9.0"),  # CUDA 12.6
    ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0+PTX"),
    ("8.6",),
    ("9.0+PTX",),
]


@pytest.mark.parametrize("archs", ARCH_LISTS)
def test_nvidia_affinity_selects_exactly_the_gpus_the_archs_run_on(archs):
    terms = nvidia_terms(archs, 13)
    for major, minor in itertools.product(range(3, 14), range(10)):
        node = {NVIDIA_MAJOR: str(major), NVIDIA_MINOR: str(minor), NVIDIA_CUDA_MAJOR: "13"}
        assert selected(terms, node) is arch_covered(f"sm_{major}{minor}", archs), (major, minor)
        assert not selected(terms, {**node, NVIDIA_CUDA_MAJOR: "12"})  # a driver too old for CUDA 13


def labeller(device_id):
    """The labels the AMD node labeller puts on a node whose GPUs all have this PCI device id."""
    arch = COMPAT.gpu_names["amd"][device_id]["arch"]
    return {AMD_FAMILY: COMPAT.gfx_targets[arch].amdgpu_family, AMD_DEVICE_ID: device_id.removeprefix("0x")}, arch


@pytest.mark.parametrize(
    "archs",
    [
        ("gfx942",),
        ("gfx90a",),
        ("gfx90a", "gfx942"),
        tuple(COMPAT.backend("rocm", "7.2").archs),
        tuple(COMPAT.backend("rocm", "7.14").archs),
        ("gfx1100", "gfx1101", "gfx1102"),
    ],
)
def test_amd_affinity_selects_the_nodes_whose_gpus_the_image_carries(archs):
    terms, unplaced = amd_terms(archs, COMPAT)
    for device_id in COMPAT.gpu_names["amd"]:
        node, arch = labeller(device_id)
        assert selected(terms, node) is (arch in archs), device_id
    assert set(unplaced) <= set(archs)


def test_a_whole_family_is_selected_by_family_a_part_by_device_id():
    terms, _ = amd_terms(("gfx1100", "gfx1101", "gfx1102"), COMPAT)
    assert terms == [[{"key": AMD_FAMILY, "operator": "In", "values": ["GC_11_0_0"]}]]
    terms, unplaced = amd_terms(("gfx942",), COMPAT)
    assert terms == [[{"key": AMD_DEVICE_ID, "operator": "In", "values": ["74a0", "74a1", "74a2", "74a5", "74b5"]}]]
    assert unplaced == []


def test_one_amd_workload_per_rocm_family_image():
    """A pair whose CUDA twin pairs with several family images (one per GPU family, each with its gfx targets)."""
    cuda = next(t for t in PLAN.targets if t.id == "2.14.1-cuda13.0-py3.12-runtime")
    rocm = next(t for t in PLAN.targets if t.id == "2.14.1-rocm7.2-py3.12-runtime")
    families = [replace(rocm, id=f"2.14.1-rocm7.2-{name}-py3.12-runtime", archs=archs) for name, archs in (("mi200", ("gfx90a",)), ("mi300", ("gfx942",)))]
    found = manifests((cuda, *families), {t.id: t.tags[0] for t in (cuda, *families)}, KubeOptions(), COMPAT)
    validate(found.objects)
    names = [item["metadata"]["name"] for item in found.objects]
    assert names == ["pytorch-2-14-1-cuda13-0-py3-12-runtime", "pytorch-2-14-1-rocm7-2-mi200-py3-12-runtime", "pytorch-2-14-1-rocm7-2-mi300-py3-12-runtime"]
    for item, device_id in zip(found.objects[1:], ("0x740f", "0x74a1")):
        terms = [
            term["matchExpressions"]
            for term in item["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        ]
        node, _ = labeller(device_id)
        assert selected(terms, {**node, "kubernetes.io/arch": "amd64"})
        other, _ = labeller("0x74a1" if device_id == "0x740f" else "0x740f")
        assert not selected(terms, {**other, "kubernetes.io/arch": "amd64"})


@pytest.mark.slow
def test_published_images_are_named_by_digest(cli, tmp_path, team_matrix):
    registry = RegistryProcess(tmp_path / "registry").start()
    try:
        matrix = team_matrix(f'extends = "default"\nregistry = "{registry.address}"\nrepository = "team/pytorch"\n')
        digest = Seeder(registry.address).image("team/pytorch", "2.14.1-cuda13.0-py3.12-runtime", {"dev.buildkit.backend": "cuda"})
        items, result = documents(cli, PAIR, "--matrix", matrix)
        validate(items)
        images = [item["spec"]["template"]["spec"]["containers"][0]["image"] for item in items]
        assert images == [f"{registry.address}/team/pytorch@{digest}"] + [
            f"{registry.address}/team/pytorch:2.14.1-rocm7.14-{family}-py3.12-runtime" for family in FAMILIES
        ]
        # one note for the images the registry lacks, each named
        (note,) = [line for line in result.err.splitlines() if "named by tag" in line]
        assert note.startswith(f"note: {len(FAMILIES)} images named by tag, not published in {registry.address} yet: ")
        assert f"{registry.address}/team/pytorch:2.14.1-rocm7.14-mi300-py3.12-runtime" in note
    finally:
        registry.stop()


def test_an_unreachable_registry_names_images_by_tag_and_says_why(cli, team_matrix):
    matrix = team_matrix('extends = "default"\nregistry = "127.0.0.1:9"\nrepository = "team/pytorch"\n')  # port 9: discard, closed
    items, result = documents(cli, PAIR, "--matrix", matrix)
    assert items[0]["spec"]["template"]["spec"]["containers"][0]["image"] == "127.0.0.1:9/team/pytorch:2.14.1-cuda13.0-py3.12-runtime"
    # the registry is asked once, and said once: every image of the pair in one note, the error whole
    (note,) = [line for line in result.err.splitlines() if "named by tag" in line]
    assert note.startswith(f"note: {len(items)} images named by tag, 127.0.0.1:9 could not be asked for their digests (")
    assert "…" not in note and all(item["spec"]["template"]["spec"]["containers"][0]["image"] in note for item in items)


def test_a_note_about_every_workload_is_said_once(cli, team_matrix):
    """Seven workloads of one pair (a CUDA twin and six family images), all running as root: one note, not seven."""
    matrix = team_matrix('extends = "default"\nrun_as_root = true\n')
    items, result = documents(cli, PAIR, "--matrix", matrix, "--by-tag")
    assert len(items) == 1 + len(FAMILIES)
    notes = [line for line in result.err.splitlines() if line.startswith("note:")]
    assert notes == ["note: every workload of the pair: the image runs as root (run_as_root = true in the matrix): no runAsNonRoot"]
