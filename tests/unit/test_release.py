"""Publish decisions (buildkit.core.release.decisions), table-tested: every combination of twin outcomes and GPU tests
decides which tags move, and a pair's floating tags never move for half a pair."""

from __future__ import annotations

import itertools

import pytest

from buildkit.adapters.files.matrix import load_matrix
from buildkit.core.release.decisions import Outcome, Published, expired_date_tags, initial_outcome, tag_moves
from buildkit.core.targets.plan import expand

TARGETS = {t.id: t for t in expand(load_matrix(None)).targets if (t.torch, t.python, t.flavor) == ("2.13.0", "3.11", "runtime")}
CUDA, ROCM, LONE = TARGETS["2.13.0-cuda13.0-py3.11-runtime"], TARGETS["2.13.0-rocm7.2-py3.11-runtime"], TARGETS["2.13.0-cuda12.6-py3.11-runtime"]
PAIR = "2.13.0-py3.11-runtime"
ALIASES = {(CUDA.id, "2.13.0-cuda-py3.11-runtime"), (ROCM.id, "2.13.0-rocm-py3.11-runtime")}
# a pair whose ROCm side is one image per family (ROCm 7.14): the CUDA twin pairs with each of them
FAMILY_PAIR = {t.id: t for t in expand(load_matrix(None)).targets if t.pair == "2.14.1-py3.11-runtime"}
# the GPU gate: off (None), or which twins carry a passing GPU test for their vendor
GATES = [None, {CUDA.id: True, ROCM.id: True}, {CUDA.id: True, ROCM.id: False}, {CUDA.id: False, ROCM.id: True}, {}]


def moved(plan) -> set[tuple[str, str]]:
    return {(move.target, move.tag) for move in plan.moves}


@pytest.mark.parametrize(
    "cuda, rocm, gate", list(itertools.product(Outcome, Outcome, GATES)), ids=lambda value: value.value if isinstance(value, Outcome) else str(value)
)
def test_a_pair_floating_tags_move_only_when_both_twins_qualify(cuda, rocm, gate):
    plan = tag_moves([CUDA, ROCM], {CUDA.id: cuda, ROCM.id: rocm}, gate)
    both_good = cuda.good and rocm.good
    both_tested = gate is None or (gate.get(CUDA.id, False) and gate.get(ROCM.id, False))
    if both_good and both_tested:
        assert moved(plan) == ALIASES and plan.pairs[PAIR] == "floating tags moved"
    else:
        assert moved(plan) == set()  # never half a pair
        assert plan.pairs[PAIR].startswith("floating tags not moved: ")
        for twin, outcome in ((CUDA, cuda), (ROCM, rocm)):
            if not outcome.good:
                assert f"{twin.id} is {outcome.value}" in plan.pairs[PAIR]
            elif gate is not None and not gate.get(twin.id, False):
                assert f"{twin.id} has no passing GPU test for its vendor" in plan.pairs[PAIR]


@pytest.mark.parametrize("cuda, rocm", list(itertools.product(Outcome, Outcome)), ids=lambda value: value.value)
def test_nightly_moves_date_tags_for_every_good_image_and_own_nightly_tags_only_where_the_gate_allows(cuda, rocm):
    gate = {CUDA.id: True, ROCM.id: False}
    plan = tag_moves([CUDA, ROCM], {CUDA.id: cuda, ROCM.id: rocm}, gate, nightly=True, date="20261130")
    dated = {(m.target, m.tag) for m in plan.moves if m.annotate_date == "20261130"}
    assert dated == {(t.id, f"{t.id}-nightly-20261130") for t, o in ((CUDA, cuda), (ROCM, rocm)) if o.good}
    own = {(m.target, m.tag) for m in plan.moves if m.tag.endswith("-nightly") and not m.annotate_date}
    # ROCm has no GPU test: its own nightly tag stays, and so do the pair's (gate on, half the pair untested)
    assert own == ({(CUDA.id, f"{CUDA.id}-nightly")} if cuda.good else set())
    if rocm.good:
        assert plan.held[ROCM.id] == f"{ROCM.id} has no passing GPU test for its vendor"
    else:
        assert ROCM.id not in plan.held
    assert not any(tag in {alias for _, alias in ALIASES} for _, tag in moved(plan))


