"""Registry build cache: which cache refs a build reads and writes.

A pair's twins share everything below the torch install, so that prefix gets a cache ref of its own,
written by the prefix build and read by both twins; each twin also has its own ref. A runner with an
empty BuildKit cache (every nightly runner, every twin on a different GPU runner) then reuses yesterday's
layers and its twin's prefix instead of building cold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from buildkit.core.release.compression import exporter_options

if TYPE_CHECKING:
    from buildkit.core.targets.plan import Target

# The cache lives beside the images, in REPOSITORY/buildcache, so the image repository's tags stay images.
CACHE_REPOSITORY = "buildcache"


@dataclass(frozen=True)
class CacheRefs:
    """Read from every ref in `sources`, write to `target` (mode=max, every stage's layers)."""

    sources: tuple[str, ...] = ()
    target: str = ""


def shared_ref(target: Target) -> str:
    return f"{target.image_name}/{CACHE_REPOSITORY}:{target.pair}-shared"


def own_ref(target: Target) -> str:
    return f"{target.image_name}/{CACHE_REPOSITORY}:{target.id}"


def prefix_cache(target: Target) -> CacheRefs:
    """The twins' shared prefix (built once per pair, before the twins)."""
    return CacheRefs((shared_ref(target),), shared_ref(target))


def target_cache(target: Target) -> CacheRefs:
    own = own_ref(target)
    return CacheRefs((shared_ref(target), own) if target.pair else (own,), own)


def cache_export(ref: str, compression: str) -> str:
    """`--cache-to` for `ref`: every stage's layers (mode=max), a registry that refuses the cache does not fail
    the build, and the layers compressed as the image's are, so BuildKit hands the cache the blobs it made for
    the image instead of compressing each layer again (the cache exporter's default is gzip)."""
    return ",".join([f"type=registry,ref={ref},mode=max,ignore-error=true", *exporter_options(compression)])
