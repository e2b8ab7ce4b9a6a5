"""Host detection on fixture trees, the target each host is routed to, run flags, CDI and doctor's findings.

Every host tree here is read by the real adapter (testkit.hosts writes what the kernel exposes on such a
host); the decisions are those of core/host/, and detect, doctor and run must agree on each tree.
"""

from __future__ import annotations

import json
import os
import re

import pytest
from rich.console import Console

from buildkit.adapters.files.matrix import load_matrix
from buildkit.adapters.host import Identity, gfx_name, read_host
from buildkit.cli import program as cli_program
from buildkit.core.host.access import gpu_access
from buildkit.core.host.facts import EngineFacts, Gpu, HostFacts, engine_from_option
from buildkit.core.host.fit import arch_covered
from buildkit.core.host.routing import assess, best_target, primary_vendor, route
from buildkit.core.labels import ImageIdentity
from buildkit.core.matrix.resolve import parse_selectors
from buildkit.core.targets.plan import expand, select
from buildkit.core.vendors import AMD, NVIDIA
from buildkit.errors import UserError
from testkit import hosts

MATRIX = load_matrix(None)
COMPAT = MATRIX.compat
PLAN = expand(MATRIX)
OUTSIDER = Identity(uid=4242, gids=frozenset({4242}))  # a user in neither video nor render
MEMBER = Identity(uid=4242, gids=frozenset({4242, hosts.RENDER_GID}))
DOCKER = EngineFacts("docker", "26.1.5", runtimes=("runc", "nvidia"), cdi_spec_dirs=())  # this machine's Docker, CDI off
CDI_DOCKER = EngineFacts("docker", "28.2.2", runtimes=("runc",))


def facts(builder, tmp_path, identity=MEMBER, engine=DOCKER):
    root = builder(tmp_path / "host")
    # device nodes are plain files owned by whoever runs the tests: give them the host's group
    for node in list(root.glob("dev/kfd")) + list(root.glob("dev/dri/renderD*")):
        try:
            os.chown(node, -1, hosts.RENDER_GID)
        except PermissionError:
            pytest.skip("needs root to give fixture device nodes their group")
    return read_host(COMPAT, root, identity, engine)


LABELS = {
    "cuda13": {
        "dev.buildkit.backend": "cuda",
        "dev.buildkit.backend-version": "13.0",
        "dev.buildkit.gpu-archs": "7.5;8.0;8.6;9.0;10.0;12.0+PTX",
        "dev.buildkit.pair": "2.14.1-py3.12-runtime",
    },
    "rocm72": {
        "dev.buildkit.backend": "rocm",
        "dev.buildkit.backend-version": "7.2",
        "dev.buildkit.gpu-archs": "gfx90a;gfx942;gfx1100;gfx1101",
        "dev.buildkit.pair": "2.14.1-py3.12-runtime",
    },
    "rocm_narrow": {"dev.buildkit.backend": "rocm", "dev.buildkit.backend-version": "7.2", "dev.buildkit.gpu-archs": "gfx942;gfx1100"},
}


def identity(name):
    return ImageIdentity.read(LABELS[name])


def codes(findings):
    return [(f.code, f.blocking) for f in findings]


def test_gfx_names_from_kfd_target_versions():
    assert [gfx_name(v) for v in (90402, 90010, 110000, 100300, 110001, 120001)] == ["gfx942", "gfx90a", "gfx1100", "gfx1030", "gfx1101", "gfx1201"]


def test_mi300x(tmp_path):
    host = facts(hosts.mi300x, tmp_path)
    assert [(g.vendor, g.name, g.arch) for g in host.gpus] == [("amd", "Instinct MI300X", "gfx942")] * 2
    assert host.amdgpu_driver == "6.10.5" and host.kfd.path == "/dev/kfd" and host.kfd.group == "render"
    choice = best_target(host, PLAN, COMPAT, "amd")
    assert choice.target.id == "2.15.0-rocm7.14-mi300-py3.13-runtime"  # the family image that carries gfx942
    assert gpu_access(AMD, host).docker_flags() == [
        "--device",
        "/dev/kfd",
        "--device",
        "/dev/dri",
        "--group-add",
        "video",
        "--group-add",
        str(hosts.RENDER_GID),
        "--security-opt",
        "seccomp=unconfined",
        "--shm-size",
        "8g",
    ]
    assert assess(host, COMPAT, "rocm", identity("rocm72")) == []


def test_rx7900xtx_ignores_the_hdmi_audio_function(tmp_path):
    host = facts(hosts.rx7900xtx, tmp_path)
    assert [(g.pci, g.name, g.arch) for g in host.gpus] == [("0000:03:00.0", "Radeon RX 7900 XTX", "gfx1100")]
    assert best_target(host, PLAN, COMPAT, "amd", python="3.12").target.id == "2.15.0-rocm7.14-rdna3-py3.12-runtime"


