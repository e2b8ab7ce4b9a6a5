"""Which layers images share, and what a node holding one image pays to add another.

Planned (no engine): each layer of an image gets a key, a digest of what determines its files, so that two
images with a layer of the same key hold the same blob (torch's layers are reproducible: buildkit/image/
install.py). The keys follow the image's layers from the bottom. An image assembled on its base
(core/bases.py) starts with torch's layers that are the same under every Python (`below_base`), then the OS
layer (the base image's files with the venv, its installer, the OS packages and the user: the tools and shared
stages, copied in as one), then torch's other layers (`above_base`) and the image's own steps. Any other image
starts with the base image's layers and the OS layers, then every layer of torch's install. A layer of torch's
install is determined by what its share of the resolution depends on (the index, the channel and its day,
torch and its companions, the installer, the platforms), its own packages, and the Python unless its files are
the same under every Python.

Built (the engine's layers, by digest, with their sizes): what a node holding one image fetches to add
another (the layers it lacks) and what it unpacks (the engine's store keeps a layer per chain: every layer
above the first one the two images do not share is unpacked again, though none of their blobs is fetched).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from buildkit.core.install_plan import DEVICE_PREFIX, TORCH, LayerCopy, TorchInstall, layer_name
from buildkit.core.render.planned import PlannedImage, assembled_on_base

BASE = "base"
OS = "os"
OWN = "image"
KEY_LENGTH = 16  # hex digits: enough to tell a matrix's layers apart, short enough to read


@dataclass(frozen=True)
class PlannedLayer:
    name: str  # base, os, a layer of torch's install (nvidia-cudnn-cu13, torch, device-gfx942), image
    key: str
    python_neutral: bool = False


def _key(parts: tuple[object, ...]) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()[:KEY_LENGTH]


class LayerKeys:
    """The layers of planned images from the bottom, each keyed by what determines its files. Images of one
    stack share their install plan (the renderer makes one per stack and backend version), so each layer of
    it is keyed once per install and Python, and each base and OS part once: a plan of 100,000 targets pays
    for its distinct layers, not for every layer of every target."""

    def __init__(self) -> None:
        self._keys: dict[tuple[Hashable, ...], str] = {}
        self._installs: dict[tuple[Hashable, ...], tuple[TorchInstall, tuple[tuple[PlannedLayer, ...], tuple[PlannedLayer, ...]]]] = {}

    def _key(self, parts: tuple[Hashable, ...]) -> str:
        found = self._keys.get(parts)
        if found is None:
            found = self._keys[parts] = _key(parts)
        return found

    def of(self, item: PlannedImage) -> tuple[PlannedLayer, ...]:
        target = item.target
        base = (target.base_reference, target.platforms)
        os_layer = PlannedLayer(
            OS, self._key((OS, item.template, *base, target.python, target.installer, target.uv, target.os_packages, target.compile, target.user))
        )
        below, above = self._install_layers(item)
        own = PlannedLayer(OWN, item.fingerprint[:KEY_LENGTH])
        if assembled_on_base(item):
            return (*below, os_layer, *above, own)
        return (PlannedLayer(BASE, self._key((BASE, *base))), os_layer, *below, *above, own)

    def _install_layers(self, item: PlannedImage) -> tuple[tuple[PlannedLayer, ...], tuple[PlannedLayer, ...]]:
        """The layers of torch's install the same under every Python, and the others, each in the image's order."""
        install, target = item.install, item.target
        if install is None:
            return (), ()
        # the install plan itself is in the key (kept alive with its layers), not its text: the renderer gives
        # the images of one stack and backend version one plan
        memo = (id(install), target.python, target.channel_date, target.uv, target.platforms, target.torch_requirement, target.companions)
        found = self._installs.get(memo)
        if found is not None and found[0] is install:
            return found[1]
        # what every layer's share of the resolution depends on; a family image's own device extras only
        # choose its device packages, which their layers name
        resolution = (
            install.index_url,
            target.channel,
            target.channel_date,
            target.torch_requirement,
            target.companions,
            install.installer,
            target.uv,
            target.platforms,
            tuple(layer.packages for layer in install.layers if not layer.name.startswith(DEVICE_PREFIX)),
        )
        installed = {layer.name: layer for layer in install.layers}

        def keyed(copies: tuple[LayerCopy, ...]) -> tuple[PlannedLayer, ...]:
            layers = []
            for copy in copies:
                layer = installed[copy.stage]
                own = (install.narrowing and (install.narrowing.requirement, install.narrowing.drop), repr(install.trim)) if layer.name == TORCH else ()
                neutral = layer.python_neutral or copy.folder != copy.stage  # a layer's files no Python changes
                python = () if neutral else (target.python,)
                layers.append(PlannedLayer(copy.folder, _key((copy.folder, layer.packages, resolution, own, python)), neutral))
            return tuple(layers)

        keyed_layers = (keyed(install.below_base), keyed(install.above_base))
        self._installs[memo] = (install, keyed_layers)
        return keyed_layers


def planned_layers(item: PlannedImage) -> tuple[PlannedLayer, ...]:
    """One image's layers from the bottom, each keyed by what determines its files."""
    return LayerKeys().of(item)


