"""`buildkit compat check` reads the published artifacts: PyPI's releases and their wheels' METADATA and
version modules (by byte ranges), the companion published with each torch release, the GPU code in a
wheel's libraries, and keeps the default matrix in step, so a new torch release plans its pair the day it
ships. The indexes are doubles on 127.0.0.1 whose fields are the published wheels' (testkit.artifacts);
the GPU code is read from the real torch wheel on this machine and from objects nvcc and hipcc build."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomlkit

from buildkit.adapters.files.bundled import compat_data
from buildkit.core.compat.facts import compat_from_data
from buildkit.core.upstream.code_objects import CodeObjectError, cuda_code, rocm_code
from buildkit.core.upstream.matrix_proposal import propose_matrix
from buildkit.core.upstream.releases import PublishedFile, backend_pins, pair_companion, read_metadata, read_version_module, releases
from testkit.artifacts import PublishedFile as PypiPublished
from testkit.artifacts import PypiDouble, companion_files, torch_release_files, torch_wheel
from testkit.machine_wheels import local_wheels
from testkit.pytorch_index import PyTorchIndex, torch_wheel_name, wheels_from_compat
from testkit.wheel_index import WheelIndex as LocalWheelIndex
from testkit.wheels import published_torch

ROOT = Path(__file__).resolve().parents[2]
COMPAT = compat_from_data(compat_data())
PYTHONS_2_15 = ("3.11", "3.12", "3.13", "3.14", "3.15")


# --- pure readers -------------------------------------------------------------------------------------------


def test_metadata_and_version_module_give_the_published_pins_and_build():
    wheel = torch_wheel("torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl")
    import io
    import zipfile

    with zipfile.ZipFile(io.BytesIO(wheel)) as archive:
        metadata = read_metadata(archive.read("torch-2.15.0.dist-info/METADATA").decode())
        module = read_version_module(archive.read("torch/version.py").decode())
    assert metadata.requires_python == ">=3.11" and module["__version__"] == "2.15.0+cu132" and module["cuda"] == "13.2"
    pins = backend_pins(metadata.requires_dist)
    assert "nvidia-cudnn-cu13==9.26.0.51" in pins and pins[0].startswith("cuda-toolkit[") and pins[0].endswith("==13.2.2")
    # a marker that holds on every Linux machine and Python goes; one that leaves a Python out stays, as written
    assert 'triton~=3.9.0; platform_system == "Linux" and python_version < "3.16"' in pins
    assert 'cuda-bindings<14,>=13.0.3; platform_system == "Linux" and python_version < "3.15"' in pins
    assert not any(p.startswith(("filelock", "optree")) for p in pins)  # not a backend library; an extra's


def test_a_version_module_is_read_as_literals_never_run(tmp_path):
    planted = tmp_path / "ran"
    text = f"__version__ = '2.15.0+cu132'\nimport os\nos.mkdir({str(planted)!r})\ncuda = '13.2'\n"
    assert read_version_module(text) == {"__version__": "2.15.0+cu132", "cuda": "13.2"} and not planted.exists()
    assert read_version_module("def (") == {}


def _release(project, version, day, requires=()):
    from buildkit.core.upstream.releases import Release, WheelMetadata

    return Release(project, version, "", day, (), (), "", "w.whl", WheelMetadata(project, version, "", tuple(requires)))


def test_a_companion_pairs_with_the_torch_release_of_its_day_that_its_requirement_admits():
    torch = {v: _release("torch", v, d) for v, d in [("2.14.0", "2026-09-02"), ("2.14.1", "2026-09-30"), ("2.15.0", "2026-10-28")]}
    vision = {
        "0.29.0": _release("torchvision", "0.29.0", "2026-09-02", ["torch (==2.14.0)"]),
        "0.29.1": _release("torchvision", "0.29.1", "2026-09-30", ["torch (>=2.14.0)"]),
        "0.29.2": _release("torchvision", "0.29.2", "2026-10-28", ["torch (>=2.14.0)"]),
        "0.29.3": _release("torchvision", "0.29.3", "2026-11-20", ["torch (>=2.14.0)"]),  # no torch that day
        "0.31.0": _release("torchvision", "0.31.0", "2026-10-28", ["torch (>=2.16)"]),  # that day's torch is too old
    }
    pairing = pair_companion(torch, vision)
    assert pairing.paired == {"2.14.0": "0.29.0", "2.14.1": "0.29.1", "2.15.0": "0.29.2"}
    assert set(pairing.unpaired) == {"0.29.3", "0.31.0"}
    # torchaudio 2.11.0 names no torch at all (its METADATA has no Requires-Dist): its day decides
    audio = pair_companion(torch, {"2.11.1": _release("torchaudio", "2.11.1", "2026-10-28")})
    assert audio.paired == {"2.15.0": "2.11.1"}


def test_release_files_give_pythons_platforms_and_the_newest_linux_wheel():
    files = [
        PublishedFile(name, "2026-10-28", ">=3.11")
        for name in (
            "torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl",
            "torch-2.15.0-cp315-cp315-manylinux_2_28_x86_64.whl",
            "torch-2.15.0-cp315-cp315t-manylinux_2_28_x86_64.whl",
            "torch-2.15.0-cp312-cp312-manylinux_2_28_aarch64.whl",
            "torch-2.15.0-cp312-cp312-win_amd64.whl",
            "torch-2.16.0.dev20261101-cp312-cp312-manylinux_2_28_x86_64.whl",
            "torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl",
            f"torch-2.{'9' * 5000}-cp312-cp312-manylinux_2_28_x86_64.whl",
        )
    ]
    found = releases("torch", files)
    assert list(found) == ["2.15.0"]  # no dev release, no 5,000-digit version
    release = found["2.15.0"]
    assert release.pythons == ("3.11", "3.12", "3.15") and release.platforms == ("linux/amd64", "linux/arm64")
    assert release.wheel == "torch-2.15.0-cp315-cp315-manylinux_2_28_x86_64.whl" and release.uploaded == "2026-10-28"


# --- GPU code in real libraries ------------------------------------------------------------------------------


def _real_torch_wheel() -> Path | None:
    return next((p for p in local_wheels() if p.name.startswith("torch-2.14.1-") and "x86_64" in p.name), None)


@pytest.mark.slow
@pytest.mark.skipif(_real_torch_wheel() is None, reason="the machine's wheel folders hold no torch 2.14.1 x86_64 wheel")
def test_the_real_cuda_wheels_fat_binaries_name_its_arch_list():
    import zipfile

    with zipfile.ZipFile(_real_torch_wheel()) as wheel:
        code = cuda_code(wheel.read("torch/lib/libtorch_cuda.so"))
    # cuobjdump --list-elf on the same library (DESIGN.md section 6): SASS for these, a few kernels beyond, no PTX
    assert code.sass_archs() == ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")
    assert set(code.partial_sass_archs()) == {"sm_89", "sm_103", "sm_121"} and code.ptx_archs() == ()
    assert COMPAT.backend("cuda", "13.0").archs == ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0")


KERNEL = '__global__ void add(float* a) { a[threadIdx.x] += 1.0f; }\nextern "C" void launch(float* a) { add<<<1, 64>>>(a); }\n'


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc on this machine")
def test_nvcc_objects_sass_and_ptx_are_told_apart(tmp_path):
    (tmp_path / "k.cu").write_text(KERNEL)
    subprocess.run(
        [
            "nvcc",
            "-Xcompiler",
            "-fPIC",
            "-shared",
            "-gencode",
            "arch=compute_75,code=sm_75",
            "-gencode",
            "arch=compute_90,code=[sm_90,compute_90]",
            "k.cu",
            "-o",
            "k.so",
        ],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    code = cuda_code((tmp_path / "k.so").read_bytes())
    assert code.sass_archs() == ("sm_75", "sm_90") and code.ptx_archs() == ("sm_90",)


def _hipcc_required() -> bool:
    return bool(os.environ.get("BUILDKIT_REQUIRE_HIPCC"))


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("hipcc") is None and not _hipcc_required(), reason="no hipcc on this machine")
def test_hipcc_objects_offload_bundles_name_their_gfx_targets(tmp_path):
    (tmp_path / "k.hip").write_text("#include <hip/hip_runtime.h>\n" + KERNEL)
    subprocess.run(
        ["hipcc", "-fPIC", "-shared", "--offload-arch=gfx90a", "--offload-arch=gfx1030", "k.hip", "-o", "k.so"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        env={**os.environ, "HIP_PLATFORM": "amd"},
    )
    assert rocm_code((tmp_path / "k.so").read_bytes()).archs() == ("gfx90a", "gfx1030")


def test_what_is_not_a_library_is_one_error():
    with pytest.raises(CodeObjectError, match="not an ELF"):
        cuda_code(b"PK\x03\x04 a zip")
    elf = Path(sys.executable).resolve().read_bytes()  # a real ELF without GPU code: no arch list, but one message
    with pytest.raises(CodeObjectError, match=r"it has no \.nv_fatbin section, so no GPU code to read"):
        cuda_code(elf)
    with pytest.raises(CodeObjectError, match=r"it has no \.hip_fatbin section"):
        rocm_code(elf)


# --- compat check against the doubles --------------------------------------------------------------------


def _pypi(extra: dict[str, list] | None = None) -> PypiDouble:
    """torch 2.14.1 and 2.15.0 with their companions, as PyPI publishes them, plus `extra`."""
    projects = {
        "torch": [
            *torch_release_files("2.14.1", "2026-09-30", ("3.10", "3.11", "3.12", "3.13", "3.14"), ">=3.10", "cu130"),
            *torch_release_files("2.15.0", "2026-10-28", PYTHONS_2_15, ">=3.11"),
        ],
        "torchvision": [
            *companion_files("torchvision", "0.29.1", "2026-09-30", "torch (>=2.14.0)"),
            *companion_files("torchvision", "0.29.2", "2026-10-28", "torch (>=2.14.0)"),
        ],
        "torchaudio": companion_files("torchaudio", "2.11.1", "2026-10-28", "torch>=2.11"),
    }
    for project, files in (extra or {}).items():
        projects[project] += files
    return PypiDouble(projects).start()


# torch 2.16 as it will be published on 2026-12-22 (TEST DOUBLES: no 2.16 wheel exists yet). What is known of it
# (pytorch/pytorch #196028 for the date, test-infra #8670 for its nightlies' variants): builds for CUDA 13.0 and
# 13.4 (its own table lists those two) and ROCm 7.14 on PyTorch's index and ROCm 10.0 on AMD's whl-next index,
# torchvision 0.30.0 published the same day and requiring it, Python 3.11-3.15. Its pins are 2.15.0's with the
# CUDA 13.4 toolkit for cu134 (cuda-toolkit 13.4.3, PyPI); every arch list is 2.15.0's for the same build.
PYTHONS_2_16 = ("3.11", "3.12", "3.13", "3.14", "3.15")
TABLE_2_16 = """PYTORCH_RELEASES_CODE_CC: dict[str, dict[str, set[int]]] = {
    "13.0": {"x86_64": {75, 80, 86, 90, 100, 120}, "aarch64": {80, 90, 100, 110, 120}},
    "13.4": {"x86_64": {75, 80, 86, 90, 100, 120}, "aarch64": {80, 90, 100, 110, 120}},
}
"""
CUDA_FLAGS = {"x86_64": "sm_75 sm_80 sm_86 sm_90 sm_100 sm_120", "aarch64": "sm_80 sm_90 sm_100 sm_110 sm_120"}
ROCM_714_ARCHS = COMPAT.backend("rocm", "7.14").archs


def _pins_2_16(toolkit: str) -> list[str]:
    return [
        f'cuda-toolkit[cublas,cudart,cufft,cufile,cupti,cusolver,cusparse,nvjitlink,nvrtc,nvtx]=={toolkit}; platform_system == "Linux"',
        'cuda-bindings<14,>=13.0.3; platform_system == "Linux" and python_version < "3.15"',
        'nvidia-cudnn-cu13==9.26.0.51; platform_system == "Linux"',
        'nvidia-nccl-cu13==2.30.7; platform_system == "Linux"',
        'triton~=3.9.0; platform_system == "Linux" and python_version < "3.16"',
        'optree>=0.13.0; extra == "optree"',
    ]


def _torch_2_16(folder: Path, local: str, build: str, python: str, machine: str) -> Path:
    cuda = build.startswith("cu")
    requires = _pins_2_16("13.4.3" if build == "cu134" else "13.0.3") if cuda else [f"rocm[device-all,libraries]=={build[4:]}.*"]
    flags = CUDA_FLAGS[machine] if cuda else " ".join(ROCM_714_ARCHS)
    return published_torch(
        folder, "2.16.0", local, build, python, machine, requires_python=">=3.11", requires=["filelock", *requires], table=TABLE_2_16, flags=flags
    )


@pytest.fixture
def release_2_16(tmp_path):
    """PyPI, PyTorch's index and AMD's whl-next index on the day torch 2.16.0 ships, each a double on 127.0.0.1
    serving wheel doubles built by testkit.wheels (PyPI's is the CUDA 13.0 build); plus a torchvision released
    without a torch."""
    built = tmp_path / "wheels"
    machines = ("x86_64", "aarch64")
    pypi_wheels = [_torch_2_16(built / "pypi", "", "cu130", p, m) for p in PYTHONS_2_16 for m in machines]
    pypi = _pypi(
        {
            "torch": [PypiPublished(w.name, "2026-12-22T15:16:25Z", ">=3.11", w.read_bytes()) for w in pypi_wheels],
            "torchvision": [
                *companion_files("torchvision", "0.30.0", "2026-12-22", "torch (==2.16.0)"),
                *companion_files("torchvision", "0.29.3", "2026-11-20", "torch (>=2.14.0)"),
            ],
        }
    )
    folders = wheels_from_compat(COMPAT)
    real = {}
    for local, platforms in (("cu130", machines), ("cu134", machines), ("rocm7.14", ("x86_64",))):
        wheels = [_torch_2_16(built / local, local, local, p, m) for p in PYTHONS_2_16 for m in platforms]
        folders.setdefault(local, []).extend(w.name for w in wheels)
        real.update({w.name: w for w in wheels})
    index = PyTorchIndex(folders, real=real).start()
    whl_next = LocalWheelIndex({"whl-next": [_torch_2_16(built / "whl-next", "rocm10.0.0", "rocm10.0", "3.12", "x86_64")]}).start()
    yield pypi, index, f"{whl_next.url}/whl-next/"
    pypi.stop()
    index.stop()
    whl_next.stop()


def _checkout(tmp_path: Path) -> Path:
    """A copy of the tool as a checkout holds it (the package, the default matrix, the templates), so
    `compat check --write` edits its shipped data and default matrix as the nightly's pull request does."""
    copy = tmp_path / "checkout"
    shutil.copytree(ROOT / "buildkit", copy / "buildkit", ignore=shutil.ignore_patterns("__pycache__", "_bundled"))
    shutil.copytree(ROOT / "templates", copy / "templates")
    shutil.copy(ROOT / "matrix.toml", copy / "matrix.toml")
    return copy


def _buildkit(checkout: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "buildkit.cli", *args],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(checkout)},
    )


