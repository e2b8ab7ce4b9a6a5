"""The source flavor: a multi-stage Dockerfile that hipifies and compiles PyTorch for ROCm, checked for
the invariants a source build must keep, and the knobs that shape it (archs, compile jobs, checkout)."""

from __future__ import annotations

import re
import subprocess

import pytest

from buildkit.app.targets import Choices, SourceOptions, select_targets
from buildkit.core.targets.source import GB_PER_JOB, max_jobs
from testkit.dockerfiles import stages
from testkit.runner import tool

GIB = 1024**3
# The build toolchain and the sources stay in the build stages; g++ and the Python headers that
# torch.compile needs at run time are the runtime flavor's own (compile = true), as in every runtime image.
BUILD_TOOLCHAIN = re.compile(r"\b(hipcc|clang|cmake|ninja|ccache|git clone|/src/|build-essential|setup\.py)\b")


@pytest.fixture
def source_matrix(team_matrix):
    return team_matrix('extends = "default"\nflavors = ["source"]\ninclude = [{ torch = "2.14.1", backend_version = "7.2" }]\n')


def render(path, **options):
    (item,) = select_targets(Choices(matrix=path, source=SourceOptions(**options))).render()
    return item


def test_only_rocm_targets_and_on_the_devel_python(source_matrix, cli):
    selection = select_targets(Choices(matrix=source_matrix))
    assert [t.id for t in selection.targets] == ["2.14.1-rocm7.2-py3.12-source"]
    assert any("compiles ROCm torch only" in str(n) for n in selection.notes)


def test_stages_and_their_order(source_matrix):
    item = render(source_matrix)
    named = stages(item.dockerfile)
    assert list(named) == ["builder", "torchvision", "rocm-libs", "torch-wheel", "wheels", "tools", "shared", "image"]
    assert named["builder"].startswith("FROM rocm/dev-ubuntu-24.04:7.2.4-complete AS builder")
    builder = named["builder"]
    # hipify runs before anything compiles, and the wheel build gets the arch list and the job count
    assert builder.index("python tools/amd_build/build_amd.py") < builder.index("python setup.py bdist_wheel")
    build_step = builder[builder.index("ARG PYTORCH_ROCM_ARCH") :]
    assert 'PYTORCH_ROCM_ARCH="${PYTORCH_ROCM_ARCH}" MAX_JOBS="${jobs}"' in build_step and "USE_ROCM=1" in build_step
    assert f"/ 1024 / 1024 / {GB_PER_JOB}" in build_step and "--mount=type=cache,target=/root/.cache/ccache" in build_step
    assert 'git clone --depth 1 --branch "${PYTORCH_REF}" --recurse-submodules --shallow-submodules' in builder
    assert item.build_args["PYTORCH_REF"] == "v2.14.1" and item.build_args["TORCHVISION_REF"] == "v0.29.1"
    assert "python setup.py bdist_wheel" in named["torchvision"] and "pip install --no-cache-dir --no-deps /wheels/torch-" in named["torchvision"]


def test_runtime_stage_has_no_build_toolchain_no_source_and_only_the_built_wheels(source_matrix):
    named = stages(render(source_matrix).dockerfile)
    runtime = named["tools"] + named["shared"] + named["image"]
    assert runtime.startswith("FROM python:3.12-slim-trixie AS tools\n") and named["shared"].startswith("FROM tools AS shared\n")
    instructions = "\n".join(line for line in runtime.splitlines() if not line.lstrip().startswith("#"))
    assert not BUILD_TOOLCHAIN.search(instructions), BUILD_TOOLCHAIN.search(instructions)
    assert "--mount=type=bind,from=wheels,target=/wheels" in runtime
    installs = [line for line in runtime.splitlines() if "pip install" in line]
    # uv (the image's installer, pinned) in the tools stage, then only the built wheels
    assert installs == [' && pip install "uv==0.13.9"', " && pip install /wheels/torch-*.whl /wheels/torchvision-*.whl \\"]
    assert "TORCH_INDEX_URL" not in runtime and "COPY --from=rocm-libs /rocm-runtime /opt/rocm" in runtime


def test_gpu_arch_narrows_the_compiled_list_and_reaches_labels(source_matrix):
    item = render(source_matrix, gpu_archs=("gfx942",))
    assert item.build_args["PYTORCH_ROCM_ARCH"] == "gfx942"
    assert 'ARG PYTORCH_ROCM_ARCH="gfx942"' in item.dockerfile
    assert item.labels["dev.buildkit.gpu-archs"] == "gfx942"
    assert item.labels["dev.buildkit.build-options"] == "USE_ROCM=1 PYTORCH_ROCM_ARCH=gfx942 MAX_JOBS=auto"
    assert item.labels["dev.buildkit.source-revision"] == "v2.14.1"
    assert render(source_matrix, gpu_archs=("gfx942",), max_jobs=12).build_args["MAX_JOBS"] == "12"


