"""`buildkit matrix show`: a matrix as its `extends` chain resolves it, with the file each value came from.

A fork states only what it changes; what it builds is the merge of every file up the chain. Showing that
merge answers "which registry, which Python versions, which packages does my fork really have?" without
reading the chain by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from buildkit.adapters.files.bundled import compat_data
from buildkit.adapters.files.matrix import read_sources
from buildkit.core.matrix.resolve import merge_layers, resolve_matrix

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path


@dataclass(frozen=True)
class ResolvedMatrix:
    files: tuple[str, ...]  # the chain, base first
    data: Mapping[str, Any]  # the merged tables, `extends` resolved away
    origins: Mapping[str, str]  # top-level key -> the file that set it
    stack_origins: Mapping[int, tuple[str, ...]]  # [[torch]] entry -> the files that set its keys


def resolve(path: Path | None) -> ResolvedMatrix:
    """The merged matrix; it is validated first, so what is shown is a matrix buildkit accepts. Its files are
    read once, for both."""
    sources = read_sources(path)
    resolve_matrix(sources, compat_data())
    layers = sources.layers
    merged = merge_layers(layers)
    data = {key: value for key, value in merged.data.items() if key != "extends"}
    stack_origins: dict[int, list[str]] = {}
    for (index, _key), file in merged.stack_origin.items():
        files = stack_origins.setdefault(index, [])
        if file not in files:
            files.append(file)
    return ResolvedMatrix(
        tuple(layer.path for layer in layers),
        data,
        {key: file for key, file in merged.key_origin.items() if key != "extends"},
        {index: tuple(files) for index, files in stack_origins.items()},
    )
