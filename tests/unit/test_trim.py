"""Arch-trimmed ROCm images: when the trim step is rendered, where, what it lists, and what the rendered
snippet really deletes from a torch laid out like the real ROCm wheel (a TEST DOUBLE, unpacked here)."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from buildkit.adapters.bundled import compat_data
from buildkit.app.targets import Choices, SourceOptions, select_targets
from buildkit.core import labels
from buildkit.core.compat import compat_from_data
from buildkit.core.judge import judge
from buildkit.core.labels import ImageIdentity
from buildkit.core.trim import names_pattern
from testkit.runner import tool
from testkit.wheels import rocm_library_layout, rocm_torch_double, torch_double

COMPAT = compat_from_data(compat_data())
ROCM_7_2 = COMPAT.backend("rocm", "7.2").archs
PROBE = Path(__file__).resolve().parents[2] / "buildkit" / "image" / "probe.py"
TRIM_MARK = "arch trim:"


def instructions(dockerfile: str) -> list[str]:
    """The Dockerfile's instructions, continuation lines joined and comments dropped, as BuildKit reads them."""
    joined = re.sub(r"\\\n", "", dockerfile)
    return [line for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def trim_command(dockerfile: str) -> str:
    """The python -c command the trim step runs, as its shell would receive it."""
    (run,) = [line for line in instructions(dockerfile) if TRIM_MARK in line]
    step = next(part for part in run.split(" && ") if TRIM_MARK in part)
    return step.strip()


def listed(pattern_name: str, command: str) -> set[str]:
    """The archs in the drop (or keep) pattern of a rendered trim command."""
    code = shlex.split(command)[2]
    patterns = re.findall(r're\.compile\("([^"]*)"\)', code)
    return set(re.search(r"\(([^)]*)\)\(\[0-9a-f\]", patterns[0 if pattern_name == "drop" else 1]).group(1).split("|"))


def names_any(path: str, archs: tuple[str, ...]) -> bool:
    return re.search(names_pattern(archs), path) is not None


def rendered(team_matrix, stacks: str = "", *gpu_arch: str, matrix_tail: str = "") -> dict:
    path = team_matrix(f'extends = "default"\ninclude = [{{ torch = "2.14.1", python = "3.12" }}]\n{matrix_tail}{stacks}')
    return {item.target.id: item for item in select_targets(Choices(matrix=path, source=SourceOptions(gpu_arch))).render()}


NARROWED = '[[torch]]\nversion = "2.14.1"\narchs = { rocm = ["gfx942"] }\n'


# --- when and where the step is rendered ------------------------------------------------------------------

def test_default_matrix_renders_no_trim_step_and_no_label():
    for item in select_targets(Choices()).render():
        assert TRIM_MARK not in item.dockerfile, item.target.id
        assert labels.TRIMMED_ARCHS not in item.labels
        assert "[device-" not in item.build_args.get("TORCH_REQUIREMENT", "")


def test_narrowed_rocm_targets_trim_in_the_install_run_only_the_undeclared_archs(team_matrix):
    items = rendered(team_matrix, NARROWED)
    rocm = [item for item in items.values() if item.target.backend == "rocm"]
    assert {item.target.flavor for item in rocm} >= {"runtime", "devel"}
    for item in rocm:
        runs = [line for line in instructions(item.dockerfile) if line.startswith("RUN ")]
        (install,) = [run for run in runs if '"${TORCH_REQUIREMENT}"' in run]
        assert [run for run in runs if TRIM_MARK in run] == [install]  # the same RUN as the install, and only there
        steps = install.split(" && ")
        trim_at = next(i for i, step in enumerate(steps) if TRIM_MARK in step)
        # after torch is installed and checked, before its build is frozen as the constraint
        assert any("pip install" in s for s in steps[:trim_at]) and "torch-constraint.txt" in steps[-1]
        command = trim_command(item.dockerfile)
        assert listed("drop", command) == set(ROCM_7_2) - {"gfx942"}
        assert listed("keep", command) == {"gfx942"}
        assert item.labels[labels.TRIMMED_ARCHS] == ";".join(a for a in ROCM_7_2 if a != "gfx942")
        assert item.labels[labels.GPU_ARCHS] == "gfx942"


def test_cuda_twins_of_a_narrowed_stack_render_as_before(team_matrix):
    narrowed, plain = rendered(team_matrix, NARROWED), rendered(team_matrix)
    cuda = [target_id for target_id, item in narrowed.items() if item.target.backend == "cuda"]
    assert cuda
    for target_id in cuda:
        assert narrowed[target_id].dockerfile == plain[target_id].dockerfile
        assert narrowed[target_id].fingerprint == plain[target_id].fingerprint


def test_gpu_arch_option_trims_like_the_matrix(team_matrix):
    by_option = rendered(team_matrix, "", "gfx942", "gfx90a")
    item = by_option["2.14.1-rocm7.2-py3.12-runtime"]
    command = trim_command(item.dockerfile)
    assert listed("keep", command) == {"gfx942", "gfx90a"}
    assert listed("drop", command) == set(ROCM_7_2) - {"gfx942", "gfx90a"}


def test_declaring_the_whole_official_list_trims_nothing(team_matrix):
    everything = json.dumps(list(ROCM_7_2))
    items = rendered(team_matrix, f'[[torch]]\nversion = "2.14.1"\narchs = {{ rocm = {everything} }}\n')
    assert all(TRIM_MARK not in item.dockerfile and labels.TRIMMED_ARCHS not in item.labels for item in items.values())


def test_thin_wheels_install_only_the_declared_archs_device_packages(team_matrix):
    items = rendered(team_matrix, '[[torch]]\nversion = "2.14.1"\nrocm = ["7.14"]\narchs = { rocm = ["gfx942", "gfx90a"] }\n')
    thin = [item for item in items.values() if item.target.backend_version == "7.14"]
    assert thin
    for item in thin:
        assert item.build_args["TORCH_REQUIREMENT"] == "torch[device-gfx942,device-gfx90a]==2.14.1+rocm7.14"
        assert TRIM_MARK not in item.dockerfile  # nothing to delete: the other archs' packages never install
        assert item.labels[labels.TRIMMED_ARCHS] == ";".join(a for a in COMPAT.backend("rocm", "7.14").archs if a not in ("gfx942", "gfx90a"))


def test_trimmed_dockerfile_passes_hadolint(team_matrix, tmp_path):
    hadolint = tool("hadolint")
    if hadolint is None:
        pytest.fail("hadolint is missing: install the test extras")
    path = tmp_path / "Dockerfile"
    path.write_text(rendered(team_matrix, NARROWED)["2.14.1-rocm7.2-py3.12-runtime"].dockerfile)
    result = subprocess.run([hadolint, "--no-color", "--failure-threshold", "warning", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# --- the file-name rule ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name,arch", [
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
])
def test_rule_finds_the_arch_in_real_file_names(name, arch):
    assert names_any(name, (arch,))
    others = tuple(a for a in COMPAT.known_archs["rocm"] if a != arch)
    assert not names_any(name, others)


@pytest.mark.parametrize("name", [
    "hipblasltExtOpLibrary.dat", "hipblasltTransform.hsaco", "TensileLibrary.dat",
    "TensileLibrary_Type_4xi8I_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_fallback.dat",
    "gfx11-generic.co", "Conv_Winograd_v30_3_1_gfx94x_fp16.inc", "libamdhip64.so", "xgfx942.dat", "gfx9420000.db",
])
def test_rule_leaves_names_without_a_known_gfx_target(name):
    assert not names_any(name, COMPAT.known_archs["rocm"])


def test_no_known_gfx_target_is_a_prefix_of_another():
    """What makes the rule unambiguous: MIOpen's hex CU suffix can never be read as the tail of another arch."""
    known = COMPAT.known_archs["rocm"]
    assert [(a, b) for a in known for b in known if a != b and b.startswith(a)] == []


# --- the rendered snippet, run against the double ------------------------------------------------------

def unpack(wheel: Path, into: Path) -> Path:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(into)
    return into


def run_trim(command: str, site: Path) -> subprocess.CompletedProcess:
    program, flag, code = shlex.split(command)
    assert (program, flag) == ("python", "-c")
    return subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(site)}, capture_output=True, text=True)


