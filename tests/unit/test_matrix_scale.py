"""Validation linear in the matrix's size: 40,000 include/exclude rules (a 1-2 MB file) validate in seconds,
and the rule engine that makes it so agrees with fnmatch on every rule and target Hypothesis writes."""

from __future__ import annotations

import fnmatch
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from buildkit.adapters.matrix_files import load_matrix
from buildkit.core.fields import Rule, apply_rules, matched_by
from buildkit.core.plan import expand

RULES = 40_000
SHAPES = {
    # distinct literal patterns: past fnmatch's 32,768-pattern cache, every match recompiled, and 40k took minutes
    "distinct_literals": lambda i: f'{{ torch = "2.14.1", python = "3.{i % 90 + 20}", flavor = "x{i}" }}',
    # distinct wildcard globs on target ids, the one key with a value per target
    "id_globs": lambda i: f'{{ id = "*-py3.1{i % 10}-x{i}*" }}',
    # rules that do match: every one removes targets already removed by an earlier one
    "matching": lambda i: f'{{ python = "3.1{i % 2}", backend = "{("cuda", "rocm")[i % 2]}*" }}',
}


@pytest.mark.slow
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_forty_thousand_exclude_rules_validate_within_seconds(cli, tmp_path, shape):
    path = tmp_path / "m.toml"
    rules = ",\n".join(f"  {SHAPES[shape](i)}" for i in range(RULES))
    path.write_text(f'extends = "default"\nexclude = [\n{rules}\n]\n')
    started = time.monotonic()
    result = cli("matrix", "validate", "--matrix", path)
    elapsed = time.monotonic() - started
    assert result.code == 0, result.err
    assert elapsed < 10, elapsed
    # no flavor x1 and no id with "-x" exist: nothing is removed; the matching shape has two distinct rules
    targets = expand(load_matrix(None)).targets
    kept = len(targets) if shape != "matching" else sum(1 for t in targets if not (
        (t.python == "3.10" and t.backend.startswith("cuda")) or (t.python == "3.11" and t.backend.startswith("rocm"))))
    assert kept < len(targets) or shape != "matching"
    assert result.out.startswith(f"ok: {kept} targets"), result.out


@pytest.mark.slow
def test_forty_thousand_include_rules_that_match_nothing_are_one_short_report(cli, tmp_path):
    path = tmp_path / "m.toml"
    path.write_text('extends = "default"\ninclude = [\n' + ",\n".join(f'  {{ id = "nothing-{i}*" }}' for i in range(RULES)) + "\n]\n")
    started = time.monotonic()
    result = cli("matrix", "validate", "--matrix", path)
    assert time.monotonic() - started < 10
    lines = result.err.splitlines()
    assert result.code == 2 and len(lines) == 51 and lines[-1].endswith(f"and {RULES - 50} more problems not shown: fix these and validate again")


values = st.sampled_from(["2.14.1", "2.13.0", "3.12", "3.1", "cuda", "rocm", "13.0", "a-b", "a*b", "[x]", ""])
patterns = st.text(st.sampled_from("23.14*?[]!abcdr-"), max_size=6) | values
facts = st.fixed_dictionaries(dict.fromkeys(("torch", "python", "backend"), values))
rules = st.lists(st.tuples(st.sampled_from(["torch", "python", "backend"]), patterns), max_size=3).map(lambda c: Rule(tuple(c)))


@pytest.mark.slow
@settings(max_examples=400, deadline=None, database=None)
@given(rules=st.lists(rules, max_size=6), targets=st.lists(facts, max_size=8))
def test_the_rule_engine_agrees_with_fnmatch(rules, targets):
    expected = [tuple(i for i, target in enumerate(targets) if all(fnmatch.fnmatchcase(target[k], p) for k, p in rule.criteria))
                for rule in rules]
    assert matched_by(rules, targets) == expected
    assert [rule.matches(target) for rule in rules for target in targets] == [i in found for found in expected for i in range(len(targets))]
    include, exclude = rules[: len(rules) // 2], rules[len(rules) // 2:]
    filtered = apply_rules(include, exclude, targets)
    candidates = [i for i in range(len(targets)) if not include or any(i in expected[r] for r in range(len(include)))]
    assert filtered.kept == tuple(i for i in candidates if not any(i in expected[len(include) + r] for r in range(len(exclude))))
    assert filtered.unmatched == tuple(r for r in range(len(include)) if not expected[r])
    if candidates and not filtered.kept:  # the rule that removed the last: the rules before it leave some target
        last = filtered.emptied_by
        excluded_by = [{i for r in range(upto) for i in expected[len(include) + r]} for upto in (last, last + 1)]
        assert not set(candidates) <= excluded_by[0] and set(candidates) <= excluded_by[1]
    else:
        assert filtered.emptied_by is None


def test_expanded_targets_are_the_records_their_constructor_makes():
    """expand fills each record's fields at once (plan._target): the same record as Target(**fields), for every
    target of the default matrix and a team's, with each field present, and each cached property it sets the one
    the record computes."""
    import dataclasses

    from buildkit.app.targets import Choices, select_targets
    from buildkit.core.plan import Target

    for target in select_targets(Choices()).targets:
        fields = {field.name: getattr(target, field.name) for field in dataclasses.fields(Target)}
        assert set(vars(target)) >= set(fields) and Target(**fields) == target and repr(Target(**fields)) == repr(target)
        made = Target(**fields)  # its cached properties computed, where expand set the values it shares
        for name in set(vars(target)) - set(fields):
            assert getattr(made, name) == vars(target)[name], (target.id, name)
