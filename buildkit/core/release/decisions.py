"""Publish decisions, as pure functions: what to skip or build, which tags move, what retention deletes.

The app reads the registry, builds and pushes; these functions decide. The guarantees live here, where
they are table-tested for every combination of outcomes:
- an image whose published fingerprint matches is skipped; nothing is pushed twice;
- floating tags move only for images that are good (pushed now, or published unchanged) and, when the
  GPU gate is on, carry a passing GPU test for their vendor;
- a pair's shared floating tags move only when both twins qualify: never half a pair;
- retention deletes only date tags this tool created for this target, beyond the newest N.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from buildkit.core.targets.plan import Target

NIGHTLY_DATE_RE = re.compile(r"^(?P<base>.+)-nightly-(?P<date>[0-9]{8})$")


class Outcome(str, Enum):
    """What happened to one target in a publish run (its value is what reports print)."""

    UNCHANGED = "skipped-unchanged"  # the registry holds an image with this fingerprint
    WOULD_BUILD = "would-build"  # dry run: it would be built and pushed
    PUBLISHED = "published"  # built, smoke-tested and pushed in this run
    FAILED = "failed"  # built but failed, or failed to build or push
    MISSING = "not-published"  # --require-published: the registry has no image with this fingerprint

    @property
    def good(self) -> bool:
        return self in (Outcome.UNCHANGED, Outcome.PUBLISHED)


@dataclass(frozen=True)
class Published:
    """What the registry holds under a target's immutable tag."""

    digest: str
    fingerprint: str
    gpu_tested: bool = False  # carries a passing GPU test for its vendor (a verified attestation)


def initial_outcome(fingerprint: str, published: Published | None, build: bool) -> Outcome:
    """Before anything is built: unchanged when the registry holds this fingerprint; otherwise build it, or,
    where building is not allowed (the tag-moving job), report it missing."""
    if published is not None and published.fingerprint == fingerprint:
        return Outcome.UNCHANGED
    return Outcome.WOULD_BUILD if build else Outcome.MISSING


@dataclass(frozen=True)
class TagMove:
    target: str  # target id
    tag: str  # the tag name to point at that target's pushed manifest
    annotate_date: str = ""  # set for nightly date tags: an annotated copy of the manifest


@dataclass
class ReleasePlan:
    moves: list[TagMove] = field(default_factory=list)
    pairs: dict[str, str] = field(default_factory=dict)  # pair -> what happened to its floating tags
    held: dict[str, str] = field(default_factory=dict)  # target -> why its own floating tags stay


def pair_aliases(target: Target) -> tuple[str, ...]:
    """The floating tags a twin shares with its pair: `2.14.1-cuda-py3.12-runtime` (twins only)."""
    return target.tag_names[1:] if target.pair else ()


def date_tag(target: Target, date: str) -> str:
    return f"{target.tag_names[0]}-nightly-{date}"


def tag_moves(
    targets: Sequence[Target],
    outcomes: Mapping[str, Outcome],
    gpu_tested: Mapping[str, bool] | None,
    nightly: bool = False,
    date: str = "",
) -> ReleasePlan:
    """Which tags move after this run. `gpu_tested` maps target id -> carries a passing GPU test; None turns
    the GPU gate off (the image's smoke test in this run is then the only gate)."""
    plan = ReleasePlan()
    good = {t.id for t in targets if outcomes.get(t.id, Outcome.FAILED).good}

    def qualifies(target: Target) -> str:
        """'' when the target's floating tags may move, else why not."""
        if target.id not in good:
            return f"{target.id} is {outcomes.get(target.id, Outcome.FAILED).value}"
        if gpu_tested is not None and not gpu_tested.get(target.id, False):
            return f"{target.id} has no passing GPU test for its vendor"
        return ""

    twins: dict[str, list[Target]] = {}
    for target in targets:
        if target.pair:
            twins.setdefault(target.pair, []).append(target)
    for target in targets:
        if target.id not in good:
            continue
        if nightly:
            plan.moves.append(TagMove(target.id, date_tag(target, date), annotate_date=date))
        own = qualifies(target)
        if own:
            plan.held[target.id] = own
        elif nightly:
            plan.moves.append(TagMove(target.id, f"{target.tag_names[0]}-nightly"))
    for pair, members in sorted(twins.items()):
        reasons = [why for why in map(qualifies, members) if why]
        if len({target.backend for target in members}) < 2:  # the CUDA twin, and its ROCm twin or family images
            reasons.append("the other twin is not in this selection")
        if reasons:
            plan.pairs[pair] = "floating tags not moved: " + "; ".join(reasons)
            continue
        plan.pairs[pair] = "floating tags moved"
        for target in members:
            for alias in pair_aliases(target):
                plan.moves.append(TagMove(target.id, alias))
                if nightly:
                    plan.moves.append(TagMove(target.id, f"{alias}-nightly"))
    return plan


def expired_date_tags(target: Target, tags: Iterable[str], keep: int) -> list[str]:
    """This target's nightly date tags beyond the newest `keep`, oldest first. The caller deletes one only
    after checking that its image carries this target's label (so a foreign tag of the same shape stays)."""
    base = target.tag_names[0]
    dated = sorted((m.group("date"), tag) for tag in tags if (m := NIGHTLY_DATE_RE.match(tag)) and m.group("base") == base)
    return [tag for _, tag in (dated[:-keep] if keep else dated)]