@pytest.mark.slow
def test_torch_2_16_on_day_one_becomes_a_complete_entry_and_plans_its_pairs(tmp_path, release_2_16):
    """The day 2.16.0 ships: `compat check --write` proposes its whole entry from the artifacts (builds, each build's
    archs, pins with their markers, torchvision, Pythons) and its stack; `plan` then plans its pairs, no hand edit."""
    pypi, index, whl_next = release_2_16
    checkout = _checkout(tmp_path)
    indexes = ("--index", index.url, "--pypi", pypi.url, "--layout-index", f"amd-whl-next={whl_next}")
    check = _buildkit(checkout, "compat", "check", "--json", *indexes)
    assert check.returncode == 3, check.stderr
    report = json.loads(check.stdout)
    subjects = {(d["torch"], d["subject"]) for d in report["differences"]}
    assert {
        ("2.16", "release 2.16.0"),
        ("2.16", "cuda 13.0"),
        ("2.16", "cuda 13.4"),
        ("2.16", "rocm 7.14"),
        ("2.16", "rocm 10.0"),
        ("2.16", "published 2.16.0"),
        ("2.16", "cuda 13.0 archs"),
        ("2.16", "cuda 13.4 archs"),
        ("2.16", "rocm 7.14 archs"),
    } <= subjects
    assert report["unpaired"]["torchvision"] == ["0.29.3"]  # published without a torch release
    assert "+++ b/matrix.toml" in report["diff"] and "+++ b/buildkit/data/compat.toml" in report["diff"]

    written = _buildkit(checkout, "compat", "check", "--write", *indexes)
    assert written.returncode == 0, written.stdout + written.stderr
    data = compat_from_data(tomlkit.parse((checkout / "buildkit/data/compat.toml").read_text()).unwrap())
    release = data.torch["2.16"]
    assert release.releases == ("2.16.0",) and release.python == PYTHONS_2_16 and release.unconfirmed == ()
    assert release.backends == {"cuda": ("13.0", "13.4"), "rocm": ("7.14", "10.0")}
    for cuda in ("13.0", "13.4"):  # each build's archs, per platform, read from its own wheels' flags
        built = data.wheel_archs("2.16", "cuda", cuda)
        assert (built.archs, built.arm64_archs) == (("7.5", "8.0", "8.6", "9.0", "10.0", "12.0"), ("8.0", "9.0", "10.0", "11.0", "12.0"))
        assert built.release == "2.16.0" and built.sources == ("wheel-arch-flags", "wheel-arch-table")
    assert release.arch_lists["rocm 7.14"].archs == ROCM_714_ARCHS and release.arch_lists["rocm 7.14"].sources == ("wheel-arch-flags",)
    published = release.published["2.16.0"]
    assert published.companions == {"torchvision": "0.30.0"} and published.pypi == "cuda 13.0" and published.date == "2026-12-22"
    assert 'triton~=3.9.0; platform_system == "Linux" and python_version < "3.16"' in published.pins["cuda 13.0"]
    assert any(pin.startswith("cuda-toolkit[") and pin.endswith("==13.4.3") for pin in published.pins["cuda 13.4"])  # its index's wheel
    assert published.pins["rocm 7.14"] == ("rocm[device-all,libraries]==7.14.*",)
    stack = tomlkit.parse((checkout / "matrix.toml").read_text())["torch"][0]
    assert stack["version"] == "2.16.0" and list(stack["python"]) == ["3.11", "3.12", "3.13"] and "companions" not in stack
    # 10.0 too: its device packages are known for the default families' targets (AMD's whl-next, [gfx] sdk_rocm)
    assert list(stack["cuda"]) == ["13.0", "13.4"] and list(stack["rocm"]) == ["7.14", "10.0"]
    assert dict(stack["pair"]) == {"cuda": "13.0", "rocm": "7.14"}

    again = _buildkit(checkout, "compat", "check", *indexes)
    assert again.returncode == 0, again.stdout  # the data agrees once written
    plan = _buildkit(checkout, "plan", "--select", "torch=2.16.0", "--select", "flavor=runtime", "--format", "json")
    assert plan.returncode == 0, plan.stderr
    targets = json.loads(plan.stdout)
    twins = [t for t in targets if t["pair"] == "2.16.0-py3.12-runtime"]
    assert {t["backend_version"] for t in twins} == {"13.0", "7.14"} and {t["family"] for t in twins if t["vendor"] == "amd"} >= {"mi300", "rdna3"}
    assert all(t["companions"] == [f"torchvision==0.30.0+{'cu130' if t['vendor'] == 'nvidia' else 'rocm7.14'}"] for t in twins)
    (cu134,) = [t for t in targets if t["id"] == "2.16.0-cuda13.4-py3.12-runtime"]
    assert cu134["companions"] == ["torchvision==0.30.0+cu134"] and cu134["pair"] is None
    assert cu134["labels"]["dev.buildkit.gpu-archs"] == "7.5;8.0;8.6;9.0;10.0;12.0"