def test_a_good_nightly_pair_moves_its_aliases_and_their_nightly_twins():
    plan = tag_moves([CUDA, ROCM], {CUDA.id: Outcome.PUBLISHED, ROCM.id: Outcome.UNCHANGED}, None, nightly=True, date="20261130")
    assert moved(plan) >= ALIASES | {(target, f"{alias}-nightly") for target, alias in ALIASES}
    assert plan.held == {}


def test_an_unpaired_target_gets_no_floating_tag_and_a_twin_selected_alone_moves_none():
    lone = tag_moves([LONE], {LONE.id: Outcome.PUBLISHED}, None)
    assert moved(lone) == set() and lone.pairs == {}
    alone = tag_moves([CUDA], {CUDA.id: Outcome.PUBLISHED}, None)
    assert moved(alone) == set()
    assert alone.pairs[PAIR] == "floating tags not moved: the other twin is not in this selection"


def test_a_target_without_an_outcome_counts_as_failed():
    plan = tag_moves([CUDA, ROCM], {CUDA.id: Outcome.PUBLISHED}, None)
    assert moved(plan) == set() and f"{ROCM.id} is failed" in plan.pairs[PAIR]


@pytest.mark.parametrize(
    "published, build, expected",
    [
        (None, True, Outcome.WOULD_BUILD),
        (None, False, Outcome.MISSING),
        (Published("sha256:a", "f1"), True, Outcome.UNCHANGED),
        (Published("sha256:a", "f1"), False, Outcome.UNCHANGED),
        (Published("sha256:a", "f0"), True, Outcome.WOULD_BUILD),  # an older fingerprint: rebuild
        (Published("sha256:a", "f0"), False, Outcome.MISSING),  # the tag job never builds
    ],
)
def test_initial_outcome_skips_exactly_what_the_registry_holds_with_this_fingerprint(published, build, expected):
    assert initial_outcome("f1", published, build) is expected


def test_retention_keeps_the_newest_date_tags_of_this_target_only():
    own = [f"{CUDA.id}-nightly-{date}" for date in ("20261127", "20261130", "20261128", "20261129")]
    foreign = [f"{ROCM.id}-nightly-20261101", f"{CUDA.id}-nightly", f"{CUDA.id}-nightly-2026113", "latest", f"x{CUDA.id}-nightly-20261101"]
    assert expired_date_tags(CUDA, own + foreign, keep=2) == [f"{CUDA.id}-nightly-20261127", f"{CUDA.id}-nightly-20261128"]
    assert expired_date_tags(CUDA, own + foreign, keep=0) == sorted(own)
    assert expired_date_tags(CUDA, own, keep=10) == []


def test_a_family_pair_moves_every_floating_tag_only_when_the_cuda_twin_and_every_family_image_qualify():
    cuda = FAMILY_PAIR["2.14.1-cuda13.0-py3.11-runtime"]
    families = [t for t in FAMILY_PAIR.values() if t.family]
    assert len(families) == 6
    good = {t.id: Outcome.PUBLISHED for t in FAMILY_PAIR.values()}
    plan = tag_moves(list(FAMILY_PAIR.values()), good, None)
    assert moved(plan) == {(t.id, t.tag_names[1]) for t in FAMILY_PAIR.values()}
    assert (families[0].id, "2.14.1-rocm-mi200-py3.11-runtime") in moved(plan)
    one_failed = tag_moves(list(FAMILY_PAIR.values()), {**good, families[1].id: Outcome.FAILED}, None)
    assert moved(one_failed) == set() and f"{families[1].id} is failed" in one_failed.pairs["2.14.1-py3.11-runtime"]
    # a selection of the CUDA twin and one family image is a whole pair: both backends are in it
    assert moved(tag_moves([cuda, families[0]], good, None)) == {(cuda.id, cuda.tag_names[1]), (families[0].id, families[0].tag_names[1])}
    alone = tag_moves(families[:2], good, None)
    assert moved(alone) == set() and "the other twin is not in this selection" in alone.pairs["2.14.1-py3.11-runtime"]