def test_h100_with_an_old_driver_is_routed_to_cuda_12_and_the_cuda_13_image_is_blocked(tmp_path):
    host = facts(lambda root: hosts.h100(root, driver="570.86.15"), tmp_path)
    assert [(g.name, g.arch) for g in host.gpus] == [("H100 SXM5 80GB", "sm_90")]
    assert host.nvidia_driver == "570.86.15"
    choice = best_target(host, PLAN, COMPAT, "nvidia", python="3.12")
    assert choice.target.id == "2.14.1-cuda12.6-py3.12-runtime"
    # one entry per reason, with every target it kept out: CUDA 13.2's (2.15.0, 2.14.1), then CUDA 13.0's
    assert [(g.finding.code, [t.id for t in g.targets]) for g in choice.passed_over] == [
        ("driver-too-old", ["2.15.0-cuda13.2-py3.12-runtime", "2.14.1-cuda13.2-py3.12-runtime"]),
        ("driver-too-old", ["2.15.0-cuda13.0-py3.12-runtime", "2.14.1-cuda13.0-py3.12-runtime"]),
    ]
    assert "the NVIDIA driver 570.86.15 is older than 580.65.06, the oldest that runs CUDA 13.2" in choice.passed_over[0].finding.title
    # doctor says it too (not blocking: the CUDA 12.6 image uses the GPU), with the fix that brings the newer images back
    (passed,) = route(host, PLAN, COMPAT, python="3.12").findings
    assert (passed.code, passed.blocking) == ("newer-images-passed-over", False)
    assert passed.title.startswith(
        "2.14.1-cuda12.6-py3.12-runtime is picked because newer NVIDIA images do not fit this host: the NVIDIA driver 570.86.15 is older than 580.65.06"
    )
    assert "(2.15.0-cuda13.2-py3.12-runtime and 1 more)" in passed.title and passed.fix.startswith("upgrade the driver to 580.65.06")
    assert gpu_access(NVIDIA, host).docker_flags() == ["--gpus", "all", "--shm-size", "8g"]
    (finding,) = assess(host, COMPAT, "cuda-image", identity("cuda13"))
    assert finding.code == "driver-too-old" and finding.blocking
    assert "older than 580.65.06, the oldest that runs CUDA 13.0" in finding.title
    assert "or use an image of CUDA 11.8 or 12.6 or 12.8 or 12.9" in finding.fix


def test_h100_with_a_current_driver_gets_the_pair_twin(tmp_path):
    host = facts(hosts.h100, tmp_path)
    assert best_target(host, PLAN, COMPAT, "nvidia", python="3.12").target.id == "2.15.0-cuda13.2-py3.12-runtime"
    assert assess(host, COMPAT, "cuda-image", identity("cuda13")) == []


def test_v100_on_cuda_13_is_an_arch_finding_that_names_the_cuda_versions_that_carry_sm_70(tmp_path):
    host = facts(hosts.v100, tmp_path)
    assert [(g.name, g.arch) for g in host.gpus] == [("Tesla V100 PCIe 16GB", "sm_70")]
    (finding,) = assess(host, COMPAT, "cuda-image", identity("cuda13"))
    assert finding.code == "arch-missing" and finding.blocking
    assert "(Tesla V100 PCIe 16GB, sm_70) is not in the image's arch list" in finding.title
    assert finding.fix.startswith("use an image of CUDA 11.8 or 12.6 or 12.8 or 12.9: their wheels carry sm_70")
    assert best_target(host, PLAN, COMPAT, "nvidia", python="3.12").target.id == "2.14.1-cuda12.6-py3.12-runtime"


def test_an_images_own_torch_release_decides_which_of_its_builds_carry_the_gpu(tmp_path):
    """torch 2.11 dropped Volta from its CUDA 12.8 build (its own arch list): a V100 is sent to its 12.6 build alone."""
    host = facts(hosts.v100, tmp_path)
    labels = {**LABELS["cuda13"], "dev.buildkit.torch": "2.11.0"}
    (finding,) = assess(host, COMPAT, "cuda-image", ImageIdentity.read(labels))
    assert finding.fix.startswith("use an image of torch 2.11.0 for CUDA 12.6: its wheels for them carry sm_70")
    garbled = {**LABELS["cuda13"], "dev.buildkit.torch": "2.x\n"}  # a label is input: no release, the general advice
    (finding,) = assess(host, COMPAT, "cuda-image", ImageIdentity.read(garbled))
    assert finding.fix.startswith("use an image of CUDA 11.8 or 12.6")


def test_mixed_host_is_routed_to_the_vendor_with_more_gpus(tmp_path):
    host = facts(hosts.mixed, tmp_path)
    assert host.vendors() == ("nvidia", "amd") and primary_vendor(host) == "nvidia"
    assert best_target(host, PLAN, COMPAT, "amd").target.backend == "rocm"