@pytest.mark.slow
def test_a_release_without_rocm_wheels_plans_its_cuda_images_and_says_why(tmp_path):
    pypi = _pypi(
        {
            "torch": torch_release_files("2.16.0", "2026-12-22", PYTHONS_2_15, ">=3.11"),
            "torchvision": companion_files("torchvision", "0.30.0", "2026-12-22", "torch (==2.16.0)"),
        }
    )
    try:
        checkout = _checkout(tmp_path)
        written = _buildkit(checkout, "compat", "check", "--index", "none", "--pypi", pypi.url, "--layout-index", "amd-whl-next=none", "--write")
        assert written.returncode == 0, written.stdout + written.stderr
        entry = tomlkit.parse((checkout / "buildkit/data/compat.toml").read_text())["torch"]["2.16"]
        assert list(entry["cuda"]) == ["13.2"] and list(entry["rocm"]) == []  # PyPI's build; ROCm unknown until an index says
        plan = _buildkit(checkout, "plan", "--select", "torch=2.16.0")
        assert plan.returncode == 0, plan.stderr
        assert "2.16.0-cuda13.2-py3.12-runtime" in plan.stdout and "rocm" not in plan.stdout.split("note:")[0]
        assert "no AMD images: the compatibility data lists no ROCm wheels for torch 2.16 yet" in plan.stdout + plan.stderr
    finally:
        pypi.stop()


