"""buildkit's AMD detection against AMD's own (rocm-bootstrap's detect_gfx_targets) on the same sysfs trees, the
GPUs named with their place in AMD's hierarchy, and the variables that change what AMD's tools see.

buildkit keeps its own reader (adapters/host.py: it maps each kfd node to its PCI device, and a hostile tree
cannot hang or flood it); rocm-bootstrap's reads the same kfd topology. Both read every host tree of the suite
(testkit/hosts.py) and the faked sysfs content rocm-bootstrap's own tests use, and must find the same targets.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
from rocm_bootstrap import _platform, detect_gfx_targets
from rocm_bootstrap.targets import ALL_TARGETS, lookup_target
from rocm_bootstrap.tests import conftest as amd_fakes  # rocm-bootstrap's own faked sysfs content (shipped in its wheel)

from buildkit.adapters.files.matrix import load_matrix
from buildkit.adapters.host import read_host
from buildkit.core.host.amd_environment import environment_findings, override_target
from testkit import hosts

COMPAT = load_matrix(None).compat
# every host tree of the suite: the builders that take a root alone
HOST_TREES = [
    builder
    for name, builder in vars(hosts).items()
    if inspect.isfunction(builder)
    and not name.startswith("_")
    and [p.name for p in inspect.signature(builder).parameters.values() if p.default is inspect.Parameter.empty] == ["root"]
]


def amd_detects(monkeypatch, root: Path) -> list[str]:
    """rocm-bootstrap's detect_gfx_targets() on a tree: its sysfs reads pointed below the root (its own tests patch the
    same module), no environment and no clinfo (its Windows fallback)."""
    monkeypatch.setattr(_platform, "KFD_TOPOLOGY", root / "sys/class/kfd/kfd/topology/nodes")
    monkeypatch.setattr(_platform, "get_env", lambda key: None)
    monkeypatch.setattr(_platform, "run_clinfo", lambda: "")
    return [target.name for target in detect_gfx_targets()]


def buildkit_detects(root: Path) -> list[str]:
    return list(dict.fromkeys(gpu.arch for gpu in read_host(COMPAT, root).gpus_of("amd") if gpu.arch))


def test_every_host_tree_of_the_suite_is_found():
    assert {b.__name__ for b in HOST_TREES} >= {"mi300x", "rx7900xtx", "rx7800xt", "h100", "mixed", "amd_without_kfd", "no_gpu", "rdna3_laptop", "v100"}


@pytest.mark.parametrize("builder", HOST_TREES, ids=lambda b: b.__name__)
def test_buildkit_finds_the_targets_amd_s_detection_finds_on_every_host_tree(builder, tmp_path, monkeypatch):
    root = builder(tmp_path / "host")
    assert buildkit_detects(root) == amd_detects(monkeypatch, root)


def _amd_fake_tree(root: Path, nodes: list[tuple[str, str]]) -> Path:
    """A host whose kfd topology is rocm-bootstrap's fake: its CPU node, then one GPU node per (properties, PCI
    address), each node's location_id naming its address (its template has one address for every GPU) and a PCI
    function there, as the kernel has for each GPU."""
    hosts.no_gpu(root)
    topology = root / "sys/class/kfd/kfd/topology/nodes"
    (topology / "0").mkdir(parents=True)
    (topology / "0" / "properties").write_text(amd_fakes._KFD_CPU_PROPERTIES)
    for index, (properties, address) in enumerate(nodes, start=1):
        bus, device = int(address[5:7], 16), int(address[8:10], 16)
        text = properties.replace("location_id 33792", f"location_id {(bus << 8) | (device << 3)}")
        (topology / str(index)).mkdir()
        (topology / str(index) / "properties").write_text(text)
        pci = root / "sys/bus/pci/devices" / address
        pci.mkdir(parents=True)
        for name, value in (("vendor", "0x1002"), ("device", "0x7550"), ("class", "0x030000")):
            (pci / name).write_text(value + "\n")
    return root


@pytest.mark.parametrize("target", ALL_TARGETS, ids=lambda t: t.name)
def test_buildkit_finds_each_target_of_amd_s_own_faked_sysfs(target, tmp_path, monkeypatch):
    """rocm-bootstrap's TestKfdDetectionPerTarget: every target it knows, as its fake writes the node (gfx1250-strict
    reads as gfx1250 there: kfd reports the same number)."""
    root = _amd_fake_tree(tmp_path, [(amd_fakes.kfd_gpu_properties(target, device_id=29000 + target.stepping), "0000:84:00.0")])
    found = amd_detects(monkeypatch, root)
    assert buildkit_detects(root) == found == ["gfx1250" if target.name == "gfx1250-strict" else target.name]


def test_buildkit_finds_the_targets_of_amd_s_multi_gpu_fakes(tmp_path, monkeypatch):
    """rocm-bootstrap's TestMultiGpu: two different GPUs, and two alike."""
    gfx1201, gfx1100, gfx942 = map(lookup_target, ("gfx1201", "gfx1100", "gfx942"))
    mixed = _amd_fake_tree(
        tmp_path / "mixed", [(amd_fakes.kfd_gpu_properties(gfx1201, 30032), "0000:03:00.0"), (amd_fakes.kfd_gpu_properties(gfx1100, 29768), "0000:43:00.0")]
    )
    assert buildkit_detects(mixed) == amd_detects(monkeypatch, mixed) == ["gfx1201", "gfx1100"]
    alike = _amd_fake_tree(tmp_path / "alike", [(amd_fakes.kfd_gpu_properties(gfx942), f"0000:{bus}:00.0") for bus in ("0c", "22")])
    assert buildkit_detects(alike) == amd_detects(monkeypatch, alike) == ["gfx942"]