def test_amd_host_without_kfd(tmp_path):
    host = facts(hosts.amd_without_kfd, tmp_path)
    assert [g.arch for g in host.gpus] == [""]  # no kfd topology: the gfx target is unknown
    choice = best_target(host, PLAN, COMPAT, "amd")
    (group,) = choice.passed_over  # the same reason for every AMD target: said once
    assert choice.target is None and group.finding.title == "the ROCm kernel driver is not loaded: /dev/kfd is missing"
    assert len(group.targets) == choice.candidates > 1
    findings = assess(host, COMPAT, "rocm", identity("rocm72"))
    assert codes(findings) == [("render-node-missing", True), ("kfd-missing", True)]
    no_fit = route(host, PLAN, COMPAT).findings[-1]
    assert no_fit.title == (
        f"no AMD image of the matrix fits this host: the ROCm kernel driver is not loaded: /dev/kfd is missing (all {choice.candidates} AMD runtime targets)"
    )


def test_another_familys_image_of_the_same_release_is_no_newer_image_passed_over(tmp_path):
    """On an MI300X the mi200 image of the same torch and ROCm version is passed over too, but nothing newer is lost."""
    host = facts(hosts.mi300x, tmp_path)
    choice = best_target(host, PLAN, COMPAT, "amd")
    assert choice.passed_over and choice.newer_passed_over() == ()
    assert route(host, PLAN, COMPAT).findings == ()


def test_no_gpu_is_a_note_and_run_gets_the_target_a_cuda_host_would(tmp_path):
    host = facts(hosts.no_gpu, tmp_path)
    assert host.gpus == () and primary_vendor(host) is None
    routing = route(host, PLAN, COMPAT, python="3.12")
    assert codes(routing.findings) == [("no-gpu", False)] and routing.target is None and not routing.blocking
    assert "this host has no GPU: every image runs on the CPU" in routing.findings[0].title
    assert routing.cpu_target.id == "2.15.0-cuda13.2-py3.12-runtime"
    rocm_only = select(PLAN, rule=parse_selectors(["backend=rocm"]))
    assert route(host, rocm_only, COMPAT, python="3.12").cpu_target.vendor == "amd"


def test_gfx1103_laptop_gets_the_rdna3_family_image_and_without_it_no_image_fits(tmp_path):
    host = facts(hosts.rdna3_laptop, tmp_path)
    assert [(g.name, g.arch) for g in host.gpus] == [("Radeon 780M", "gfx1103")]
    assert route(host, PLAN, COMPAT).target.id == "2.15.0-rocm7.14-rdna3-py3.13-runtime"
    rocm72 = select(PLAN, rule=parse_selectors(["backend_version=7.2"]))  # the fat 7.2 wheels lack gfx1103
    routing = route(host, rocm72, COMPAT)
    assert routing.target is None and codes(routing.findings) == [("no-fitting-image", True)]
    (finding,) = routing.findings
    assert finding.title == (
        "no AMD image of the matrix carries gfx1103, this host's GPU arch (kernels fail with hipErrorNoBinaryForGpu (invalid device function))"
    )
    assert finding.fix.startswith("use a ROCm 7.14 image: their wheels carry gfx1103")
    assert "HSA_OVERRIDE_GFX_VERSION=11.0.0 makes it run gfx1100 code" in finding.fix


def test_an_unknown_gfx_target_is_its_own_finding(tmp_path):
    host = facts(lambda root: hosts.amd_host(root, [("0000:03:00.0", "0x1234", "0x030000", 100307)]), tmp_path)
    assert [g.arch for g in host.gpus] == ["gfx1037"]
    (finding,) = assess(host, COMPAT, "rocm", identity("rocm72"))
    assert finding.code == "unknown-gfx" and finding.blocking
    assert "is gfx1037, a gfx target neither AMD's hierarchy (rocm-bootstrap) nor the compatibility data knows" in finding.title
    assert "a newer rocm-bootstrap may" in finding.fix and "describe it in [compat.gfx]" in finding.fix


def test_cuda_image_on_an_amd_host_reports_the_cpu_fallback_first(tmp_path):
    host = facts(hosts.mi300x, tmp_path, identity=OUTSIDER)
    findings = assess(host, COMPAT, "team/pytorch:cuda", identity("cuda13"))
    assert codes(findings) == [("wrong-vendor", True)]
    assert "is a CUDA image and this host has only AMD GPUs: torch will find no GPU it can use and run on the CPU" in findings[0].title


