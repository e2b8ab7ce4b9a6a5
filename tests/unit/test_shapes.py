"""Shape rendering (buildkit.core.render.shapes): a target's Dockerfile written from its template's shape is the text the
template renders for it on its own, byte for byte, for every target of the default matrix and for team
templates that look into their values in every way a template can; whatever a shape cannot stand for is
rendered target by target, and errors are the same errors."""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path

import pytest

from buildkit.adapters.template_worker import TemplateWorker
from buildkit.app.targets import Choices, select_targets
from buildkit.core.install_plan import install_inputs, torch_install
from buildkit.core.render.planned import VARIABLE_TYPES, template_variables
from buildkit.core.render.renderer import Renderer
from buildkit.core.render.shapes import _MISSING, ITEM, TEXT, VALUE, PathTree, ShapeData
from buildkit.errors import UserError

MARKER = "\ue000test-marker"
# several Pythons and backends, a nightly and a source build, so values differ in every way a target's can
TEAM = (
    'extends = "default"\ntemplate_dir = "t"\nflavors = ["runtime", "team"]\n'
    'include = [{ torch = "2.14.1", python = "3.1[23]" }, { torch = "2.13.0", python = "3.11", backend = "rocm" }]\n'
)


def shaped_and_alone(renderer: Renderer, planned) -> tuple[list[str | Exception], list[str | Exception]]:
    """Each target's text (or its error) written from shapes, and rendered on its own."""

    def attempt(render):
        try:
            return render()
        except UserError as error:
            return str(error)

    shaped = [attempt(lambda item=item: renderer.render(item).dockerfile) for item in planned]
    alone = [attempt(lambda item=item: renderer.text(item)) for item in planned]
    return shaped, alone


def in_process(matrix: Path | None = None) -> tuple[Renderer, tuple]:
    """A selection's plan and a renderer that renders every template here, from shapes."""
    selection = select_targets(Choices(matrix=matrix))
    old = selection.renderer
    return Renderer(old.environment.loader, old.source, old.support, old.compat, marker=MARKER), selection.plan()


def test_every_target_of_the_default_matrix_is_written_as_it_renders_alone():
    renderer, planned = in_process()
    shaped, alone = shaped_and_alone(renderer, planned)
    assert shaped == alone and len(shaped) > 100
    shapes = sum(len(book) for book in renderer._shapes.values())
    assert shapes < len(planned) / 2 and not renderer._one_by_one, (shapes, len(planned))


# Team blocks that read their values every way Jinja allows: each must come out as the template renders it.
LOOKS = {
    "compare": '{% if target.python == "3.12" %}A{% else %}B{% endif %}',
    "order": '{% if target.python > "3.11" %}newer{% endif %}',
    "captured_then_compared": '{% set v %}{{ target.python }}{% endset %}{% if v == "3.12" %}A{% endif %}{{ v }}',
    "captured_truth": "{% set v %}{{ target.family }}{% endset %}{% if v %}family {{ v }}{% else %}no family{% endif %}",
    "macro_result_compared": '{% macro m() %}{{ target.python }}{% endmacro %}{% if m() == "3.12" %}A{% endif %}{{ m() }}',
    "super_filtered": "{{ super() | upper }}",
    "filter_block": "{% filter upper %}{{ target.id }}{% endfilter %}",
    "text_filters": '{{ target.python | upper }} {{ target.id | replace("-", "_") }} {{ target.python | length }}',
    "formatting": '{{ "%s" | format(target.python) }} {{ "%s-x" % target.python }}',
    "contains": '{% if "3.1" in target.python %}A{% endif %}{% if target.python in "3.12 3.13" %}B{% endif %}',
    "indexing": "{{ target.python[0] }}{{ target.python[1:] }}{% for c in target.python %}[{{ c }}]{% endfor %}",
    "method": '{{ target.id.split("-")[0] }} {{ target.python.startswith("3.1") }}',
    "sequences": '{{ target.archs | join(";") }} {{ target.archs | length }} {{ target.archs | first }} {{ target.archs[-1] }}'
    "{% if target.archs | length > 3 %} many{% endif %}",
    "sequence_printed_whole": "{{ target.archs }} {{ target.companions | list }}",
    "record_printed": "{{ target.user }}",
    "concat": '{{ target.python ~ "-" ~ target.backend }} {{ (target.python ~ "x") | upper }}',
    "namespace_and_dict": "{% set ns = namespace(v=target.python) %}{{ ns.v }} {{ dict(a=target.python) }}",
    "tests": '{{ target.python is string }} {{ target.pair is none }} {{ target.archs is sequence }} {{ target.python is eq("3.12") }}',
    "quote_and_labels": "{{ target.user.name | shell_quote }} {{ labels.values() | list | length }} {{ labels | length }}",
    "labels_searched": "{% for k, v in labels | dictsort %}{% if v == target.python %}{{ k }}{% endif %}{% endfor %}",
    "mapping_printed": "{{ build_args.items() | list }} {{ build_args }}",
    "mapped": '{{ target.companions | map("upper") | join(",") }} {{ target.archs | select("equalto", "gfx942") | list }}',
    "call_with_a_value": "{{ support_file(target.python) }}",
    "range_of_a_length": "{{ range(target.archs | length) | list }}",
    "arithmetic": "{{ target.max_layer_size // 1000 }} {{ gb_per_job * 2 }}",
    "tojson": "{{ target.python | tojson }} {{ target.archs | tojson }}",
    # a real marker's token is drawn at random per run: a template can only guess one
    "guessed_marker": "\ue000" + "0" * 32 + "0\ue001 \ue000 {{ target.id }}",
    "joined_whole": '{{ target.archs | map("shell_quote") | join(" ") }} {{ target.archs | join(";") }} {{ target.archs | reverse | join(",") }}'
    ' {{ (target.archs | join("-")) | upper }} {% if target.archs | join("") %}some{% endif %} {{ target.archs | join(target.python) }}',
    "imported_text": '{% import "_macros.Dockerfile.j2" as steps %}{{ steps | string | length }}',
}


