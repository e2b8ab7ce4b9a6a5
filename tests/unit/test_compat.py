"""The shipped compatibility data is self-consistent and every fact names a known source."""

from __future__ import annotations

from pathlib import Path

import rocm_bootstrap

from buildkit.adapters.files.bundled import compat_data
from buildkit.core.compat.facts import RocmLayout, compat_from_data
from buildkit.core.grammar import image_reference
from buildkit.core.vendors import AMD, BACKENDS, NVIDIA, VENDORS, of_backend
from testkit.amd_targets import with_new_amd_target

DATA = compat_data()
COMPAT = compat_from_data(DATA)
PACKAGE_DATA = Path(__file__).resolve().parents[2] / "buildkit" / "data" / "compat.toml"


def test_every_entry_cites_known_sources():
    sources = set(DATA["sources"])
    entries = [*DATA["torch"].values(), *DATA["cuda"].values(), *DATA["rocm"].values()]
    assert all(entry["sources"] and set(entry["sources"]) <= sources for entry in entries)


def test_every_backend_version_a_release_offers_is_described():
    for release in COMPAT.torch.values():
        for backend in BACKENDS:
            for version in release.backends[backend]:
                assert COMPAT.backend(backend, version) is not None, (release.minor, backend, version)


def test_arch_lists_use_known_names_and_devel_bases_parse():
    for (backend, version), facts in COMPAT.backends.items():
        assert facts.archs, (backend, version)
        assert all(arch.removesuffix("+PTX") in COMPAT.known_archs[backend] for arch in facts.archs)
        assert image_reference(facts.devel_base) is None
        assert facts.devel_os in COMPAT.os_python


def test_index_folders_and_arch_names_read_back_as_the_data_writes_them():
    """Vendor.index_version undoes index_tag and label_arch undoes compiled_arch_names, for every version and
    arch the data knows; another vendor's folder, or a name that is no version, is no one's."""
    for backend, version in COMPAT.backends:
        tags = {vendor.name: vendor.index_version(of_backend(backend).index_tag(version)) for vendor in VENDORS}
        assert tags == {vendor.name: version if vendor.backend == backend else None for vendor in VENDORS}
    for backend in BACKENDS:
        vendor = of_backend(backend)
        assert [vendor.label_arch(vendor.compiled_arch_names((arch,))[0]) for arch in COMPAT.known_archs[backend]] == list(COMPAT.known_archs[backend])
    assert NVIDIA.label_arch("sm_120") == "12.0" and AMD.label_arch("gfx942") == "gfx942"
    assert [NVIDIA.index_version(tag) for tag in ("cu", "cu1", "cu13.0", "cuda130")] == [None] * 4
    assert [AMD.index_version(tag) for tag in ("rocm", "rocm7", "rocm7.", "rocm7.2.1.0.1", "rocm7.2-beta")] == [None] * 5


def test_documented_facts():
    assert COMPAT.torch["2.14"].backends["rocm"] == ("7.2", "7.14")
    assert "11.8" not in COMPAT.torch["2.14"].backends["cuda"]
    assert "3.9" not in COMPAT.torch["2.13"].python
    assert COMPAT.backend("cuda", "13.0").index_tag == "cu130"
    assert COMPAT.backend("rocm", "7.2").index_tag == "rocm7.2"
    assert "gfx900" not in COMPAT.backend("rocm", "7.14").archs  # 7.14 drops gfx900/gfx906
    assert "5.0" not in COMPAT.backend("cuda", "13.0").archs  # CUDA 13 dropped sm_50-70
    assert COMPAT.torch["2.14"].companion_version("torchvision", "2.14.1") == "0.29.1"


# --- facts fixed by issue 14, each with its source in the data ---------------------------------------------


def test_cuda_12_9_wheels_for_torch_2_8_to_2_11_and_again_for_2_13():
    assert [m for m, r in COMPAT.torch.items() if "12.9" in r.backends["cuda"]] == ["2.8", "2.9", "2.10", "2.11", "2.13"]
    assert "test-infra-cu129" in DATA["torch"]["2.10"]["sources"]
    # 2.13's came back (its own table lists them) and stay unconfirmed until PyTorch's index is read
    assert "cuda 12.9" in COMPAT.torch["2.13"].unconfirmed and "wheel-arch-table" in DATA["torch"]["2.13"]["sources"]