@pytest.mark.slow
def test_pypi_alone_reports_each_releases_published_facts(cli, tmp_path):
    pypi = _pypi()
    try:
        data = tmp_path / "compat.toml"
        text = (ROOT / "buildkit/data/compat.toml").read_text()
        document = tomlkit.parse(text)
        del document["torch"]["2.15"]["published"]  # as the data was before compat check read PyPI
        data.write_text(tomlkit.dumps(document))
        result = cli("compat", "check", "--json", "--index", "none", "--pypi", pypi.url, "--layout-index", "amd-whl-next=none", "--data", str(data))
        report = json.loads(result.out)
        row = next(r for r in report["releases"] if r["torch"] == "2.15.0")
        assert row["companions"] == {"torchvision": "0.29.2", "torchaudio": "2.11.1"} and row["pypi"] == "cuda 13.2"
        assert row["pythons"] == list(PYTHONS_2_15) and row["requires_python"] == ">=3.11"
        assert (
            result.code == 3
            and {"torch": "2.15", "subject": "published 2.15.0", "on": "index"}.items()
            <= next(d for d in report["differences"] if d["subject"] == "published 2.15.0").items()
        )
        # only byte ranges of the wheels were asked for: a few per wheel, never a whole file
        assert pypi.ranges and all(r.startswith("bytes=") for r in pypi.ranges)
        assert len(pypi.ranges) <= 6 * len({p for p in pypi.requests if p.endswith(".whl")})
    finally:
        pypi.stop()


