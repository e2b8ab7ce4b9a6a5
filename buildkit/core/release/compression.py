"""How an image's layers are compressed, as BuildKit's exporters take it.

The image exporter's options, which the registry cache's exporter takes too."""

from __future__ import annotations

# zstd's level 3 compresses torch's layers at several times gzip's speed to about gzip's size; higher levels
# cost far more time for a few percent (bench/zstd_levels.py, docs/benchmarks.md). force-compression
# recompresses the base image's gzip layers too, so an image's layers are all pulled alike; oci-mediatypes
# because Docker's v2 manifests have no zstd layer type (podman refuses zstd there).
ZSTD_LEVEL = 3
_OPTIONS = {
    "zstd": f"compression=zstd,compression-level={ZSTD_LEVEL},force-compression=true,oci-mediatypes=true",
    "gzip": "compression=gzip,oci-mediatypes=true",
}


def exporter_options(compression: str) -> list[str]:
    """BuildKit's exporter options for `compression` (zstd, gzip); none for "" (the engine's default)."""
    return [_OPTIONS[compression]] if compression else []
