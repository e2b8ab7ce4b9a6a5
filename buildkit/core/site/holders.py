"""Which other images hold a layer, said the way a reader thinks of them: as the group they make ("the 17 other
CUDA 13.0 images", "the 27 other Python 3.12 runtime images") when the images holding it are exactly such a
group of the site, else named (the twin first) up to a few, the rest counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import combinations
from typing import TYPE_CHECKING

from buildkit.core.site.chooser import backend_label

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from buildkit.core.targets.plan import Target

DIMENSIONS = ("torch", "backend", "python", "flavor")  # in the order a group's name says them


@dataclass(frozen=True)
class Holders:
    group: str  # "the 17 other CUDA 13.0 images"; "" when they are named
    named: tuple[str, ...]  # target ids, the twin first
    more: int  # how many more hold it

    @property
    def none(self) -> bool:
        return not (self.group or self.named)


GroupKey = tuple[tuple[str, ...], ...]  # a group's values, one per dimension (_value's)


def _value(target: Target, dimension: str) -> tuple[str, ...]:
    if dimension == "backend":
        return target.vendor, target.backend_version, target.family
    return (getattr(target, dimension),)


def _name(target: Target, dimensions: Sequence[str], others: int) -> str:
    words = {"torch": f"torch {target.torch}", "backend": backend_label(target), "python": f"Python {target.python}", "flavor": target.flavor}
    return " ".join(["the", str(others), "other", *(words[d] for d in dimensions), "image" if others == 1 else "images"])


class Sharing:
    """The holders of every layer, each layer's described once."""

    def __init__(self, targets: Sequence[Target], holders: Mapping[str, Sequence[str]], shown: int) -> None:
        self.targets = targets
        self.by_id = {target.id: target for target in targets}
        self.holders = holders  # layer digest -> the ids of the targets whose layers hold it
        self.shown = shown
        self.described: dict[str, str] = {}

    @cached_property
    def groups(self) -> list[tuple[tuple[str, ...], dict[GroupKey, frozenset[str]]]]:
        """Every group of the site, fewest dimensions first: its dimensions, and per their values the targets' ids."""
        return [(dims, self._grouped(self.targets, dims)) for size in range(len(DIMENSIONS) + 1) for dims in combinations(DIMENSIONS, size)]

    @staticmethod
    def _grouped(targets: Sequence[Target], dimensions: Sequence[str]) -> dict[GroupKey, frozenset[str]]:
        found: dict[GroupKey, set[str]] = {}
        for target in targets:
            found.setdefault(tuple(_value(target, d) for d in dimensions), set()).add(target.id)
        return {key: frozenset(ids) for key, ids in found.items()}

    def _group(self, digest: str, target: Target) -> str:
        """The fewest dimensions whose group of images is exactly those holding the layer, named; "" for none."""
        if digest not in self.described:
            held = frozenset(self.holders.get(digest, ()))
            self.described[digest] = next(
                (_name(target, dims, len(held) - 1) for dims, groups in self.groups if groups.get(tuple(_value(target, d) for d in dims)) == held), ""
            )
        return self.described[digest]

    def of(self, digest: str, target: Target, twins: Sequence[str]) -> Holders:
        """The other images holding the layer: their group when it is one and more than `shown` of them."""
        others = [held for held in dict.fromkeys(self.holders.get(digest, ())) if held != target.id and held in self.by_id]
        if len(others) > self.shown:
            group = self._group(digest, target)
            if group:
                return Holders(group, (), 0)
        others.sort(key=lambda held: held not in twins)
        return Holders("", tuple(others[: self.shown]), max(0, len(others) - self.shown))