def test_a_new_stack_leaves_out_what_it_cannot_build_and_says_so():
    """A new minor with ROCm 7.14 (PyTorch's index) and 10.0 (AMD's): with 10.0's device packages known for the
    families' targets ([gfx] sdk_rocm), the stack takes both; with them unknown, it takes 7.14 alone and its entry
    names why 10.0 is left out. Either way the pair is PyPI's CUDA build with PyTorch's own ROCm."""

    def proposed_entry(device_packages_of_10_0: bool) -> tuple[dict, str]:
        document = tomlkit.parse((ROOT / "buildkit/data/compat.toml").read_text())
        document["torch"]["2.16"] = {
            "releases": ["2.16.0"],
            "python": ["3.11", "3.12"],
            "cuda": ["13.0", "13.4"],
            "rocm": ["7.14", "10.0"],
            "published": {"2.16.0": {"date": "2026-12-22", "pypi": "cuda 13.0", "torchvision": "0.30.0"}},
        }
        if not device_packages_of_10_0:
            for target in document["gfx"].values():
                if "sdk_rocm" in target:
                    target["sdk_rocm"] = [version for version in target["sdk_rocm"] if version != "10.0"]
        compat = compat_from_data(json.loads(json.dumps(document.unwrap())))
        matrix = 'rocm_families = ["mi300", "rdna3"]\n\n[[torch]]\nversion = "2.15.0"\ncuda = ["13.2"]\n'
        proposed = propose_matrix(matrix, compat, ["3.11", "3.12"], ["torchvision"])
        return tomlkit.parse(proposed)["torch"][0], proposed

    entry, proposed = proposed_entry(device_packages_of_10_0=True)
    assert entry["version"] == "2.16.0" and list(entry["rocm"]) == ["7.14", "10.0"] and dict(entry["pair"]) == {"cuda": "13.0", "rocm": "7.14"}
    assert "# left out" not in proposed
    entry, proposed = proposed_entry(device_packages_of_10_0=False)
    assert entry["version"] == "2.16.0" and list(entry["rocm"]) == ["7.14"] and dict(entry["pair"]) == {"cuda": "13.0", "rocm": "7.14"}
    assert "# left out: rocm 10.0 (no device package known for gfx1100, gfx1101, gfx1102, gfx1103, gfx942)" in proposed