# --- facts fixed by issue 41: each build's archs as its own release's wheels state them ----------------------


def test_each_release_has_the_arch_lists_its_wheels_state():
    turing_on = ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0")
    # 2.11 dropped Volta from cu128 (its get_arch_list), whatever CUDA 12.8 builds of other releases carry
    assert COMPAT.wheel_archs("2.11", "cuda", "12.8").archs == turing_on and COMPAT.wheel_archs("2.10", "cuda", "12.8").archs[0] == "7.0"
    # 2.13.0's own table: cu129 is x86 7.5-12.0 and aarch64 8.0 9.0 10.0 12.0 (no 11.0, unlike 13.x)
    cu129 = COMPAT.wheel_archs("2.13", "cuda", "12.9")
    assert (cu129.archs, cu129.arm64_archs, cu129.release) == (turing_on, ("8.0", "9.0", "10.0", "12.0"), "2.13.0")
    assert cu129.sources == ("wheel-arch-table",)
    # aarch64 builds carry sm_110 and neither 7.5 nor 8.6; the PyPI builds' flags say so for both platforms
    for minor, cuda in (("2.13", "13.0"), ("2.14", "13.0"), ("2.15", "13.2")):
        built = COMPAT.wheel_archs(minor, "cuda", cuda)
        assert built.arm64_archs == ("8.0", "9.0", "10.0", "11.0", "12.0") and "wheel-arch-flags" in built.sources
    assert COMPAT.wheel_archs("2.13", "cuda", "13.0").archs == turing_on  # no 12.0+PTX in 2.13.0's PyPI wheel
    # a build no release's artifacts describe falls back to its backend version's lists, and says so
    assert COMPAT.wheel_archs("2.9", "cuda", "12.6").sources == ('[cuda."12.6"]',)


def test_fixes_of_issue_41_carry_their_sources():
    assert COMPAT.backend("cuda", "13.0").driver_toolkit == "580.126.20" and "cuda-runfiles" in DATA["cuda"]["13.0"]["sources"]
    assert "cuda_13.0.3_580.126.20_linux.run" in DATA["sources"]["cuda-runfiles"]
    assert COMPAT.backend("cuda", "13.4").devel_base == "nvidia/cuda:13.4.3-cudnn-devel-ubuntu24.04"
    assert "10.7" in COMPAT.known_archs["cuda"] and "cuda-sm107" in DATA["archs"]["sources"]
    assert COMPAT.gfx_targets["gfx1153"].amdgpu_family == "GC_11_5_0"
    pins = COMPAT.torch["2.15"].published["2.15.0"].pins["cuda 13.2"]
    assert 'triton~=3.9.0; platform_system == "Linux" and python_version < "3.16"' in pins
    assert any(p.startswith("cuda-bindings") and p.endswith('python_version < "3.15"') for p in pins)
    for release in ("2.13.0", "2.14.1"):
        minor = release.rpartition(".")[0]
        assert any(p.startswith("triton") and p.endswith('python_version < "3.15"') for p in COMPAT.torch[minor].published[release].pins["cuda 13.0"])
    assert COMPAT.torch["2.14"].not_built == {"cuda 13.4": "pytorch-cuda126-end"}
    assert COMPAT.torch["2.15"].not_built == {"cuda 12.6": "pytorch-cuda126-end"}


def test_release_cuda_13_wheels_carry_no_ptx():
    for version in ("13.0", "13.2", "13.4"):
        assert COMPAT.backend("cuda", version).archs == ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0")
        assert COMPAT.backend("cuda", version).arm64_archs == ("8.0", "9.0", "10.0", "11.0", "12.0")


def test_the_header_documents_the_unconfirmed_key_it_uses():
    from buildkit.adapters.files.bundled import PACKAGE_DIR

    text = (PACKAGE_DIR / "data" / "compat.toml").read_text()
    assert "confirmed = false" not in text and "`unconfirmed` list" in text
    assert not any("confirmed" in entry for table in ("torch", "cuda", "rocm") for entry in DATA[table].values())


def test_releases_belong_to_their_minor_and_the_default_matrix_pins_the_newest():
    from buildkit.adapters.files.matrix import load_matrix

    for minor, release in COMPAT.torch.items():
        assert release.releases and all(r.startswith(minor + ".") for r in release.releases), minor
    pinned = [stack.torch for stack in load_matrix(None).stacks]
    assert pinned and all(COMPAT.torch_release(v).newest_release == v for v in pinned), pinned
    assert "2.12.1" in pinned