def holders(images: Iterable[tuple[PlannedLayer, ...]]) -> Counter[str]:
    """How many of the images hold each layer key."""
    return Counter(layer.key for layers in images for layer in layers)


@dataclass(frozen=True)
class BuiltLayer:
    digest: str  # the engine's digest of its files (RootFS diff id)
    size: int  # bytes, uncompressed
    name: str  # what it holds (torch, nvidia-cudnn-cu13, a build step)


def pushed_layers(manifest: Mapping[str, Any], config: Mapping[str, Any]) -> tuple[BuiltLayer, ...]:
    """An image's layers as a registry stores them (compressed blobs: what a node fetches) from the bottom, each
    named by the build step that made it (its config's history); () where the two do not line up."""
    layers = manifest.get("layers")
    history = [step for step in config.get("history") or [] if isinstance(step, Mapping) and not step.get("empty_layer")]
    if (
        not isinstance(layers, list)
        or len(layers) != len(history)
        or not all(isinstance(layer, Mapping) and isinstance(layer.get("digest"), str) and type(layer.get("size")) is int for layer in layers)
    ):
        return ()
    return tuple(BuiltLayer(layer["digest"], layer["size"], layer_name(str(step.get("created_by", "")))) for layer, step in zip(layers, history))


@dataclass(frozen=True)
class NodeCost:
    """What a node holding `held` pays to add an image: the layers it fetches (those it lacks) and the bytes it
    unpacks (every layer above the first one the two images do not share), uncompressed."""

    held: str
    shared: tuple[str, ...]  # the names of the layers the two images share
    shared_bytes: int
    fetched_bytes: int
    unpacked_bytes: int


def node_costs(images: Mapping[str, Sequence[BuiltLayer]]) -> dict[str, list[NodeCost]]:
    """Per image (its layers from the bottom), what adding it costs a node that holds one other image sharing a
    layer with it, for each such image, cheapest first."""
    costs: dict[str, list[NodeCost]] = {}
    for name, layers in images.items():
        found = []
        for other, held_layers in images.items():
            held = {layer.digest for layer in held_layers}
            shared = [layer for layer in layers if layer.digest in held]
            if other == name or not shared:
                continue
            chain = 0
            while chain < min(len(layers), len(held_layers)) and layers[chain].digest == held_layers[chain].digest:
                chain += 1
            found.append(
                NodeCost(
                    other,
                    tuple(layer.name for layer in shared),
                    sum(layer.size for layer in shared),
                    sum(layer.size for layer in layers if layer.digest not in held),
                    sum(layer.size for layer in layers[chain:]),
                )
            )
        costs[name] = sorted(found, key=lambda cost: (cost.fetched_bytes, cost.unpacked_bytes, cost.held))
    return costs