@pytest.mark.parametrize("look", sorted(LOOKS))
def test_a_team_template_that_looks_into_its_values_is_written_as_it_renders_alone(look, tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "team.Dockerfile.j2").write_text('{% extends "runtime.Dockerfile.j2" %}{% block extra %}\n' + LOOKS[look] + "\n{% endblock %}\n")
    (tmp_path / "m.toml").write_text(TEAM)
    renderer, planned = in_process(tmp_path / "m.toml")
    team = [item for item in planned if item.template == "team.Dockerfile.j2"]
    shaped, alone = shaped_and_alone(renderer, team)
    assert len(set(alone)) > 1  # the targets' texts differ
    assert shaped == alone


@pytest.mark.parametrize(
    "body, fails_for",
    [
        ('{% if target.python == "3.13" %}{{ target.no_such_field }}{% endif %}', "py3.13"),
        ('{% if target.backend == "rocm" %}{{ 1 // 0 }}{% endif %}', "rocm"),
    ],
)
def test_a_fault_only_some_targets_reach_is_found_by_validate(cli, tmp_path, body, fails_for):
    """Targets whose values take the template down another path have a shape of their own: validation renders it."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "team.Dockerfile.j2").write_text('{% extends "runtime.Dockerfile.j2" %}{% block extra %}\n' + body + "\n{% endblock %}\n")
    (tmp_path / "m.toml").write_text(
        TEAM.replace('python = "3.1[23]"', 'python = "3.1[23]", flavor = "team"').replace('backend = "rocm"', 'backend = "rocm", flavor = "team"')
    )
    result = cli("matrix", "validate", "--matrix", tmp_path / "m.toml")
    assert result.code == 2 and result.err.count("error: ") == 1, result.err
    assert "t/team.Dockerfile.j2:2: " in result.err and fails_for in result.err.split("(target ")[1]
    assert "other targets that use this template" in result.err


@pytest.mark.slow
def test_a_target_over_the_output_budget_is_found_by_its_own_length(tmp_path):
    """The budget holds for each target's text: a loop printing the target's id is over it for the longer ids
    alone, in render as in validate."""
    (tmp_path / "t").mkdir()
    template = tmp_path / "t" / "team.Dockerfile.j2"
    template.write_text('{% extends "runtime.Dockerfile.j2" %}')
    (tmp_path / "m.toml").write_text(TEAM)
    ids = sorted({target.id for target in select_targets(Choices(matrix=tmp_path / "m.toml")).targets if target.flavor == "team"}, key=len)
    short, long = len(ids[0]), len(ids[-1])
    assert short < long
    thousands = 4 * 2**20 // (long * 1000) + 1  # the sandbox's range() stops at 100,000: loops in a loop
    times = thousands * 1000  # long ids over 4 MiB, short ones under
    assert short * times <= 4 * 2**20 < long * times
    template.write_text(
        '{% extends "runtime.Dockerfile.j2" %}{% block extra %}\n'
        f"{{% for i in range({thousands}) %}}{{% for j in range(1000) %}}{{{{ target.id }}}}{{% endfor %}}{{% endfor %}}\n"
        "{% endblock %}\n"
    )
    selection = select_targets(Choices(matrix=tmp_path / "m.toml"))
    worker = selection.renderer.bounded
    assert isinstance(worker, TemplateWorker) and worker.process is None  # not started: its budgets can still be set
    # The output budget is under test, not the time budget: writing 4 MiB through Jinja loops takes a second or two of
    # CPU, which a slower machine could take past the 2 s a render may use
    worker.time_budget = 120.0
    team = [item for item in selection.plan() if item.template == "team.Dockerfile.j2"]
    over = {item.target.id for item in team if len(item.target.id) * times > 4 * 2**20}
    assert over and len(over) < len(team)
    for item in team:
        if item.target.id in over:
            with pytest.raises(UserError, match=f"writes more than 4,194,304 characters.*target {item.target.id}"):
                selection.renderer.render(item)
        else:
            assert selection.renderer.render(item).dockerfile.count(item.target.id) >= times
    failed = selection.renderer.check_all([item.target for item in team])
    assert "writes more than 4,194,304 characters" in str(failed["team.Dockerfile.j2"])


def test_the_worker_renders_a_few_shapes_for_many_team_targets(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "team.Dockerfile.j2").write_text(
        '{% extends "runtime.Dockerfile.j2" %}{% block extra %}\nLABEL team.id="{{ target.id }}"\n{% endblock %}\n'
    )
    (tmp_path / "m.toml").write_text(
        TEAM.replace("include = ", 'python = ["3.10", "3.11", "3.12", "3.13"]\ninclude = ').replace('python = "3.1[23]"', 'flavor = "team"')
    )
    selection = select_targets(Choices(matrix=tmp_path / "m.toml"))
    asked = []
    worker = selection.renderer.bounded
    original = worker.shape
    worker.shape = lambda *args: asked.append(args[2].target.id) or original(*args)  # type: ignore[method-assign]
    rendered = selection.render()
    team = [item for item in rendered if item.template == "team.Dockerfile.j2"]
    assert len(team) > 4 * len(asked) and asked
    assert all(f'team.id="{item.target.id}"' in item.dockerfile for item in team)
    assert [item.dockerfile for item in team] == [selection.renderer.text(item) for item in selection.plan() if item.template == "team.Dockerfile.j2"]


def test_a_joined_list_is_one_slot_however_long(tmp_path):
    """A stack's packages joined into one RUN line (`map('shell_quote') | join(' ')`) are one slot of the shape, so a
    shape, and what is read of each target to write it, do not grow with the list (1,000 packages once cost each of a
    template's shapes 1,000 slots, and every target the reading of 1,000 paths); the texts are the renders'."""
    slots = {}
    for count in (3, 1000):
        path = tmp_path / f"m{count}.toml"
        path.write_text(
            'extends = "default"\ninclude = [{ torch = "2.14.1", python = "3.12" }]\n'
            f"packages = {json.dumps([f'package-{index}>=1' for index in range(count)])}\n"
        )
        renderer, planned = in_process(path)
        shaped, alone = shaped_and_alone(renderer, planned)
        assert shaped == alone and all(f"'package-{count - 1}>=1'" in text for text in shaped)
        slots[count] = {len(shape.data.values) for book in renderer._shapes.values() for page in book._pages for shape in page.shapes.values()}
    assert slots[3] == slots[1000]


def test_a_shape_travels_as_json_and_back():
    renderer, planned = in_process()
    data = renderer.shape_data(planned[0])
    assert data is not None and ShapeData.from_json(json.loads(json.dumps(data.to_json()))) == data


def test_targets_that_agree_on_the_install_inputs_install_torch_alike():
    """install_inputs is what torch_install reads: the plan computes one install per value of it."""
    selection = select_targets(Choices())
    by_inputs: dict[tuple, object] = {}
    for target in selection.targets:
        install = torch_install(target, selection.matrix.compat)
        assert by_inputs.setdefault(install_inputs(target), install) == install, target.id
    assert len(by_inputs) < len(selection.targets)


def conforms(value, annotation) -> bool:
    """Whether a value is of its annotation, exactly (a shape trusts the class, not a subclass)."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is types.UnionType:
        return any(conforms(value, argument) for argument in arguments)
    if annotation is None or annotation is type(None):
        return value is None
    if origin is dict:
        return type(value) is dict and all(conforms(k, arguments[0]) and conforms(v, arguments[1]) for k, v in value.items())
    return type(value) is annotation


def test_the_declared_variable_types_are_the_variables_types():
    """A shape skips the type guards VARIABLE_TYPES fixes: every variable of every target has its declared type."""
    _, planned = in_process()
    for item in planned:
        for name, value in template_variables(item).items():
            if name in VARIABLE_TYPES:
                assert conforms(value, VARIABLE_TYPES[name]), (name, value)


@pytest.mark.parametrize("step", [["?", "x"], [".", ["x"]], ["[", {"a": 1}], ["(", [["nested"]]], ["[", [1, 2]]])
def test_a_shape_from_json_refuses_a_step_that_is_not_one(step):
    """The worker's answers are data: a malformed path is a ValueError (the worker is then stopped), not a crash."""
    renderer, planned = in_process()
    data = renderer.shape_data(planned[0]).to_json()
    data["guards"][0][0] = ["target", step]
    with pytest.raises(ValueError, match="not a path step"):
        ShapeData.from_json(data)


def test_trees_that_ask_the_same_of_a_variable_share_its_reader_and_still_answer_each_value():
    """The flavors' trees read a shared install plan once between them; another object is read again."""
    requests = [(("install", (ITEM, 1)), VALUE), (("target", (ITEM, "k")), TEXT)]
    first, second = PathTree(getattr, requests), PathTree(getattr, requests)
    shared, other = ("a", "b"), ("c", "d")
    assert first.read({"install": shared, "target": {"k": "x"}}) == ["b", "x"]
    assert second.read({"install": shared, "target": {"k": "y"}}) == ["b", "y"]
    assert first.read({"install": other, "target": {"k": "z"}}) == ["d", "z"]
    assert second.read({"target": {"k": "w"}}) == [_MISSING, "w"]