def test_the_matrix_follows_a_new_patch_release_and_unblocks_published_companions():
    document = tomlkit.parse((ROOT / "buildkit/data/compat.toml").read_text())
    document["torch"]["2.15"]["releases"] = ["2.15.0", "2.15.1"]
    document["torch"]["2.15"]["published"]["2.15.1"] = {"date": "2026-12-09", "torchvision": "0.29.3"}
    compat = compat_from_data(json.loads(json.dumps(document.unwrap())))
    matrix = '[[torch]]\nversion = "2.15.0"\ncompanions = []\ncuda = ["13.2"]\n'
    proposed = tomlkit.parse(propose_matrix(matrix, compat, ["3.11", "3.12"], ["torchvision"]))
    assert proposed["torch"][0]["version"] == "2.15.1" and "companions" not in proposed["torch"][0]


@pytest.mark.slow
def test_a_server_without_byte_ranges_is_one_message_and_exit_1(cli):
    from http.server import BaseHTTPRequestHandler

    from testkit.local_http import serve, stop_serving

    files = torch_release_files("2.15.0", "2026-10-28", ("3.12",), ">=3.11")

    class NoRanges(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            if self.path.endswith("/torch/"):
                body = json.dumps(
                    {"meta": {"api-version": "1.1"}, "files": [{"filename": f.filename, "url": f"/f/{f.filename}", "upload-time": f.uploaded} for f in files]}
                ).encode()
                kind = "application/vnd.pypi.simple.v1+json"
            elif self.path.startswith("/f/"):
                body, kind = files[0].data, "application/octet-stream"
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    server = serve(NoRanges)
    try:
        result = cli(
            "compat", "check", "--index", "none", "--layout-index", "amd-whl-next=none", "--pypi", f"http://127.0.0.1:{server.server_address[1]}/simple"
        )
        assert result.code == 1 and "without a byte range" in result.err and "Traceback" not in result.err
    finally:
        stop_serving(server)


@pytest.mark.slow
@pytest.mark.skipif(_real_torch_wheel() is None, reason="the machine's wheel folders hold no torch 2.14.1 x86_64 wheel")
def test_deep_reads_the_real_wheels_gpu_code_over_byte_ranges_and_corrects_an_arch_list(cli, tmp_path):
    """The real torch 2.14.1 CUDA 13.0 wheel, served on 127.0.0.1 as PyTorch's index names it: --deep reads its
    libtorch_cuda.so by ranges and the check its libtorch_python.so's arch flags; both say what the build carries,
    which --write records as torch 2.14's own list for CUDA 13.0, so a planted wrong list for CUDA 13.0 in general
    no longer decides 2.14.1's images."""
    data = tmp_path / "compat.toml"
    document = tomlkit.parse((ROOT / "buildkit/data/compat.toml").read_text())
    document["cuda"]["13.0"]["archs"] = ["7.0", "7.5", "8.0", "8.6", "9.0", "10.0", "12.0+PTX"]
    del document["torch"]["2.14"]["arch_lists"]["cuda 13.0"]  # as before 2.14.1's wheels were read
    data.write_text(tomlkit.dumps(document))
    real = torch_wheel_name("2.14.1", "cu130", "3.11")
    folders = wheels_from_compat(COMPAT)  # doubles carry no GPU library: deep passes them over
    # the real wheel is the newest CPython's x86_64 one of 2.14.1 on cu130, the one deep reads
    # (2.15.0 is left off cu130 so that 2.14.1 is the variant's newest release, the one deep reads)
    folders["cu130"] = [
        n for n in folders["cu130"] if not n.startswith("torch-2.15.0+") and (not (n.startswith("torch-2.14.1+") and n.endswith("x86_64.whl")) or n == real)
    ]
    index = PyTorchIndex(folders, real={real: _real_torch_wheel()}).start()
    try:
        result = cli("compat", "check", "--json", "--deep", "--index", index.url, "--pypi", "none", "--layout-index", "amd-whl-next=none", "--data", str(data))
        report = json.loads(result.out)
        (finding,) = [f for f in report["code"] if f["backend_version"] == "13.0"]
        assert finding["archs"] == ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"] and set(finding["partial"]) == {"8.9", "10.3", "12.1"}
        assert {(d["torch"], d["subject"]) for d in report["differences"]} == {("2.14", "cuda 13.0 archs"), ("2.15", "cuda 13.0")}
        written = cli(
            "compat", "check", "--deep", "--write", "--index", index.url, "--pypi", "none", "--layout-index", "amd-whl-next=none", "--data", str(data)
        )
        assert written.code == 0, written.out + written.err
        own = tomlkit.parse(data.read_text())["torch"]["2.14"]["arch_lists"]["cuda 13.0"]
        assert list(own["archs"]) == ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"] and own["release"] == "2.14.1"
        assert list(own["sources"]) == ["wheel-arch-flags", "wheel-code-objects"]  # the flags decide; the GPU code agrees
        compat = compat_from_data(tomlkit.parse(data.read_text()).unwrap())
        assert compat.wheel_archs("2.14", "cuda", "13.0").archs == ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0")
        assert compat.backend("cuda", "13.0").archs[0] == "7.0"  # the planted list: what releases without their own list fall back to
    finally:
        index.stop()


@pytest.mark.slow
def test_a_layout_index_adds_a_rocm_version_only_to_the_release_whose_newest_patch_it_carries(cli, tmp_path):
    """AMD's whl-next double: torch 2.14.0 and 2.15.0 as +rocm10.1.0. ROCm 10.1 joins torch 2.15 (its newest
    release is there) and not 2.14, whose newest, 2.14.1, is not; nothing else is judged by that index."""
    from testkit.local_http import QuietHandler, serve, stop_serving

    names = [f"torch-{release}+rocm10.1.0-cp312-cp312-manylinux_2_28_x86_64.whl" for release in ("2.14.0", "2.15.0")]

    class WhlNext(QuietHandler):
        def do_GET(self):
            if self.path.rstrip("/").endswith("/torch"):
                body = "".join(f'<a href="/files/{n.replace("+", "%2B")}">{n}</a>\n' for n in names).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            else:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

    server = serve(WhlNext)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/rocm/whl-next/"
        data = tmp_path / "compat.toml"
        data.write_text((ROOT / "buildkit/data/compat.toml").read_text())
        result = cli("compat", "check", "--json", "--index", "none", "--pypi", "none", "--layout-index", f"amd-whl-next={url}", "--data", str(data))
        report = json.loads(result.out)
        assert result.code == 3 and [(d["torch"], d["subject"], d["on"]) for d in report["differences"]] == [("2.15", "rocm 10.1", "index")]
        assert cli("compat", "check", "--index", "none", "--pypi", "none", "--layout-index", f"amd-whl-next={url}", "--data", str(data), "--write").code == 0
        assert list(tomlkit.parse(data.read_text())["torch"]["2.15"]["rocm"]) == ["7.14", "10.1"]
    finally:
        stop_serving(server)