def test_unknown_gpu_arch_is_rejected_with_the_known_ones(cli, source_matrix):
    result = cli("render", "--matrix", source_matrix, "--gpu-arch", "gfx9999")
    assert result.code == 2 and "--gpu-arch: unknown gfx target gfx9999; known: gfx900, gfx902, gfx904, gfx906" in result.err  # rocm-bootstrap's targets


def test_wheel_flavors_can_only_narrow(cli):
    result = cli("plan", "--select", "id=2.14.1-rocm7.2-py3.12-runtime", "--gpu-arch", "gfx1010")
    assert result.code == 2 and "only the source flavor compiles for new archs" in result.err


def test_local_checkout_is_the_build_context(source_matrix, tmp_path):
    checkout = tmp_path / "pytorch"
    (checkout / "tools" / "amd_build").mkdir(parents=True)
    (checkout / "tools" / "amd_build" / "build_amd.py").write_text("")
    item = render(source_matrix, pytorch_src=checkout)
    builder = stages(item.dockerfile)["builder"]
    assert "COPY . /src/pytorch" in builder and "github.com/pytorch/pytorch" not in builder
    assert item.labels["dev.buildkit.source-revision"] == "local checkout (build context)"
    with pytest.raises(Exception, match="is not a PyTorch checkout"):
        render(source_matrix, pytorch_src=tmp_path)


@pytest.mark.parametrize(
    "memory_gib,cores,expected",
    [
        (24, 2, 2),
        (24, 16, 3),
        (256, 64, 36),
        (512, 32, 32),
        (4, 8, 1),
        (0, 8, 1),
    ],
)
def test_max_jobs_follows_memory_then_cores(memory_gib, cores, expected):
    assert max_jobs(memory_gib * GIB, cores) == expected


def test_dockerfile_arithmetic_matches_max_jobs(tmp_path):
    """The shell that derives MAX_JOBS in the builder gives what max_jobs() gives for the same machine."""
    meminfo = tmp_path / "meminfo"
    for memory_gib, cores in ((24, 2), (24, 16), (256, 64), (4, 8)):
        meminfo.write_text(f"MemTotal: {memory_gib * 1024 * 1024 + 1} kB\nMemAvailable: {memory_gib * 1024 * 1024} kB\n")
        script = (
            f"jobs=\"$(awk '/MemAvailable/ {{ print int($2 / 1024 / 1024 / {GB_PER_JOB}) }}' {meminfo})\""
            f" && jobs=$(( jobs < 1 ? 1 : jobs )) && jobs=$(( jobs > {cores} ? {cores} : jobs )) && echo $jobs"
        )
        shell = subprocess.run(["bash", "-c", script], capture_output=True, text=True).stdout.strip()
        assert int(shell) == max_jobs(memory_gib * GIB, cores)


@pytest.mark.slow
def test_source_dockerfile_passes_hadolint(source_matrix, tmp_path):
    hadolint = tool("hadolint")
    assert hadolint, "install the test extras"
    for options in ({}, {"gpu_archs": ("gfx942",), "max_jobs": 8}):
        path = tmp_path / "Dockerfile"
        path.write_text(render(source_matrix, **options).dockerfile)
        result = subprocess.run([hadolint, "--no-color", "--failure-threshold", "warning", str(path)], capture_output=True, text=True)
        assert result.returncode == 0, result.stdout


def test_a_debian_devel_image_builds_with_the_python_its_os_ships(team_matrix):
    """A team's own ROCm devel base on Debian (the toolchain image the source build test uses is one): its
    OS is read from the tag, and [compat.os_python] names that OS's Python."""
    path = team_matrix(
        'extends = "default"\nflavors = ["source"]\ninclude = [{ torch = "2.14.1" }]\npython = ["3.14"]\n'
        '[compat.rocm."7.2"]\ndevel_base = "registry.example.com/rocm-toolchain:debian-sid"\n'
        '[compat.os_python]\ndebiansid = "3.14"\n'
    )
    (target,) = select_targets(Choices(matrix=path)).targets
    assert (target.id, target.builder_image) == ("2.14.1-rocm7.2-py3.14-source", "registry.example.com/rocm-toolchain:debian-sid")
    item = render(path)
    assert "FROM registry.example.com/rocm-toolchain:debian-sid AS builder" in item.dockerfile
    assert "python3.14 -m venv /opt/build-venv" in item.dockerfile and "ROCM_PATH=" not in item.dockerfile