def test_user_outside_the_render_group_is_told_how_to_fix_it(tmp_path):
    """The container gets the group through --group-add, so it is a note for Docker, blocking for rootless podman."""
    host = facts(hosts.mi300x, tmp_path, identity=OUTSIDER)
    findings = assess(host, COMPAT, "rocm", identity("rocm72"))
    assert findings and not any(f.blocking for f in findings)
    assert findings[0].title == "/dev/kfd is not readable and writable by this user (owned by group render): torch outside containers cannot use it"
    assert "usermod -aG render,video" in findings[0].fix and "--group-add" in findings[0].fix
    rootless = facts(hosts.mi300x, tmp_path / "rootless", identity=OUTSIDER, engine=engine_from_option("podman-rootless"))
    assert all(f.blocking for f in assess(rootless, COMPAT, "rocm", identity("rocm72")))
    assert gpu_access(AMD, rootless).groups == ("keep-groups",)


def test_arch_missing_from_the_image_offers_the_override_as_a_risk(tmp_path):
    host = facts(hosts.rx7800xt, tmp_path)
    (finding,) = assess(host, COMPAT, "rocm", identity("rocm_narrow"))
    # the GPU's target with its sub-family and family in AMD's hierarchy (rocm-bootstrap's)
    assert "gfx1101 [gfx110x RDNA3, gfx11]) is not in the image's arch list (gfx942 gfx1100): kernels fail with hipErrorNoBinaryForGpu" in finding.title
    assert "HSA_OVERRIDE_GFX_VERSION=11.0.0" in finding.fix and "unsupported by AMD" in finding.fix


def test_missing_nvidia_container_runtime(tmp_path):
    host = facts(hosts.h100, tmp_path, engine=EngineFacts("docker", "26.1", runtimes=("runc",)))
    assert codes(assess(host, COMPAT, "cuda", identity("cuda13"))) == [("nvidia-runtime-missing", True)]


# --- CDI ---------------------------------------------------------------------------------------------------


def test_cdi_names_where_a_spec_exists_and_the_engine_takes_them(tmp_path):
    host = facts(lambda root: hosts.nvidia_cdi_spec(hosts.h100(root), gpus=1), tmp_path, engine=CDI_DOCKER)
    (spec,) = host.cdi_specs
    assert (spec.path, spec.kind, len(spec.gpu_devices), spec.missing_nodes) == ("/etc/cdi/nvidia.yaml", "nvidia.com/gpu", 1, ())
    assert gpu_access(NVIDIA, host).docker_flags() == ["--device", "nvidia.com/gpu=all", "--shm-size", "8g"]
    # no NVIDIA runtime is needed: the engine injects the devices from the spec
    assert assess(host, COMPAT, "cuda", identity("cuda13")) == []


def test_amd_cdi_keeps_the_groups_the_images_user_opens_the_nodes_with(tmp_path):
    host = facts(lambda root: hosts.amd_cdi_spec(hosts.mi300x(root), [128, 129]), tmp_path, engine=engine_from_option("podman"))
    assert gpu_access(AMD, host).docker_flags() == [
        "--device",
        "amd.com/gpu=all",
        "--group-add",
        "video",
        "--group-add",
        str(hosts.RENDER_GID),
        "--security-opt",
        "seccomp=unconfined",
        "--shm-size",
        "8g",
    ]
    rootless = facts(lambda root: hosts.amd_cdi_spec(hosts.mi300x(root), [128, 129]), tmp_path / "r", engine=engine_from_option("podman-rootless"))
    assert gpu_access(AMD, rootless).docker_flags()[:4] == ["--device", "amd.com/gpu=all", "--group-add", "keep-groups"]


@pytest.mark.parametrize(
    "engine,cdi",
    [
        (EngineFacts("docker", "24.0.7"), False),
        (EngineFacts("docker", "25.0.3"), False),  # CDI behind the daemon's cdi feature: off unless it says otherwise
        (EngineFacts("docker", "27.5.1", cdi_spec_dirs=("/etc/cdi", "/var/run/cdi")), True),  # feature on: docker info lists the dirs
        (EngineFacts("docker", "28.2.2"), True),
        (EngineFacts("docker", "29.3.0", cdi_spec_dirs=()), False),  # turned off by its owner
        (EngineFacts("docker", "26.1.5+dfsg1", cdi_spec_dirs=()), False),  # this machine's
        (EngineFacts("podman", ""), True),
    ],
)
def test_which_engines_take_cdi_names(engine, cdi):
    assert engine.takes_cdi is cdi


def test_a_spec_on_an_engine_without_cdi_falls_back_to_raw_flags_with_a_note(tmp_path):
    host = facts(lambda root: hosts.nvidia_cdi_spec(hosts.h100(root), gpus=1), tmp_path)
    assert gpu_access(NVIDIA, host).docker_flags()[:2] == ["--gpus", "all"]
    (finding,) = assess(host, COMPAT, "cuda", identity("cuda13"))
    assert finding.code == "cdi-unused" and not finding.blocking
    assert "Docker 26.1.5 does not take CDI device names" in finding.title and "Docker 28.2" in finding.fix