def test_platforms_arm64_for_cuda_only_and_amd64_only_names_an_arm64_version_the_release_offers():
    for (backend, version), facts in COMPAT.backends.items():
        assert facts.platforms[0] == "linux/amd64" and set(facts.platforms) <= {"linux/amd64", "linux/arm64"}
        assert backend == "cuda" or facts.platforms == ("linux/amd64",)
        assert bool(facts.arm64_archs) == ("linux/arm64" in facts.platforms), (backend, version)
        assert all(arch in COMPAT.known_archs["cuda"] for arch in facts.arm64_archs)
    for minor, release in COMPAT.torch.items():
        for item in release.amd64_only:
            backend, version = item.split()
            assert version in release.backends[backend] and "linux/arm64" in COMPAT.backend(backend, version).platforms, (minor, item)
    assert COMPAT.platforms("2.8", "cuda", "12.9") == ("linux/amd64", "linux/arm64")
    assert COMPAT.platforms("2.8", "cuda", "12.8") == ("linux/amd64",)
    assert COMPAT.platforms("2.14", "rocm", "7.14") == ("linux/amd64",)


# --- the gfx target table -------------------------------------------------------------------------------

LLVM_FAMILIES = {"Vega", "CDNA1", "CDNA2", "CDNA3", "CDNA4", "RDNA1", "RDNA2", "RDNA3", "RDNA3.5", "RDNA4", "CDNA5"}  # CDNA5: gfx1250 (therock-cdna5)


def test_every_wheel_arch_is_a_known_gfx_target_that_lists_that_rocm_version():
    offered = {v for release in COMPAT.torch.values() for v in release.backends["rocm"]}
    for (backend, version), facts in COMPAT.backends.items():
        if backend == "rocm" and version in offered:  # ROCm 10 is described before a torch release lists it
            for arch in facts.archs:
                assert arch in COMPAT.gfx_targets and version in COMPAT.gfx_targets[arch].rocm_versions, (version, arch)
    for name, target in COMPAT.gfx_targets.items():
        assert all(name in COMPAT.backend("rocm", v).archs for v in target.rocm_versions), name


def test_gfx_targets_have_llvm_families_sources_and_cover_the_override_advice():
    # the targets are rocm-bootstrap's, each with what it lacks (products, architecture, releases) in the data
    assert COMPAT.known_archs["rocm"] == tuple(COMPAT.gfx_targets) == tuple(target.name for target in rocm_bootstrap.ALL_TARGETS)
    for name, target in COMPAT.gfx_targets.items():
        assert target.family in LLVM_FAMILIES, name
        assert set(DATA["gfx"][name]["sources"]) <= set(DATA["sources"]), name
        assert all(COMPAT.backend("rocm", v) for v in target.sdk_rocm_versions), name
    for arch, (_override, runs_as) in COMPAT.hsa_override.items():
        assert arch in COMPAT.gfx_targets and runs_as in COMPAT.gfx_targets, arch
        assert COMPAT.gfx_targets[arch].family == COMPAT.gfx_targets[runs_as].family, arch  # same ISA family only
    assert COMPAT.gfx_targets["gfx942"].family == "CDNA3"
    assert COMPAT.gfx_targets["gfx1103"].rocm_versions == ("7.14",)
    assert COMPAT.gfx_targets["gfx900"].rocm_versions == ("6.2.4", "6.3", "6.4", "7.0", "7.1", "7.2")


# --- facts read from the artifacts (issue 28), each with its source ------------------------------------------


def test_torch_2_15_pairs_with_the_torchvision_and_torchaudio_published_with_it():
    release = COMPAT.torch["2.15"]
    assert release.companion_version("torchvision", "2.15.0") == "0.29.2"
    assert release.companion_version("torchaudio", "2.15.0") == "2.11.1"
    assert release.published["2.15.0"].pypi == "cuda 13.2" and release.published["2.15.0"].requires_python == ">=3.11"
    assert "cuda-toolkit[cublas,cudart,cufft,cufile,cupti,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.2.2" in release.published["2.15.0"].pins["cuda 13.2"]
    assert "torchvision" not in release.unconfirmed and not release.torchvision  # the guessed 0.30 series is gone
    # torchaudio was not published with 2.12-2.14: a stack asking for it there is refused, not guessed
    assert COMPAT.torch["2.14"].companion_version("torchaudio", "2.14.1") is None
    for entry in DATA["torch"].values():
        for version, published in entry.get("published", {}).items():
            assert version in entry["releases"] and published["sources"] == ["pypi"] and published["wheel"].startswith(f"torch-{version}-")


