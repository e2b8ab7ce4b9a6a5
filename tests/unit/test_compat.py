"""The shipped compatibility data is self-consistent and every fact names a known source."""

from __future__ import annotations

from buildkit.adapters.bundled import compat_data
from buildkit.core.compat import compat_from_data
from buildkit.core.grammar import image_reference
from buildkit.core.vendors import BACKENDS

DATA = compat_data()
COMPAT = compat_from_data(DATA)


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


def test_cuda_12_9_wheels_for_torch_2_8_to_2_11_only():
    assert [m for m, r in COMPAT.torch.items() if "12.9" in r.backends["cuda"]] == ["2.8", "2.9", "2.10", "2.11"]
    assert "test-infra-cu129" in DATA["torch"]["2.10"]["sources"]


def test_release_cuda_13_wheels_carry_no_ptx():
    for version in ("13.0", "13.2", "13.4"):
        assert COMPAT.backend("cuda", version).archs == ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0")
        assert COMPAT.backend("cuda", version).arm64_archs == ("8.0", "9.0", "10.0", "11.0", "12.0")


def test_the_header_documents_the_unconfirmed_key_it_uses():
    from buildkit.adapters.bundled import PACKAGE_DIR

    text = (PACKAGE_DIR / "data" / "compat.toml").read_text()
    assert "confirmed = false" not in text and "`unconfirmed` list" in text
    assert not any("confirmed" in entry for table in ("torch", "cuda", "rocm") for entry in DATA[table].values())


def test_releases_belong_to_their_minor_and_the_default_matrix_pins_the_newest():
    from buildkit.adapters.matrix_files import load_matrix

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

LLVM_FAMILIES = {"Vega", "CDNA1", "CDNA2", "CDNA3", "CDNA4", "RDNA1", "RDNA2", "RDNA3", "RDNA3.5", "RDNA4", "GFX12.5"}


def test_every_wheel_arch_is_a_known_gfx_target_that_lists_that_rocm_version():
    for (backend, version), facts in COMPAT.backends.items():
        if backend == "rocm":
            for arch in facts.archs:
                assert arch in COMPAT.gfx_targets and version in COMPAT.gfx_targets[arch].rocm_versions, (version, arch)
    for name, target in COMPAT.gfx_targets.items():
        assert all(name in COMPAT.backend("rocm", v).archs for v in target.rocm_versions), name


def test_gfx_targets_have_llvm_families_sources_and_cover_the_override_advice():
    assert COMPAT.known_archs["rocm"] == tuple(COMPAT.gfx_targets)
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
