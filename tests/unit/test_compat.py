"""The shipped compatibility data is self-consistent and every fact names a known source."""

from __future__ import annotations

from buildkit.core.compat import BACKENDS, compat_from_data
from buildkit.core.grammar import image_reference
from buildkit.adapters.bundled import compat_data

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
