"""Validation linear in the matrix's size: include/exclude rules cost the same work each at 2,500 rules as at
10,000 (counted in Python calls, the same on any machine; bench.plan_render times 40,000), and the rule engine
that makes it so agrees with fnmatch on every rule and target Hypothesis writes."""

from __future__ import annotations

import fnmatch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from buildkit.adapters.files.matrix import load_matrix
from buildkit.core.matrix.fields import Rule, apply_rules, matched_by
from buildkit.core.targets.plan import expand
from testkit.bounds import count_calls

RULES = 40_000
SHAPES = {  # shape: (the rules' key, one rule), each rule distinct
    # distinct literal patterns: past fnmatch's 32,768-pattern cache, every match recompiled, and 40k took minutes
    "distinct_literals": ("exclude", lambda i: f'{{ torch = "2.14.1", python = "3.{i % 90 + 20}", flavor = "x{i}" }}'),
    # distinct wildcard globs on target ids, the one key with a value per target
    "id_globs": ("exclude", lambda i: f'{{ id = "*-py3.1{i % 10}-x{i}*" }}'),
    # rules that do match: every one removes targets already removed by an earlier one
    "matching": ("exclude", lambda i: f'{{ python = "3.1{i % 2}", backend = "{("cuda", "rocm")[i % 2]}*" }}'),
    # include rules that match nothing: each one a problem, of which 50 are shown
    "include_nothing": ("include", lambda i: f'{{ id = "nothing-{i}*" }}'),
}
# Python calls a rule costs today (2026-12-06): 181, 1,460 (each glob tried on each of the 132 target ids), 167,
# 719 (each one a located problem). A change that doubles them, or that makes a rule's cost grow with the rules before it, fails here.
CALLS_PER_RULE = {"distinct_literals": 181, "id_globs": 1460, "matching": 167, "include_nothing": 719}


def write_rules(path, shape: str, count: int):
    key, rule = SHAPES[shape]
    rules = ",\n".join(f"  {rule(i)}" for i in range(count))
    path.write_text(f'extends = "default"\n{key} = [\n{rules}\n]\n' if count else 'extends = "default"\n')
    return path


@pytest.mark.slow
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_rule_costs_the_same_work_at_any_count(cli, tmp_path, shape):
    """The calls validate makes, counted at 1,000, 2,500 and 10,000 rules: the 7,500 rules past the first 2,500
    cost what the 1,500 before them did, rule for rule (linear, within 10 %), and a rule costs at most twice
    today's calls. (Not from 0 rules: an include rule that matches nothing also spares the render of every target.)"""

    def calls(count: int) -> int:
        path = write_rules(tmp_path / f"m{count}.toml", shape, count)
        return count_calls(lambda: cli("matrix", "validate", "--matrix", path))[1]

    calls(1)  # caches filled: the built-in templates compiled, the default matrix read
    base, small, large = calls(1_000), calls(2_500), calls(10_000)
    first, then = (small - base) / 1_500, (large - small) / 7_500
    assert abs(then - first) <= 0.1 * first, f"{first:.0f} calls a rule from 1,000 to 2,500 rules, {then:.0f} for the 7,500 after"
    assert then <= 2 * CALLS_PER_RULE[shape], f"{then:.0f} calls a rule (was {CALLS_PER_RULE[shape]})"


@pytest.mark.slow
@pytest.mark.parametrize("shape", sorted(set(SHAPES) - {"include_nothing"}))
def test_forty_thousand_exclude_rules_validate(cli, tmp_path, shape):
    result = cli("matrix", "validate", "--matrix", write_rules(tmp_path / "m.toml", shape, RULES))
    assert result.code == 0, result.err
    # no flavor x1 and no id with "-x" exist: nothing is removed; the matching shape has two distinct rules
    targets = expand(load_matrix(None)).targets
    kept = (
        len(targets)
        if shape != "matching"
        else sum(1 for t in targets if not ((t.python == "3.10" and t.backend.startswith("cuda")) or (t.python == "3.11" and t.backend.startswith("rocm"))))
    )
    assert kept < len(targets) or shape != "matching"
    assert result.out.startswith(f"ok: {kept} targets"), result.out


