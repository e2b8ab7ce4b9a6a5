"""Host detection on fixture trees, the target each host is routed to, run flags and doctor's findings."""

from __future__ import annotations

import json
import os

import pytest

from buildkit.adapters.host import Identity, gfx_name, read_host
from buildkit.core.host import Gpu, HostFacts, arch_covered, best_target, diagnose, gpu_access, primary_vendor
from buildkit.core.labels import ImageIdentity
from buildkit.core.vendors import AMD, NVIDIA
from buildkit.core.plan import expand
from buildkit.adapters.matrix_files import load_matrix
from testkit import hosts

MATRIX = load_matrix(None)
COMPAT = MATRIX.compat
PLAN = expand(MATRIX)
OUTSIDER = Identity(uid=4242, gids=frozenset({4242}))  # a user in neither video nor render
MEMBER = Identity(uid=4242, gids=frozenset({4242, hosts.RENDER_GID}))


def facts(builder, tmp_path, identity=MEMBER, runtimes=("runc", "nvidia")):
    root = builder(tmp_path / "host")
    # device nodes are plain files owned by whoever runs the tests: give them the host's group
    for node in list(root.glob("dev/kfd")) + list(root.glob("dev/dri/renderD*")):
        try:
            os.chown(node, -1, hosts.RENDER_GID)
        except PermissionError:
            pytest.skip("needs root to give fixture device nodes their group")
    return read_host(COMPAT, root, identity, runtimes)


LABELS = {
    "cuda13": {"dev.buildkit.backend": "cuda", "dev.buildkit.backend-version": "13.0", "dev.buildkit.gpu-archs": "7.5;8.0;8.6;9.0;10.0;12.0+PTX", "dev.buildkit.pair": "2.14.1-py3.12-runtime"},
    "rocm72": {"dev.buildkit.backend": "rocm", "dev.buildkit.backend-version": "7.2", "dev.buildkit.gpu-archs": "gfx90a;gfx942;gfx1100;gfx1101", "dev.buildkit.pair": "2.14.1-py3.12-runtime"},
    "rocm_narrow": {"dev.buildkit.backend": "rocm", "dev.buildkit.backend-version": "7.2", "dev.buildkit.gpu-archs": "gfx942;gfx1100"},
}


def test_gfx_names_from_kfd_target_versions():
    assert [gfx_name(v) for v in (90402, 90010, 110000, 100300, 110001, 120001)] == ["gfx942", "gfx90a", "gfx1100", "gfx1030", "gfx1101", "gfx1201"]


def test_mi300x(tmp_path):
    host = facts(hosts.mi300x, tmp_path)
    assert [(g.vendor, g.name, g.arch) for g in host.gpus] == [("amd", "Instinct MI300X", "gfx942")] * 2
    assert host.amdgpu_driver == "6.10.5" and host.kfd.path == "/dev/kfd" and host.kfd.group == "render"
    choice = best_target(host, PLAN, COMPAT, "amd")
    assert choice.target.id == "2.15.0-rocm7.14-mi300-py3.13-runtime"  # the family image that carries gfx942
    assert gpu_access(AMD, host).docker_flags() == [
        "--device", "/dev/kfd", "--device", "/dev/dri", "--group-add", "video", "--group-add", str(hosts.RENDER_GID),
        "--security-opt", "seccomp=unconfined", "--shm-size", "8g",
    ]
    assert diagnose(host, COMPAT, "rocm", ImageIdentity.read(LABELS["rocm72"])) == []


def test_rx7900xtx_ignores_the_hdmi_audio_function(tmp_path):
    host = facts(hosts.rx7900xtx, tmp_path)
    assert [(g.pci, g.name, g.arch) for g in host.gpus] == [("0000:03:00.0", "Radeon RX 7900 XTX", "gfx1100")]
    assert best_target(host, PLAN, COMPAT, "amd", python="3.12").target.id == "2.15.0-rocm7.14-rdna3-py3.12-runtime"


def test_h100_with_an_old_driver_is_routed_to_cuda_12(tmp_path):
    host = facts(lambda root: hosts.h100(root, driver="570.86.15"), tmp_path)
    assert [(g.name, g.arch) for g in host.gpus] == [("H100 SXM5 80GB", "sm_90")]
    assert host.nvidia_driver == "570.86.15"
    choice = best_target(host, PLAN, COMPAT, "nvidia", python="3.12")
    assert choice.target.id == "2.14.1-cuda12.6-py3.12-runtime"
    assert "2.15.0-cuda13.2-py3.12-runtime: driver 570.86.15 is older than 580.65.06" in choice.reasons[0]
    assert gpu_access(NVIDIA, host).docker_flags() == ["--gpus", "all", "--shm-size", "8g"]
    (finding,) = diagnose(host, COMPAT, "cuda-image", ImageIdentity.read(LABELS["cuda13"]))
    assert finding.blocking and "older than 580.65.06, the oldest that runs CUDA 13.0" in finding.title


