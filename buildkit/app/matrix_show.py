"""`buildkit matrix show`: a matrix as its `extends` chain resolves it, with the file each value came from.

A fork states only what it changes; what it builds is the merge of every file up the chain. Showing that
merge answers "which registry, which Python versions, which packages does my fork really have?" without
reading the chain by hand.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from buildkit.adapters.bundled import default_matrix_path
from buildkit.adapters.matrix_files import load_matrix, read_layers
from buildkit.core.matrix import merge_layers


@dataclass(frozen=True)
class ResolvedMatrix:
    files: tuple[str, ...]  # the chain, base first
    data: Mapping[str, Any]  # the merged tables, `extends` resolved away
    origins: Mapping[str, str]  # top-level key -> the file that set it
    stack_origins: Mapping[int, tuple[str, ...]]  # [[torch]] entry -> the files that set its keys


def resolve(path: Path | None) -> ResolvedMatrix:
    """The merged matrix; it is validated first, so what is shown is a matrix buildkit accepts."""
    load_matrix(path)
    layers, _ = read_layers(path if path is not None else default_matrix_path())
    merged = merge_layers(layers)
    data = {key: value for key, value in merged.data.items() if key != "extends"}
    stack_origins: dict[int, list[str]] = {}
    for (index, _key), file in merged.stack_origin.items():
        files = stack_origins.setdefault(index, [])
        if file not in files:
            files.append(file)
    return ResolvedMatrix(
        tuple(layer.path for layer in layers), data,
        {key: file for key, file in merged.key_origin.items() if key != "extends"},
        {index: tuple(files) for index, files in stack_origins.items()},
    )