def test_a_stale_spec_names_its_missing_nodes_and_gpus(tmp_path):
    def stale(root):
        hosts.nvidia_cdi_spec(hosts.nvidia_host(root, [("0000:17:00.0", "0x2330"), ("0000:31:00.0", "0x2330")]), gpus=1)
        (root / "etc/cdi/nvidia.yaml").write_text((root / "etc/cdi/nvidia.yaml").read_text().replace("/dev/nvidia0", "/dev/nvidia7"))
        return root

    host = facts(stale, tmp_path, engine=CDI_DOCKER)
    assert host.cdi_specs[0].missing_nodes == ("/dev/nvidia7",)
    findings = assess(host, COMPAT, "cuda", identity("cuda13"))
    assert codes(findings) == [("cdi-stale", True), ("cdi-missing-gpus", False)]
    assert "names device nodes this host does not have (/dev/nvidia7): it is stale" in findings[0].title
    assert "lists 1 of this host's 2 NVIDIA GPUs" in findings[1].title
    assert findings[0].fix == "write it again: `sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`"


@pytest.mark.parametrize(
    "text,reason",
    [
        ("kind: [", "not YAML"),
        ("- a list", "the file is not a mapping"),
        ("kind: nvidia.com/gpu\ndevices: 3\n", "devices is not a list"),
        (
            "kind: nvidia.com/gpu\ndevices:\n- name: '0'\n  containerEdits:\n    deviceNodes:\n    - path: /etc/shadow\n",
            "a device node of devices[0].containerEdits is not a path below /dev",
        ),
        ("kind: nvidia.com/gpu\ndevices:\n- name: '0'\n  containerEdits:\n    deviceNodes:\n    - path: /dev/../etc/shadow\n", "is not a path below /dev"),
        ("cdiVersion: 0.5.0\n", "its kind is missing"),
    ],
)
def test_a_spec_that_cannot_be_read_is_a_note(tmp_path, text, reason):
    def broken(root):
        hosts.h100(root)
        (root / "etc/cdi").mkdir(parents=True)
        (root / "etc/cdi/nvidia.yaml").write_text(text)
        return root

    host = facts(broken, tmp_path, engine=CDI_DOCKER)
    assert host.cdi_specs == ()
    assert any(note.startswith("/etc/cdi/nvidia.yaml: not a CDI spec buildkit can read: ") and reason in note for note in host.notes), host.notes


@pytest.mark.slow
def test_yaml_aliases_cannot_multiply_the_work(tmp_path):
    """One list of 64 nodes, referenced by 5,000 devices: at most MAX_DEVICES x MAX_NODES are looked at."""

    def aliased(root):
        hosts.h100(root)
        (root / "etc/cdi").mkdir(parents=True)
        nodes = "".join(f"  - path: /dev/nvidia{i}\n" for i in range(64))
        devices = "".join(f"- name: d{i}\n  containerEdits: *edits\n" for i in range(5000))
        (root / "etc/cdi/nvidia.yaml").write_text(f"kind: nvidia.com/gpu\nedits: &edits\n  deviceNodes:\n{nodes}devices:\n{devices}")
        return root

    host = facts(aliased, tmp_path, engine=CDI_DOCKER)
    assert len(host.cdi_specs[0].devices) == 1024 and len(host.cdi_specs[0].missing_nodes) == 63


@pytest.mark.parametrize("text", ["docker", "docker:", "docker:latest", "podman:5.2", "containerd", "podman-rootless:1"])
def test_engine_option_grammar(text):
    with pytest.raises(UserError, match="--engine: expected docker:VERSION"):
        engine_from_option(text)


# --- arch coverage ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "gpu,archs,covered",
    [
        ("sm_90", ("8.0", "9.0"), True),
        ("sm_86", ("8.0",), True),  # same major, newer minor runs sm_80 code
        ("sm_120", ("9.0", "10.0"), False),
        ("sm_121", ("10.0", "12.0+PTX"), True),
        ("sm_70", ("7.5", "8.0"), False),
        ("gfx942", ("gfx90a", "gfx942"), True),
        ("gfx1101", ("gfx1100",), False),
    ],
)
def test_arch_coverage(gpu, archs, covered):
    assert arch_covered(gpu, archs) is covered


def test_a_label_arch_buildkit_cannot_read_covers_nothing_and_never_crashes():
    assert arch_covered("sm_90", ("abc", "9.0")) is True
    assert arch_covered("sm_90", ("abc", "1.2.3")) is False
    assert arch_covered("sm_9x", ("9.0",)) is False


def rx6700xt(root):
    return hosts.amd_host(root, [("0000:03:00.0", "0x73df", "0x030000", 100301)])


def test_a_gpu_no_wheel_carries_is_sent_to_the_source_flavor_plan_accepts(tmp_path):
    host = facts(rx6700xt, tmp_path)
    assert [g.arch for g in host.gpus] == ["gfx1031"]
    (finding,) = assess(host, COMPAT, "rocm", identity("rocm72"))
    assert "with `buildkit build --select flavor=source --gpu-arch gfx1031`" in finding.fix
    assert "HSA_OVERRIDE_GFX_VERSION=10.3.0" not in finding.fix  # the image has no gfx1030 code to borrow