def test_the_2_15_images_install_torchvision_0_29_2():
    from buildkit.app.targets import Choices, select_targets

    rendered = select_targets(Choices(selectors=("torch=2.15.0",))).render()
    assert rendered and all(item.target.companions == (f"torchvision==0.29.2+{item.target.local_tag}",) for item in rendered)
    cuda = next(item for item in rendered if item.target.local_tag == "cu132")
    assert "torchvision==0.29.2+cu132" in cuda.dockerfile


def test_rocm_10_cuda_13_4_3_and_13_5_are_described_with_sources_the_rest_unconfirmed():
    for version, base in (("10.0", "10.0.0-full"), ("10.1", "10.1.0-full")):
        rocm = COMPAT.backend("rocm", version)
        assert rocm.thin_wheels and rocm.layout == "amd-whl-next" and rocm.devel_base.endswith(base)
        assert {"archs", "devel_base"} <= set(rocm.unconfirmed) and "gfx900" not in rocm.archs
        assert {"therock-releases", "pytorch-rocm10"} <= set(DATA["rocm"][version]["sources"])
        assert not any(version in r.backends["rocm"] for r in COMPAT.torch.values())  # no release wheels read yet
    assert COMPAT.rocm_layouts["amd-whl-next"].local == "rocm{version}.0"
    assert COMPAT.backend("rocm", "7.14").devel_base.endswith(":7.14.1-full")
    assert COMPAT.backend("rocm", "7.2").devel_base.endswith(":7.2.4-complete")
    cuda134, cuda135, cuda132 = (COMPAT.backend("cuda", v) for v in ("13.4", "13.5", "13.2"))
    assert cuda134.devel_base == "nvidia/cuda:13.4.3-cudnn-devel-ubuntu24.04" and cuda134.driver_toolkit == ""  # 13.4 ships no driver
    assert "cuda-13-4-ga" in DATA["cuda"]["13.4"]["sources"] and "600.00.00" not in PACKAGE_DATA.read_text()  # the placeholder is gone
    assert cuda135.archs == cuda134.archs and "archs" in cuda135.unconfirmed and "pypi-cuda" in DATA["cuda"]["13.5"]["sources"]
    assert cuda132.driver_toolkit == "595.71.05" and cuda132.devel_base.startswith("nvidia/cuda:13.2.2-")
    assert "12.6" not in COMPAT.torch["2.15"].backends["cuda"]


def test_mi450_is_a_cdna5_family_with_its_products():
    family = COMPAT.families["mi450"]
    # its bundle is gfx1250's package owner, which holds gfx1250's A0 stepping (gfx1250-strict) too
    assert family.bundles == ("gfx1250",) and family.gfx == ("gfx1250", "gfx1250-strict")
    assert family.therock == "gfx125X-dcgpu" and "MI455X" in family.products
    target = COMPAT.gfx_targets["gfx1250"]
    assert target.family == "CDNA5" and not target.unconfirmed and target.rocm_versions == ()  # no release wheel has its kernels
    assert COMPAT.gfx_targets["gfx1153"].products == ("Radeon 820M",)


# --- AMD's hierarchy: rocm-bootstrap's (issue 46) ------------------------------------------------------------


def test_the_product_families_are_groups_over_amd_bundles():
    assert COMPAT.families["mi300"].bundles == ("gfx9_4",) and COMPAT.families["mi300"].gfx == ("gfx942",)
    assert COMPAT.families["rdna3"].gfx == ("gfx1100", "gfx1101", "gfx1102", "gfx1103")  # gfx110x's members
    # TheRock builds these apart; AMD packages them in one sub-family: both are groups over target bundles
    assert COMPAT.families["strix-point"].gfx == ("gfx1150", "gfx1152", "gfx1153") and COMPAT.families["strix-halo"].gfx == ("gfx1151",)
    for name, family in COMPAT.families.items():
        assert family.bundles and all(key in COMPAT.amd.bundles for key in family.bundles), name
        assert set(DATA["families"][name]["sources"]) <= set(DATA["sources"]), name
        assert "gfx" not in DATA["families"][name]  # the targets come from rocm-bootstrap, not a hand-kept list