def test_h100_with_a_current_driver_gets_the_pair_twin(tmp_path):
    host = facts(hosts.h100, tmp_path)
    assert best_target(host, PLAN, COMPAT, "nvidia", python="3.12").target.id == "2.15.0-cuda13.2-py3.12-runtime"
    assert diagnose(host, COMPAT, "cuda-image", ImageIdentity.read(LABELS["cuda13"])) == []


def test_mixed_host_is_routed_to_the_vendor_with_more_gpus(tmp_path):
    host = facts(hosts.mixed, tmp_path)
    assert host.vendors() == ("nvidia", "amd") and primary_vendor(host) == "nvidia"
    assert best_target(host, PLAN, COMPAT, "amd").target.backend == "rocm"


def test_amd_host_without_kfd(tmp_path):
    host = facts(hosts.amd_without_kfd, tmp_path)
    assert [g.arch for g in host.gpus] == [""]  # no kfd topology: the gfx target is unknown
    choice = best_target(host, PLAN, COMPAT, "amd")
    assert choice.target is None and "the ROCm kernel driver (/dev/kfd) is not loaded" in choice.reasons[0]
    titles = [f.title for f in diagnose(host, COMPAT, "rocm", ImageIdentity.read(LABELS["rocm72"]))]
    assert titles[0] == "the ROCm kernel driver is not loaded: /dev/kfd is missing"


def test_no_gpu(tmp_path):
    host = facts(hosts.no_gpu, tmp_path)
    assert host.gpus == () and primary_vendor(host) is None
    (finding,) = diagnose(host, COMPAT)
    assert not finding.blocking and "no GPU found" in finding.title


def test_cuda_image_on_an_amd_host_reports_the_cpu_fallback_first(tmp_path):
    host = facts(hosts.mi300x, tmp_path, identity=OUTSIDER)
    findings = diagnose(host, COMPAT, "team/pytorch:cuda", ImageIdentity.read(LABELS["cuda13"]))
    assert findings[0].blocking
    assert "is a CUDA image and this host has only AMD GPUs: torch will find no GPU it can use and run on the CPU" in findings[0].title


def test_user_outside_the_render_group_is_told_how_to_fix_it(tmp_path):
    host = facts(hosts.mi300x, tmp_path, identity=OUTSIDER)
    findings = diagnose(host, COMPAT, "rocm", ImageIdentity.read(LABELS["rocm72"]))
    assert findings and all(f.blocking for f in findings)
    assert findings[0].title == "/dev/kfd is not readable and writable by this user (owned by group render)"
    assert f"--group-add {hosts.RENDER_GID}" in findings[0].fix and "usermod -aG render,video" in findings[0].fix


def test_arch_missing_from_the_image_offers_the_override_as_a_risk(tmp_path):
    host = facts(hosts.rx7800xt, tmp_path)
    (finding,) = diagnose(host, COMPAT, "rocm", ImageIdentity.read(LABELS["rocm_narrow"]))
    assert "gfx1101) is not in the image's arch list (gfx942 gfx1100): kernels fail with hipErrorNoBinaryForGpu" in finding.title
    assert "HSA_OVERRIDE_GFX_VERSION=11.0.0" in finding.fix and "unsupported by AMD" in finding.fix


def test_missing_nvidia_container_runtime(tmp_path):
    host = facts(hosts.h100, tmp_path, runtimes=("runc",))
    titles = [f.title for f in diagnose(host, COMPAT, "cuda", ImageIdentity.read(LABELS["cuda13"]))]
    assert titles == ["the Docker engine has no NVIDIA container runtime, so --gpus cannot hand it the GPU"]


@pytest.mark.parametrize("gpu,archs,covered", [
    ("sm_90", ("8.0", "9.0"), True),
    ("sm_86", ("8.0",), True),  # same major, newer minor runs sm_80 code
    ("sm_120", ("9.0", "10.0"), False),
    ("sm_121", ("10.0", "12.0+PTX"), True),
    ("sm_70", ("7.5", "8.0"), False),
    ("gfx942", ("gfx90a", "gfx942"), True),
    ("gfx1101", ("gfx1100",), False),
])
def test_arch_coverage(gpu, archs, covered):
    assert arch_covered(gpu, archs) is covered