@pytest.mark.parametrize("arch", sorted(COMPAT.gfx_targets))
def test_doctor_suggests_only_what_plan_accepts(arch, tmp_path, team_matrix):
    """For every gfx target buildkit knows: doctor's advice for a GPU of it names a ROCm image or a source build
    that `plan` then accepts."""
    from buildkit.app.targets import Choices, SourceOptions, select_targets

    source_matrix = team_matrix('extends = "default"\nflavors = ["runtime", "source"]\n')
    image = ImageIdentity.read({"dev.buildkit.backend": "rocm", "dev.buildkit.backend-version": "7.2", "dev.buildkit.gpu-archs": "gfx000"})
    host = HostFacts(gpus=(Gpu("amd", "0000:03:00.0", "0x0", "test GPU", arch),), kfd=None)
    (finding, *_) = [f for f in assess(host, COMPAT, "rocm", image) if arch in f.title]
    if "--gpu-arch" in finding.fix:
        selection = select_targets(Choices(matrix=source_matrix, selectors=("flavor=source",), source=SourceOptions(gpu_archs=(arch,))))
        assert selection.targets  # not refused as an unknown target
    else:
        versions = COMPAT.gfx_targets[arch].rocm_versions
        assert versions and all(arch in COMPAT.backend("rocm", v).archs for v in versions)


def test_mixed_amd_host_gets_a_per_device_override(tmp_path):
    host = facts(lambda root: hosts.amd_host(root, [("0000:03:00.0", "0x744c", "0x030000", 110000), ("0000:43:00.0", "0x747e", "0x030000", 110001)]), tmp_path)
    (finding,) = assess(host, COMPAT, "rocm", identity("rocm_narrow"))
    assert "HSA_OVERRIDE_GFX_VERSION_1=11.0.0 makes it run gfx1100 code (this host's AMD GPUs differ" in finding.fix


# --- detect, doctor and run agree ---------------------------------------------------------------------------

TREES = {
    "gfx1103-laptop": (hosts.rdna3_laptop, True),  # the RDNA3 family image carries gfx1103; ROCm 7.2's do not
    "no-gpu": (hosts.no_gpu, True),  # nothing blocks: every image runs on the CPU there, as expected
    "h100-driver-570": (lambda root: hosts.h100(root, driver="570.86.15"), True),
    "v100": (hosts.v100, True),
    "mi300x": (hosts.mi300x, True),
    "mixed": (hosts.mixed, True),
    "amd-without-kfd": (hosts.amd_without_kfd, False),
}
ENGINE = ("--engine", "docker:28.2")


@pytest.mark.parametrize("name", TREES)
@pytest.mark.parametrize("selection", [(), ("--select", "backend_version=13.*"), ("--select", "backend=rocm"), ("--select", "backend_version=7.2")])
def test_detect_doctor_and_run_agree(cli, tmp_path, name, selection):
    """On each host tree: detect's findings are doctor's; doctor blocks exactly where detect names no image or
    run refuses; the image detect names passes doctor and run; with CUDA 13 only, the V100 and the old driver fit nothing."""
    builder, fits_default = TREES[name]
    root = builder(tmp_path / "host")
    args = ("--host-root", root, *ENGINE, "--python", "3.12", *selection)
    detected = json.loads(cli("detect", "--json", *args).out)
    doctor = cli("doctor", "--json", *args)
    report = json.loads(doctor.out)
    assert detected["findings"] == report["findings"] and detected["ok"] == report["ok"]
    assert doctor.code == (0 if report["ok"] else 1)
    run = cli("run", "--print", *args)
    assert (run.code == 0) == report["ok"], run.err
    vendor = detected["vendor"]
    chosen = detected["targets"].get(vendor, {}).get("tag") if vendor else None
    no_fit = any(f["code"] == "no-fitting-image" for f in report["findings"])
    assert (chosen is None) == (vendor is None or no_fit)
    if chosen:
        assert run.out.split()[-1] == chosen
        image_report = json.loads(cli("doctor", chosen, "--json", *args).out)
        about_the_host = [f for f in report["findings"] if f["code"] != "newer-images-passed-over"]  # routing's, not the image's
        assert image_report["ok"] and image_report["findings"] == about_the_host
    elif vendor is None:  # no GPU: run starts the image detect names for the CPU
        assert run.out.split()[-1] == detected["cpu_target"]["tag"] and "warning: this host has no GPU" in run.err
    else:
        for finding in (f for f in report["findings"] if f["blocking"]):
            assert f"run refused: {finding['finding']}; fix: {finding['fix']}" in run.err
    if not selection:
        assert report["ok"] is fits_default


