"""The buildx command line a build request becomes: the registry cache's layers are compressed as the image's
are, so BuildKit hands the cache the blobs it compressed for the image (the cache exporter's own default is
gzip: every layer of a 6 GB image compressed a second time, the slower way)."""

from __future__ import annotations

from pathlib import Path

import pytest

from buildkit.adapters.engine.buildx import BuildRequest, build_arguments
from buildkit.core.release.build_cache import CacheRefs

CACHE = CacheRefs(("registry.example.com/team/pytorch/buildcache:pair-shared",), "registry.example.com/team/pytorch/buildcache:t")
METADATA = Path("/tmp/metadata.json")


def options(arguments: list[str], flag: str) -> dict[str, str]:
    (value,) = [arguments[i + 1] for i, argument in enumerate(arguments) if argument == flag]
    return dict(part.split("=", 1) for part in value.split(","))


def compression_of(exporter: dict[str, str]) -> dict[str, str]:
    return {key: value for key, value in exporter.items() if key.startswith(("compression", "force-", "oci-"))}


def request(compression: str, **changes) -> BuildRequest:
    return BuildRequest(Path("/ctx/Dockerfile"), Path("/ctx"), {}, {}, cache=CACHE, compression=compression, **changes)


@pytest.mark.parametrize("compression", ["zstd", "gzip"])
@pytest.mark.parametrize("where", [{"into_engine": True}, {"push_to": "registry.example.com/team/pytorch"}])
def test_the_cache_is_exported_with_the_image_s_compression(compression, where):
    arguments = build_arguments(request(compression, **where), METADATA)
    image, cache = options(arguments, "--output"), options(arguments, "--cache-to")
    assert cache["compression"] == compression
    assert compression_of(cache) == compression_of(image)
    assert cache["ref"] == CACHE.target and cache["mode"] == "max" and cache["ignore-error"] == "true"


def test_the_shared_stage_s_cache_is_compressed_as_its_twins_images_are():
    """The prefix build exports no image, only its cache, whose layers the twins' images then hold."""
    arguments = build_arguments(request("zstd", stage="shared"), METADATA)
    assert "--output" not in arguments
    assert options(arguments, "--cache-to")["compression"] == "zstd"


def test_the_classic_store_leaves_the_cache_to_the_exporter_s_default():
    """There the image is loaded as a tarball the engine unpacks: no compressed blobs of the image's to share."""
    arguments = build_arguments(request(""), METADATA)
    assert "compression" not in options(arguments, "--cache-to")
    assert "--load" in arguments