def test_rocm_families_takes_product_families_and_amd_bundles():
    assert COMPAT.image_group("mi300") == ("gfx942",)
    assert COMPAT.image_group("gfx115x") == ("gfx1150", "gfx1151", "gfx1152", "gfx1153")
    assert COMPAT.image_group("gfx12") == ("gfx1200", "gfx1201", "gfx1250", "gfx1250-strict", "gfx1251")
    assert COMPAT.image_group("gfx9_9") is None and COMPAT.image_group("mi999") is None
    known = COMPAT.known_groups()
    assert known[: len(COMPAT.families)] == tuple(COMPAT.families)
    assert {"gfx9_4", "gfx110x", "gfx115x", "gfx12_0", "gfx9", "gfx11"} <= set(known) and "gfx942" not in known


def test_layouts_name_their_device_packages_by_amd_bundle_at_their_level():
    amd = COMPAT.amd
    pytorch, whl_next = COMPAT.rocm_layouts["pytorch"], COMPAT.rocm_layouts["amd-whl-next"]
    assert pytorch.level == whl_next.level == "target"
    assert [(c.layer, c.packages) for c in pytorch.device_code(amd, ("gfx942",), ("torchvision",))] == [
        ("device-gfx942", ("rocm-sdk-device-gfx942",))
    ]  # PyTorch's index publishes no companion device code
    code = whl_next.device_code(amd, ("gfx1150", "gfx1151"), ("torchvision",))
    assert [(c.owner, c.bundle, c.packages) for c in code] == [
        ("torch", "gfx1150", ("amd-torch-device-gfx1150", "rocm-sdk-device-gfx1150")),
        ("torch", "gfx115x", ("amd-torch-device-gfx115x",)),  # the sub-family's package, once for both targets
        ("torch", "gfx1151", ("amd-torch-device-gfx1151", "rocm-sdk-device-gfx1151")),
        ("torchvision", "gfx1150", ("amd-torchvision-device-gfx1150",)),
        ("torchvision", "gfx1151", ("amd-torchvision-device-gfx1151",)),
    ]
    assert [c.layer for c in code][-1] == "device-torchvision-gfx1151"
    assert whl_next.arch_extras(amd, ("gfx1150", "gfx1151")) == ("device-gfx1150", "device-gfx1151")
    # a layout cut at the sub-family level: one package per bundle, named as AMD names them (gfx12_0 -> gfx12-0)
    cut = RocmLayout(
        "cut",
        ("amd-torch-device-{sub_family}", "rocm-sdk-device-{sub_family}"),
        "torch",
        "device-all",
        "device-{sub_family}",
        companion_device={"torchvision": ("amd-torchvision-device-{sub_family}",)},
    )
    assert cut.level == "sub_family"
    assert [(c.layer, c.packages) for c in cut.device_code(amd, ("gfx1200", "gfx1201"), ("torchvision",))] == [
        ("device-gfx12_0", ("amd-torch-device-gfx12-0", "rocm-sdk-device-gfx12-0")),
        ("device-torchvision-gfx12_0", ("amd-torchvision-device-gfx12-0",)),
    ]
    assert cut.arch_extras(amd, ("gfx1200", "gfx1201")) == ("device-gfx12-0",)


def test_amd_hierarchy_is_read_from_rocm_bootstrap_when_the_data_is_loaded(monkeypatch):
    """A newer rocm-bootstrap (here: its table changed under the test) is what the next load knows."""
    amd = COMPAT.amd
    assert amd.describe("gfx942") == "gfx942 [gfx9_4 MI300, gfx9]" and amd.covering(["gfx1150", "gfx1151"]).key == "gfx115x"
    assert amd.covering(["gfx942", "gfx1100"]) is None and amd.variant_values(["gfx1250-strict", "gfx942"]) == ("gfx1250", "gfx942")
    added = with_new_amd_target(monkeypatch)
    fresh = compat_from_data(DATA)
    assert added.name in fresh.known_archs["rocm"] and fresh.amd.chain(added.name)[1].key == "gfx12_5"
    assert added.name not in COMPAT.known_archs["rocm"]  # what was loaded before keeps what it read