def probe(site: Path) -> dict:
    result = subprocess.run([sys.executable, str(PROBE)], env={"PYTHONPATH": str(site)}, capture_output=True, text=True)
    return json.loads(result.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def double_wheel(tmp_path_factory) -> Path:
    return rocm_torch_double(tmp_path_factory.mktemp("double"), "2.14.1", "rocm7.2", "7.2.26015", list(ROCM_7_2), unit=4096, shared=8192)


def test_rendered_snippet_removes_exactly_the_undeclared_archs_files(team_matrix, double_wheel, tmp_path):
    item = rendered(team_matrix, NARROWED)["2.14.1-rocm7.2-py3.12-runtime"]
    site = unpack(double_wheel, tmp_path / "site")
    before = {str(p.relative_to(site)): p.stat().st_size for p in site.rglob("*") if p.is_file()}
    result = run_trim(trim_command(item.dockerfile), site)
    assert result.returncode == 0, result.stderr
    after = {str(p.relative_to(site)) for p in site.rglob("*") if p.is_file()}
    removed = set(before) - after
    layout = rocm_library_layout(list(ROCM_7_2), 4096, 8192)
    expected = {path for path in layout if re.search(r"gfx(?!942)", path)}
    assert removed == expected
    assert all(path in after for path in layout if "gfx942" in path or "gfx" not in path)
    assert f"removed {len(removed)} files, {sum(before[p] for p in removed)} bytes" in result.stdout
    # the double's arch list follows what is left: the smoke test's arch check passes for gfx942
    report = probe(site)
    assert report["compiled_archs"] == ["gfx942"]
    expect = ImageIdentity.read(item.labels)
    assert judge("img", expect, report, "auto", host_has_gpu=False).passed


def test_a_trim_that_took_the_declared_arch_fails_the_arch_check(team_matrix, double_wheel, tmp_path):
    """Run the step rendered for gfx90a against the double, then judge the result as the gfx942 image."""
    wrong = rendered(team_matrix, '[[torch]]\nversion = "2.14.1"\narchs = { rocm = ["gfx90a"] }\n')
    site = unpack(double_wheel, tmp_path / "site")
    assert run_trim(trim_command(wrong["2.14.1-rocm7.2-py3.12-runtime"].dockerfile), site).returncode == 0
    gfx942_image = rendered(team_matrix, NARROWED)["2.14.1-rocm7.2-py3.12-runtime"]
    verdict = judge("img", ImageIdentity.read(gfx942_image.labels), probe(site), "auto", host_has_gpu=False)
    assert not verdict.passed
    assert any("declares gfx942" in failure for failure in verdict.failures)


def test_a_file_naming_a_declared_arch_stays_even_if_it_names_a_removed_one(team_matrix, double_wheel, tmp_path):
    item = rendered(team_matrix, NARROWED)["2.14.1-rocm7.2-py3.12-runtime"]
    site = unpack(double_wheel, tmp_path / "site")
    both = site / "torch/lib/hipsparselt/library/SPMM_Kernels_gfx90a_gfx942.co"  # one code object for two archs
    both.parent.mkdir(parents=True)
    both.write_bytes(b"two archs")
    assert run_trim(trim_command(item.dockerfile), site).returncode == 0
    assert both.exists()
    assert not (site / "torch/lib/rocblas/library/TensileLibrary_lazy_gfx90a.dat").exists()


def test_snippet_fails_when_the_wheel_bundles_no_such_files(team_matrix, tmp_path):
    item = rendered(team_matrix, NARROWED)["2.14.1-rocm7.2-py3.12-runtime"]
    bare = torch_double(tmp_path / "bare", "2.14.1", "rocm7.2", None, "7.2.26015", list(ROCM_7_2))
    result = run_trim(trim_command(item.dockerfile), unpack(bare, tmp_path / "site"))
    assert result.returncode == 1
    assert "no file of the ROCm libraries bundled with torch names gfx900" in result.stderr


def test_double_is_dominated_by_per_arch_files_and_small_enough_for_tests():
    layout = rocm_library_layout(list(ROCM_7_2), 4 << 20, 9 << 20)
    per_arch = sum(size for path, size in layout.items() if "gfx" in path)
    assert per_arch / sum(layout.values()) > 0.85
    assert sum(layout.values()) < 150 << 20