@pytest.mark.slow
def test_forty_thousand_include_rules_that_match_nothing_are_one_short_report(cli, tmp_path):
    result = cli("matrix", "validate", "--matrix", write_rules(tmp_path / "m.toml", "include_nothing", RULES))
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
    expected = [tuple(i for i, target in enumerate(targets) if all(fnmatch.fnmatchcase(target[k], p) for k, p in rule.criteria)) for rule in rules]
    assert matched_by(rules, targets) == expected
    assert [rule.matches(target) for rule in rules for target in targets] == [i in found for found in expected for i in range(len(targets))]
    include, exclude = rules[: len(rules) // 2], rules[len(rules) // 2 :]
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
    """expand makes each record through Target's constructor (plan._target), and sets the cached properties a
    version's targets share: the same record as Target(**fields), for every target of the default matrix, with each
    cached property it sets the one the record computes."""
    import dataclasses

    from buildkit.app.targets import Choices, select_targets
    from buildkit.core.targets.plan import Target

    for target in select_targets(Choices()).targets:
        fields = {field.name: getattr(target, field.name) for field in dataclasses.fields(Target)}
        assert set(vars(target)) >= set(fields) and Target(**fields) == target and repr(Target(**fields)) == repr(target)
        made = Target(**fields)  # its cached properties computed, where expand set the values it shares
        for name in set(vars(target)) - set(fields):
            assert getattr(made, name) == vars(target)[name], (target.id, name)


def test_the_targets_constructor_is_the_dataclass_one_setting_its_fields_at_once():
    """Target's __init__ (plan._fields_at_once) takes what the dataclass's own would, the arguments mypy checks
    calls against: the same names, order, kinds and defaults; missing and unknown fields are refused alike, and the
    record stays frozen."""
    import dataclasses
    import inspect

    from buildkit.core.targets.plan import Target

    own = dataclasses.make_dataclass(
        "Target",
        [
            (f.name, f.type, dataclasses.field(default=f.default)) if f.default is not dataclasses.MISSING else (f.name, f.type)
            for f in dataclasses.fields(Target)
        ],
        frozen=True,
    )

    def shape(record):
        return [(p.name, p.kind, p.default) for p in inspect.signature(record.__init__).parameters.values()]

    assert shape(Target) == shape(own) and len(shape(Target)) == len(dataclasses.fields(Target)) + 1
    target = expand(load_matrix(None)).targets[0]
    fields = {field.name: getattr(target, field.name) for field in dataclasses.fields(Target)}
    with pytest.raises(TypeError, match="id"):
        Target(**{name: value for name, value in fields.items() if name != "id"})
    with pytest.raises(TypeError, match="colour"):
        Target(**fields, colour="red")
    with pytest.raises(dataclasses.FrozenInstanceError):
        target.python = "3.99"  # type: ignore[misc]


def test_a_target_takes_every_field_its_image_does_not_set_from_its_versions_prototype():
    """A field added to Target and left out of plan._target would take its default in every expanded target: each
    field the image does not set is its prototype's, whatever its value."""
    import dataclasses

    from buildkit.core.targets import plan

    matrix = load_matrix(None)
    image = plan._stack_targets(matrix, matrix.stacks[0], [])[0]
    own = {field.name for field in dataclasses.fields(image)}
    shared = [field.name for field in dataclasses.fields(plan.Target) if field.name not in own]
    marks = {name: object() for name in shared}
    image.version = plan._Version(dataclasses.replace(image.version.prototype, **marks), image.version.cached)
    target = plan._target(image)
    assert [name for name in shared if getattr(target, name) is not marks[name]] == []
    assert all(getattr(target, name) == getattr(image, name) for name in own - {"version"})