# --- the GPU's place in AMD's hierarchy, in detect's answer ---------------------------------------------------


def test_detect_names_each_amd_gpu_s_sub_family_and_family(cli, tmp_path):
    root = hosts.mixed(tmp_path / "host")
    result = cli("detect", "--host-root", root, "--engine", "docker:28.2", "--json")
    gpus = json.loads(result.out)["gpus"]
    assert [(g["vendor"], g["arch"], g.get("sub_family"), g.get("family")) for g in gpus] == [
        ("nvidia", "sm_90", None, None),
        ("nvidia", "sm_90", None, None),
        ("amd", "gfx942", "gfx9_4", "gfx9"),
    ]
    text = cli("detect", "--host-root", root, "--engine", "docker:28.2").out
    assert "gfx942 [gfx9_4 MI300, gfx9]" in text


# --- ROCM_BOOTSTRAP_FORCE_GFX_ARCH, ROCM_BOOTSTRAP_DISABLE_DETECTION, HSA_OVERRIDE_GFX_VERSION -------------


def findings_on(builder, tmp_path, **variables):
    root = hosts.with_environment(builder(tmp_path / "host"), **variables)
    host = read_host(COMPAT, root)
    assert dict(host.environment) == variables
    return [(f.code, f.blocking, f.title) for f in environment_findings(host, COMPAT)]


def test_a_forced_arch_is_said_with_what_a_variant_aware_install_then_picks(tmp_path):
    ((code, blocking, title),) = findings_on(hosts.rx7900xtx, tmp_path, ROCM_BOOTSTRAP_FORCE_GFX_ARCH="gfx942")
    assert code == "amd-forced-arch" and not blocking
    assert title == (
        "ROCM_BOOTSTRAP_FORCE_GFX_ARCH=gfx942: rocm-bootstrap reports gfx942 [gfx9_4 MI300, gfx9] instead of this host's "
        "gfx1100 [gfx110x RDNA3, gfx11], so a variant-aware install here picks their device wheels, which carry no code for gfx1100"
    )
    ((code, _, title),) = findings_on(hosts.rx7900xtx, tmp_path / "same", ROCM_BOOTSTRAP_FORCE_GFX_ARCH="gfx1100")
    assert code == "amd-forced-arch" and "names this host's own targets" in title


def test_a_forced_arch_rocm_bootstrap_does_not_know_breaks_its_detection(tmp_path, monkeypatch):
    ((code, _, title),) = findings_on(hosts.mi300x, tmp_path, ROCM_BOOTSTRAP_FORCE_GFX_ARCH="gfx942,gfx9999")
    assert code == "amd-forced-arch-unknown" and "names gfx9999, which rocm-bootstrap does not know" in title
    monkeypatch.setattr(_platform, "get_env", {"ROCM_BOOTSTRAP_FORCE_GFX_ARCH": "gfx942,gfx9999"}.get)
    with pytest.raises(ValueError, match="Unknown GFX target"):  # what the finding says rocm-bootstrap does
        detect_gfx_targets()


def test_disabled_detection_wins_over_a_forced_arch(tmp_path, monkeypatch):
    variables = {"ROCM_BOOTSTRAP_DISABLE_DETECTION": "1", "ROCM_BOOTSTRAP_FORCE_GFX_ARCH": "gfx942"}
    ((code, _, title),) = findings_on(hosts.mi300x, tmp_path, **variables)
    assert code == "amd-detection-disabled" and "(and ROCM_BOOTSTRAP_FORCE_GFX_ARCH is ignored)" in title
    monkeypatch.setattr(_platform, "get_env", variables.get)
    assert detect_gfx_targets() == []  # as rocm-bootstrap does


@pytest.mark.parametrize(
    "value, target", [("11.0.0", "gfx1100"), ("9.0.10", "gfx90a"), ("10.3.0", "gfx1030"), ("12.0.1", "gfx1201"), ("11", None), ("gfx1100", None)]
)
def test_hsa_override_names_a_gfx_target(value, target):
    assert override_target(value) == target


def test_a_hard_coded_rdna2_override_on_an_rdna3_card_is_reported_for_what_it_does(tmp_path):
    ((code, blocking, title),) = findings_on(hosts.rx7900xtx, tmp_path, HSA_OVERRIDE_GFX_VERSION="10.3.0")
    assert code == "hsa-override" and not blocking
    assert title.startswith(
        "HSA_OVERRIDE_GFX_VERSION=10.3.0 makes the ROCm runtime run this host's gfx1100 [gfx110x RDNA3, gfx11] as "
        "gfx1030 [gfx10_3 RDNA2, gfx10], another ISA's code"
    )


def test_the_documented_borrow_is_said_as_a_risk_and_containers_do_not_get_it(tmp_path, cli):
    root = hosts.with_environment(hosts.rx7800xt(tmp_path / "host"), HSA_OVERRIDE_GFX_VERSION="11.0.0")
    document = json.loads(cli("doctor", "--host-root", root, "--engine", "docker:28.2", "--json").out)
    (finding,) = [f for f in document["findings"] if f["code"] == "hsa-override"]
    assert "the close neighbour's code it can borrow, at your own risk" in finding["finding"]
    assert "`buildkit run` does not pass it into containers" in finding["fix"]
    assert document["environment"] == {"HSA_OVERRIDE_GFX_VERSION": "11.0.0"}


def test_nothing_is_said_without_the_variables_or_without_amd_gpus(tmp_path):
    assert findings_on(hosts.mi300x, tmp_path / "a") == []
    assert findings_on(hosts.h100, tmp_path / "b", HSA_OVERRIDE_GFX_VERSION="11.0.0") == []