def test_h100_old_driver_run_print_of_the_cuda_13_image_refuses_as_doctor_blocks(cli, tmp_path):
    root = hosts.h100(tmp_path / "host", driver="570.86.15")
    image = "ghcr.io/buildkit-images/pytorch:2.14.1-cuda13.0-py3.12-runtime"
    doctor = json.loads(cli("doctor", image, "--json", "--host-root", root).out)
    (finding,) = doctor["findings"]
    assert finding["code"] == "driver-too-old" and not doctor["ok"]
    run = cli("run", image, "--print", "--host-root", root)
    assert run.code == 2 and f"run refused: {finding['finding']}; fix: {finding['fix']}" in run.err


def test_run_print_uses_cdi_names_on_a_host_with_a_cdi_spec(cli, tmp_path):
    root = hosts.amd_cdi_spec(hosts.mi300x(tmp_path / "host"), [128, 129])
    result = cli("run", "--print", "--host-root", root, "--engine", "docker:28.2", "--python", "3.12")
    assert result.code == 0, result.err
    assert result.out.startswith("docker run --rm --device amd.com/gpu=all --group-add video --group-add ")
    assert result.out.strip().endswith("ghcr.io/buildkit-images/pytorch:2.15.0-rocm7.14-mi300-py3.12-runtime")
    nvidia = hosts.nvidia_cdi_spec(hosts.h100(tmp_path / "nvidia"), gpus=1)
    result = cli("run", "--print", "--host-root", nvidia, "--engine", "podman", "--python", "3.12")
    assert result.out.startswith("podman run --rm --device nvidia.com/gpu=all --shm-size 8g ghcr.io/"), result.err
    # the same host, its engine not named: raw flags, and doctor says why
    unnamed = cli("run", "--print", "--host-root", root, "--python", "3.12")
    assert "--device /dev/kfd --device /dev/dri" in unnamed.out
    assert "warning: a CDI spec for amd.com/gpu exists (/etc/cdi/amd.json), but the engine was not asked" in unnamed.err


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


def test_run_on_a_host_without_gpus_warns_and_runs_on_the_cpu(cli, tmp_path):
    root = hosts.no_gpu(tmp_path / "host")
    result = cli("run", "ghcr.io/buildkit-images/pytorch:2.14.1-cuda13.0-py3.12-runtime", "--print", "--host-root", root)
    assert result.code == 0
    assert "warning: this host has no GPU: ghcr.io/buildkit-images/pytorch:2.14.1-cuda13.0-py3.12-runtime runs on the CPU" in result.err
    assert result.out == "docker run --rm --shm-size 8g ghcr.io/buildkit-images/pytorch:2.14.1-cuda13.0-py3.12-runtime\n"


def test_a_host_of_a_family_the_stack_does_not_build_is_told_which_family_to_add(tmp_path):
    """Thin ROCm 7.14 images are one family's each: the fix names the family image that would carry the GPU."""
    host = facts(hosts.rx7900xtx, tmp_path)
    mi300_only = select(PLAN, rule=parse_selectors(["backend_version=7.14", "id=*-mi300-*"]))
    routing = route(host, mi300_only, COMPAT)
    assert routing.target is None and codes(routing.findings) == [("no-fitting-image", True)]
    # the product family, or the sub-family of AMD's hierarchy as a family of its own
    assert routing.findings[0].fix == (
        'use the rdna3 or gfx110x image of ROCm 7.14, which carries gfx1100: add "rdna3" to the stack\'s rocm_families to build it'
    )


def test_an_mi450_host_is_told_the_truth_and_a_stack_with_its_family_routes_it(tmp_path, team_matrix):
    """gfx1250 (Instinct MI450, CDNA5) has device packages for ROCm 7.14 but no release wheel carries torch's
    kernels for it: the default matrix has no image for it and says to build from source, not to add a family
    image that would carry nothing; a team whose data adds gfx1250 to 7.14's archs gets the mi450 image."""
    mi450 = lambda root: hosts.amd_host(root, [("0000:03:00.0", "0x75b0", "0x120000", 120500)])  # noqa: E731 (kfd: 12.5.0)
    host = facts(mi450, tmp_path / "default")
    assert [g.arch for g in host.gpus] == ["gfx1250"]
    routing = route(host, PLAN, COMPAT)
    assert routing.target is None and "no ROCm wheel carries gfx1250: build torch for it from source" in routing.findings[0].fix
    archs = ", ".join(f'"{a}"' for a in (*COMPAT.backend("rocm", "7.14").archs, "gfx1250"))
    team = load_matrix(
        team_matrix(f"""
        extends = "default"
        rocm_families = ["mi300", "mi450"]
        [compat.rocm."7.14"]
        archs = [{archs}]
        [[torch]]
        version = "2.15.0"
        python = ["3.12"]
        flavors = ["runtime"]
        cuda = ["13.2"]
        rocm = ["7.14"]
    """)
    )
    team_plan = expand(team)
    host = read_host(team.compat, hosts.amd_host(tmp_path / "team", [("0000:03:00.0", "0x75b0", "0x120000", 120500)]), MEMBER, DOCKER)
    assert route(host, team_plan, team.compat).target.id == "2.15.0-rocm7.14-mi450-py3.12-runtime"