def test_detect_cli_on_a_fixture_host(cli, tmp_path):
    root = hosts.mi300x(tmp_path / "host")
    result = cli("detect", "--json", "--host-root", root, "--python", "3.12")
    document = json.loads(result.out)
    assert document["vendor"] == "amd" and len(document["gpus"]) == 2
    assert document["targets"]["amd"]["tag"] == "ghcr.io/buildkit-images/pytorch:2.15.0-rocm7.14-mi300-py3.12-runtime"
    assert "--device" in document["targets"]["amd"]["run_flags"]


def test_detect_on_this_machine_reports_no_gpu(cli):
    result = cli("detect")
    assert result.code == 0 and "no GPU on this host: images run on the CPU here" in result.out


def test_run_print_refuses_a_cuda_image_on_an_amd_host(cli, tmp_path):
    root = hosts.mi300x(tmp_path / "host")
    result = cli("run", "ghcr.io/buildkit-images/pytorch:2.14.1-cuda13.0-py3.12-runtime", "--print", "--host-root", root)
    assert result.code == 2
    assert "is a CUDA image and this host has only AMD GPUs" in result.err
    assert "run ghcr.io/buildkit-images/pytorch:2.14.1-rocm7.14-mi300-py3.12-runtime instead" in result.err  # its pair's gfx942 image


def test_run_print_picks_the_fitting_image_with_its_flags(cli, tmp_path):
    root = hosts.mi300x(tmp_path / "host")
    result = cli("run", "--print", "--host-root", root, "--python", "3.12", "--", "python", "-c", "import torch")
    assert result.code == 0, result.err
    assert "--device /dev/kfd --device /dev/dri --group-add video" in result.out
    assert result.out.strip().endswith("ghcr.io/buildkit-images/pytorch:2.15.0-rocm7.14-mi300-py3.12-runtime python -c 'import torch'")


def rx6700xt(root):
    return hosts.amd_host(root, [("0000:03:00.0", "0x73df", "0x030000", 100301)])


def test_a_gpu_no_wheel_carries_is_sent_to_the_source_flavor_plan_accepts(tmp_path):
    host = facts(rx6700xt, tmp_path)
    assert [g.arch for g in host.gpus] == ["gfx1031"]
    (finding,) = diagnose(host, COMPAT, "rocm", ImageIdentity.read(LABELS["rocm72"]))
    assert "with `buildkit build --select flavor=source --gpu-arch gfx1031`" in finding.fix
    assert "HSA_OVERRIDE_GFX_VERSION=10.3.0" not in finding.fix  # the image has no gfx1030 code to borrow


@pytest.mark.parametrize("arch", sorted(COMPAT.gfx_targets))
def test_doctor_suggests_only_what_plan_accepts(arch, tmp_path, team_matrix):
    """For every gfx target buildkit knows: doctor's advice for a GPU of it names a ROCm image or a source build
    that `plan` then accepts."""
    from buildkit.app.targets import Choices, SourceOptions, select_targets

    source_matrix = team_matrix('extends = "default"\nflavors = ["runtime", "source"]\n')
    identity = ImageIdentity.read({"dev.buildkit.backend": "rocm", "dev.buildkit.backend-version": "7.2", "dev.buildkit.gpu-archs": "gfx000"})
    host = HostFacts(gpus=(Gpu("amd", "0000:03:00.0", "0x0", "test GPU", arch),), kfd=None)
    (finding, *_) = [f for f in diagnose(host, COMPAT, "rocm", identity) if arch in f.title]
    if "--gpu-arch" in finding.fix:
        selection = select_targets(Choices(matrix=source_matrix, selectors=("flavor=source",), source=SourceOptions(gpu_archs=(arch,))))
        assert selection.targets  # not refused as an unknown target
    else:
        versions = COMPAT.gfx_targets[arch].rocm_versions
        assert versions and all(arch in COMPAT.backend("rocm", v).archs for v in versions)


def test_mixed_amd_host_gets_a_per_device_override(tmp_path):
    host = facts(lambda root: hosts.amd_host(root, [("0000:03:00.0", "0x744c", "0x030000", 110000),
                                                    ("0000:43:00.0", "0x747e", "0x030000", 110001)]), tmp_path)
    (finding,) = diagnose(host, COMPAT, "rocm", ImageIdentity.read(LABELS["rocm_narrow"]))
    assert "HSA_OVERRIDE_GFX_VERSION_1=11.0.0 makes it run gfx1100 code (this host's AMD GPUs differ" in finding.fix


def test_a_label_arch_buildkit_cannot_read_covers_nothing_and_never_crashes():
    assert arch_covered("sm_90", ("abc", "9.0")) is True
    assert arch_covered("sm_90", ("abc", "1.2.3")) is False
    assert arch_covered("sm_9x", ("9.0",)) is False
