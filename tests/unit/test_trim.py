"""Arch-trimmed ROCm images: when a trim is planned, where it runs, what it lists, and what the installer's
trim really deletes from a torch laid out like the real fat ROCm wheel (a TEST DOUBLE, unpacked here)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from buildkit.adapters.files.bundled import compat_data
from buildkit.app.targets import Choices, SourceOptions, select_targets
from buildkit.core import labels
from buildkit.core.compat.facts import compat_from_data
from buildkit.core.labels import ImageIdentity
from buildkit.core.release.judge import judge
from buildkit.core.trim import names_pattern
from buildkit.image.install import trim_archs
from testkit.runner import tool
from testkit.wheels import rocm_library_layout, rocm_torch_double, torch_double

COMPAT = compat_from_data(compat_data())
ROCM_7_2 = COMPAT.backend("rocm", "7.2").archs
PROBE = Path(__file__).resolve().parents[2] / "buildkit" / "image" / "probe.py"
FAT = "2.13.0-rocm7.2-py3.12-runtime"  # 2.13's ROCm wheels are all fat (7.1, 7.2)


def plan_of(item) -> dict:
    return json.loads(item.support["torch-install.json"])


def listed(pattern: str) -> set[str]:
    """The archs a trim pattern names."""
    return set(re.search(r"\(([^)]*)\)\(\[0-9a-f\]", pattern).group(1).split("|"))


def names_any(path: str, archs: tuple[str, ...]) -> bool:
    return re.search(names_pattern(archs), path) is not None


def rendered(team_matrix, stacks: str = "", *gpu_arch: str, torch: str = "2.13.0") -> dict:
    path = team_matrix(f'extends = "default"\ninclude = [{{ torch = "{torch}", python = "3.12" }}]\n{stacks}')
    return {item.target.id: item for item in select_targets(Choices(matrix=path, source=SourceOptions(gpu_arch))).render()}


NARROWED = '[[torch]]\nversion = "2.13.0"\narchs = { rocm = ["gfx942"] }\n'


# --- when and where the trim runs -------------------------------------------------------------------------


@pytest.mark.slow
def test_the_default_matrix_plans_no_fat_trim_and_labels_only_family_images_as_trimmed():
    for item in select_targets(Choices()).render():
        plan = item.support.get("torch-install.json")
        assert plan is None or json.loads(plan)["trim"] is None, item.target.id
        # a family image leaves the other archs' device packages out: that is what the label says
        assert (labels.TRIMMED_ARCHS in item.labels) == bool(item.target.family), item.target.id


def test_narrowed_fat_rocm_targets_trim_in_the_torch_layer_only_the_undeclared_archs(team_matrix):
    items = rendered(team_matrix, NARROWED)
    rocm = [item for item in items.values() if item.target.backend == "rocm"]
    assert {item.target.flavor for item in rocm} >= {"runtime", "devel"}
    for item in rocm:
        trim = plan_of(item)["trim"]
        assert listed(trim["removed"]) == set(ROCM_7_2) - {"gfx942"} and listed(trim["kept"]) == {"gfx942"}
        assert trim["library_dirs"] == ["lib/rocblas/library", "lib/hipblaslt/library", "lib/hipsparselt/library", "share/miopen/db"]
        # the installer applies it in torch's layer: the RUN that installs torch, so no layer ever holds the files
        (torch_run,) = [run for run in item.dockerfile.split("\nRUN ") if "install.py layer /plan/torch.json" in run]
        assert "from=resolve,source=/plan/torch.json" in torch_run
        assert item.labels[labels.TRIMMED_ARCHS] == ";".join(a for a in ROCM_7_2 if a != "gfx942")
        assert item.labels[labels.GPU_ARCHS] == "gfx942"


@pytest.mark.slow
def test_cuda_twins_of_a_narrowed_stack_render_as_before(team_matrix):
    narrowed, plain = rendered(team_matrix, NARROWED), rendered(team_matrix)
    cuda = [target_id for target_id, item in narrowed.items() if item.target.backend == "cuda"]
    assert cuda
    for target_id in cuda:
        assert narrowed[target_id].dockerfile == plain[target_id].dockerfile
        assert narrowed[target_id].fingerprint == plain[target_id].fingerprint


def test_gpu_arch_option_trims_like_the_matrix(team_matrix):
    trim = plan_of(rendered(team_matrix, "", "gfx942", "gfx90a")[FAT])["trim"]
    assert listed(trim["kept"]) == {"gfx942", "gfx90a"}
    assert listed(trim["removed"]) == set(ROCM_7_2) - {"gfx942", "gfx90a"}


def test_declaring_the_whole_official_list_trims_nothing(team_matrix):
    everything = json.dumps(list(ROCM_7_2))
    items = rendered(team_matrix, f'[[torch]]\nversion = "2.13.0"\narchs = {{ rocm = {everything} }}\n')
    for item in items.values():
        assert labels.TRIMMED_ARCHS not in item.labels
        assert item.target.flavor == "source" or plan_of(item)["trim"] is None


def test_thin_wheels_install_only_the_declared_archs_device_packages(team_matrix):
    stacks = '[[torch]]\nversion = "2.14.1"\nrocm = ["7.14"]\nrocm_families = []\narchs = { rocm = ["gfx942", "gfx90a"] }\n'
    thin = [item for item in rendered(team_matrix, stacks, torch="2.14.1").values() if item.target.backend_version == "7.14"]
    assert thin
    for item in thin:
        plan = plan_of(item)
        assert plan["trim"] is None  # nothing to delete: the other archs' packages never install
        assert plan["narrowing"] == {"requirement": "rocm", "drop": "device-all", "add": ["device-gfx942", "device-gfx90a"]}
        assert [layer["packages"] for layer in plan["layers"] if layer["name"].startswith("device-")] == [
            ["rocm-sdk-device-gfx942"],
            ["rocm-sdk-device-gfx90a"],
        ]
        assert item.labels[labels.TRIMMED_ARCHS] == ";".join(a for a in COMPAT.backend("rocm", "7.14").archs if a not in ("gfx942", "gfx90a"))


@pytest.mark.slow
def test_trimmed_dockerfile_passes_hadolint(team_matrix, tmp_path):
    hadolint = tool("hadolint")
    if hadolint is None:
        pytest.fail("hadolint is missing: install the test extras")
    path = tmp_path / "Dockerfile"
    path.write_text(rendered(team_matrix, NARROWED)[FAT].dockerfile)
    result = subprocess.run([hadolint, "--no-color", "--failure-threshold", "warning", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# --- the file-name rule ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,arch",
    [
        ("TensileLibrary_lazy_gfx942.dat", "gfx942"),  # rocBLAS tensile_host.cpp
        ("Kernels.so-000-gfx1100.hsaco", "gfx1100"),  # Tensile TensileCreateLibrary.py
        ("TensileLibrary_Type_4xi8I_HPA_Contraction_l_Alik_Bjlk_Cijk_Dijk_fallback_gfx906-xnack-.hsaco", "gfx906"),
        ("Kernels.so-000-gfx90a-xnack+.hsaco", "gfx90a"),
        ("extop_gfx950.co", "gfx950"),  # hipBLASLt gen_assembly.sh
        ("gfx90a6e.db", "gfx90a"),  # MIOpen: 110 CUs in hex, no separator
        ("gfx942130.HIP.fdb.txt", "gfx942"),  # 304 CUs
        ("gfx1030_36.db", "gfx1030"),  # 64 CUs or fewer: _<CUs>
        ("gfx942.kdb", "gfx942"),
        ("gfx1201/TensileLibrary_lazy_gfx1201.dat", "gfx1201"),  # rocBLAS's per-processor folder
    ],
)
def test_rule_finds_the_arch_in_real_file_names(name, arch):
    assert names_any(name, (arch,))
    others = tuple(a for a in COMPAT.known_archs["rocm"] if a != arch)
    assert not names_any(name, others)


@pytest.mark.parametrize(
    "name",
    [
        "hipblasltExtOpLibrary.dat",
        "hipblasltTransform.hsaco",
        "TensileLibrary.dat",
        "TensileLibrary_Type_4xi8I_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_fallback.dat",
        "gfx11-generic.co",
        "Conv_Winograd_v30_3_1_gfx94x_fp16.inc",
        "libamdhip64.so",
        "xgfx942.dat",
        "gfx9420000.db",
    ],
)
def test_rule_leaves_names_without_a_known_gfx_target(name):
    assert not names_any(name, COMPAT.known_archs["rocm"])


def test_no_known_gfx_target_is_a_prefix_of_another():
    """What makes the rule unambiguous: MIOpen's hex CU suffix can never be read as the tail of another arch. A
    name that goes on after a dash (rocm-bootstrap's gfx1250-strict) is the target with a feature, as gfx90a-xnack-
    is gfx90a's: the rule reads it as that target, by design."""
    known = COMPAT.known_archs["rocm"]
    assert [(a, b) for a in known for b in known if a != b and b.startswith(a) and b[len(a)] != "-"] == []


# --- the installer's trim, run against the double ------------------------------------------------------


def unpack(wheel: Path, into: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(into)
    return into


def probe(site: Path) -> dict:
    result = subprocess.run([sys.executable, str(PROBE)], env={"PYTHONPATH": str(site)}, capture_output=True, text=True)
    return json.loads(result.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def double_wheel(tmp_path_factory) -> Path:
    return rocm_torch_double(tmp_path_factory.mktemp("double"), "2.14.1", "rocm7.2", "7.2.26015", list(ROCM_7_2), unit=4096, shared=8192)


@pytest.mark.slow
def test_the_trim_removes_exactly_the_undeclared_archs_files(team_matrix, double_wheel, tmp_path, capsys):
    item = rendered(team_matrix, NARROWED)[FAT]
    site = unpack(double_wheel, tmp_path / "site")
    before = {str(p.relative_to(site)): p.stat().st_size for p in site.rglob("*") if p.is_file()}
    trim_archs(plan_of(item)["trim"], site / "torch")
    after = {str(p.relative_to(site)) for p in site.rglob("*") if p.is_file()}
    removed = set(before) - after
    layout = rocm_library_layout(list(ROCM_7_2), 4096, 8192)
    expected = {path for path in layout if re.search(r"gfx(?!942)", path)}
    assert removed == expected
    assert all(path in after for path in layout if "gfx942" in path or "gfx" not in path)
    assert f"removed {len(removed)} files, {sum(before[p] for p in removed)} bytes" in capsys.readouterr().out
    # the double's arch list follows what is left: the smoke test's arch check passes for gfx942
    report = probe(site)
    assert report["compiled_archs"] == ["gfx942"]
    expect = ImageIdentity.read(item.labels)
    assert judge("img", expect, report, "auto", host_has_gpu=False).passed


def test_a_trim_that_took_the_declared_arch_fails_the_arch_check(team_matrix, double_wheel, tmp_path):
    """Apply the trim planned for gfx90a to the double, then judge the result as the gfx942 image."""
    wrong = rendered(team_matrix, '[[torch]]\nversion = "2.13.0"\narchs = { rocm = ["gfx90a"] }\n')
    site = unpack(double_wheel, tmp_path / "site")
    trim_archs(plan_of(wrong[FAT])["trim"], site / "torch")
    gfx942_image = rendered(team_matrix, NARROWED)[FAT]
    verdict = judge("img", ImageIdentity.read(gfx942_image.labels), probe(site), "auto", host_has_gpu=False)
    assert not verdict.passed
    assert any("declares gfx942" in failure for failure in verdict.failures)


def test_a_file_naming_a_declared_arch_stays_even_if_it_names_a_removed_one(team_matrix, double_wheel, tmp_path):
    site = unpack(double_wheel, tmp_path / "site")
    both = site / "torch/lib/hipsparselt/library/SPMM_Kernels_gfx90a_gfx942.co"  # one code object for two archs
    both.parent.mkdir(parents=True)
    both.write_bytes(b"two archs")
    trim_archs(plan_of(rendered(team_matrix, NARROWED)[FAT])["trim"], site / "torch")
    assert both.exists()
    assert not (site / "torch/lib/rocblas/library/TensileLibrary_lazy_gfx90a.dat").exists()


def test_the_trim_fails_when_the_wheel_bundles_no_such_files(team_matrix, tmp_path):
    bare = torch_double(tmp_path / "bare", "2.14.1", "rocm7.2", None, "7.2.26015", list(ROCM_7_2))
    site = unpack(bare, tmp_path / "site")
    with pytest.raises(SystemExit) as failure:
        trim_archs(plan_of(rendered(team_matrix, NARROWED)[FAT])["trim"], site / "torch")
    assert "no file of the ROCm libraries bundled with torch names gfx900" in str(failure.value)


def test_double_is_dominated_by_per_arch_files_and_small_enough_for_tests():
    layout = rocm_library_layout(list(ROCM_7_2), 4 << 20, 9 << 20)
    per_arch = sum(size for path, size in layout.items() if "gfx" in path)
    assert per_arch / sum(layout.values()) > 0.85
    assert sum(layout.values()) < 150 << 20