# --- what the text output says (the JSON knows no more than this) -------------------------------------------


@pytest.fixture
def wide(monkeypatch):
    """Consoles 400 columns wide, so a table cell is one line and a phrase can be found and counted."""
    monkeypatch.setattr(cli_program, "Console", lambda *args, **kwargs: Console(*args, **{**kwargs, "width": 400}))


def test_detect_and_doctor_text_say_why_newer_images_were_passed_over(cli, tmp_path, wide):
    """An H100 on driver 570: detect picks CUDA 12.6, and both texts say why CUDA 13 was passed over and how to get it."""
    root = hosts.h100(tmp_path / "host", driver="570.86.15")
    args = ("--host-root", root, "--engine", "docker:28.2", "--python", "3.12")
    detect, doctor = cli("detect", *args), cli("doctor", *args)
    assert detect.code == doctor.code == 0
    for text in (detect.out, doctor.out):
        assert "2.14.1-cuda12.6-py3.12-runtime is picked because newer NVIDIA images do not fit this host" in text
        assert "the NVIDIA driver 570.86.15 is older than 580.65.06, the oldest that runs CUDA 13.2" in text
        assert "upgrade the driver to 580.65.06 or newer" in text
    assert "ok: nothing blocks GPU acceleration here" in doctor.out


def test_a_reason_shared_by_every_target_is_printed_once(cli, tmp_path, wide):
    root = hosts.amd_without_kfd(tmp_path / "host")
    for command in ("detect", "doctor", "run"):
        result = cli(command, *(("--print",) if command == "run" else ()), "--host-root", root, "--engine", "docker:28.2")
        said = result.out + result.err
        assert said.count("/dev/kfd is missing") == 1, command
        assert re.search(r"/dev/kfd is missing \(all \d+ AMD runtime targets\)", said), command


def test_podman_engines_get_podman_run(cli, tmp_path):
    """podman takes --group-add keep-groups (rootless) and CDI names; the docker CLI does not take the first."""
    root = hosts.mi300x(tmp_path / "host")
    rootless = cli("run", "--print", "--host-root", root, "--engine", "podman-rootless", "--python", "3.12")
    assert rootless.code == 0, rootless.err
    assert rootless.out.startswith("podman run --rm --device /dev/kfd --device /dev/dri --group-add keep-groups ")
    detect = cli("detect", "--host-root", root, "--engine", "podman-rootless", "--python", "3.12")
    assert "\n  podman run --device /dev/kfd" in detect.out
    docker = cli("run", "--print", "--host-root", root, "--engine", "docker:28.2", "--python", "3.12")
    assert docker.out.startswith("docker run --rm --device /dev/kfd") and "keep-groups" not in docker.out


def test_podman_without_an_nvidia_cdi_spec_is_refused_with_the_command_that_writes_one(cli, tmp_path):
    root = hosts.h100(tmp_path / "host")
    refused = cli("run", "--print", "--host-root", root, "--engine", "podman")
    assert refused.code == 2 and "--gpus" not in refused.out
    assert (
        "run refused: podman hands NVIDIA GPUs to containers through CDI only, and this host has no CDI spec for "
        "nvidia.com/gpu; fix: write one: `sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`"
    ) in refused.err
    with_spec = hosts.nvidia_cdi_spec(hosts.h100(tmp_path / "cdi"), gpus=1)
    assert cli("run", "--print", "--host-root", with_spec, "--engine", "podman").out.startswith("podman run --rm --device nvidia.com/gpu=all")


def test_a_host_without_gpus_exits_0_for_detect_doctor_and_run(cli, tmp_path):
    """The README's rule: no GPU is no failure (CI runners run images on the CPU); each command says so."""
    root = hosts.no_gpu(tmp_path / "host")
    detect = cli("detect", "--host-root", root, "--python", "3.12")
    doctor = cli("doctor", "--host-root", root, "--python", "3.12")
    run = cli("run", "--print", "--host-root", root, "--python", "3.12", "--", "pytest")
    assert (detect.code, doctor.code, run.code) == (0, 0, 0)
    cpu = "ghcr.io/buildkit-images/pytorch:2.15.0-cuda13.2-py3.12-runtime"
    assert f"buildkit run starts {cpu} here, on the CPU" in detect.out
    assert "ok: no GPU here, so images run on the CPU (nothing blocks that)" in doctor.out
    assert run.out == f"docker run --rm --shm-size 8g {cpu} pytest\n"
    assert f"warning: this host has no GPU: {cpu} runs on the CPU" in run.err
