"""Team templates render under a budget of time, memory and output: each class of template that Jinja's sandbox
lets run for minutes or allocate gigabytes ends in one error naming the template, exit 2, within the worker's
budget of CPU seconds and 1 GiB, run as a user runs it (the CLI in a process of its own, its address space capped
at 1 GiB). The error says which budget stopped it; bench/template_faults.py measures the times."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from buildkit.adapters.files.bundled import builtin_templates_dir
from buildkit.adapters.template_worker import TemplateWorker
from buildkit.app.targets import Choices, select_targets
from buildkit.errors import Problem, UserError

INCLUDE_ONE = 'include = [{ torch = "2.14.1", python = "3.12", flavor = "runtime" }]\n'
OVER_TIME = "over budget: the render runs longer than the 2 s one render may take"
OVER_MEMORY = "over budget: the render needs more than the 512 MiB of memory one render may take"
OVER_OUTPUT = "the template writes more than 4,194,304 characters, beyond its budget"

BOMBS = {  # class: (template, what the one error says)
    "exponent_tower": ("{% set a = 2 ** 256 %}{% set b = a ** 256 %}{% set c = b ** 256 %}{{ (c ** 256) > 0 }}", (OVER_TIME, OVER_MEMORY)),
    "big_int_products": (
        "{% set ns = namespace(x=7 ** 256) %}{% for i in range(40) %}{% set ns.x = ns.x * ns.x %}{% endfor %}{{ ns.x > 0 }}",
        (OVER_TIME, OVER_MEMORY),
    ),
    "nested_loops": ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", (OVER_TIME,)),
    "center_width": ('{{ "x"|center(2000000000) }}', (OVER_MEMORY,)),
    "indent_width": ('{{ "a\nb"|indent(2000000000) }}', (OVER_MEMORY,)),
    "format_width": ('{{ "%2000000000s"|format("x") }}', (OVER_MEMORY,)),
    "lipsum": ("{{ lipsum(n=100000000) }}", (OVER_TIME, OVER_MEMORY, OVER_OUTPUT)),
    "macro_doubling": (
        '{% macro d(s, n) %}{% if n %}{{ d(s ~ s, n - 1) }}{% else %}{{ s|length }}{% endif %}{% endmacro %}{{ d("x", 40) }}',
        (OVER_MEMORY, OVER_TIME),
    ),
    "loop_writing_gigabytes": ("{% for i in range(100000) %}{% for j in range(100000) %}" + "x" * 64 + "{% endfor %}{% endfor %}", (OVER_OUTPUT,)),
}
CAPPED_CLI = "import resource, sys; resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30)); from buildkit.cli import main; sys.exit(main(sys.argv[1:]))"


def team(folder: Path, template: str, name: str = "runtime.Dockerfile.j2") -> Path:
    (folder / "t").mkdir(parents=True, exist_ok=True)
    (folder / "t" / name).write_text(template)
    (folder / "m.toml").write_text('extends = "default"\ntemplate_dir = "t"\n' + INCLUDE_ONE)
    return folder / "m.toml"


@pytest.mark.slow
@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_each_class_of_resource_bomb_is_one_error_within_the_budget_and_1_gib(bomb, tmp_path):
    template, expected = BOMBS[bomb]
    matrix = team(tmp_path, template)
    result = subprocess.run(
        [sys.executable, "-c", CAPPED_CLI, "render", "--matrix", str(matrix), "--out", str(tmp_path / "dist")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )  # a guard against hangs only: the worker's budget stops each bomb in seconds
    errors = [line for line in result.stderr.splitlines() if not line.startswith("note: ")]
    assert result.returncode == 2 and len(errors) == 1, result.stderr[-3000:]
    assert errors[0].startswith(f"error: {tmp_path / 't' / 'runtime.Dockerfile.j2'}: ") and any(e in errors[0] for e in expected), errors
    assert "(target 2.14.1-" in errors[0] and not (tmp_path / "dist").exists()


@pytest.mark.slow
def test_a_render_that_stays_within_the_budget_is_untouched_and_the_worker_serves_every_target(tmp_path):
    """A team template renders as it would in process; one worker renders all of a run's team targets."""
    matrix = team(
        tmp_path, '{% extends "_image.Dockerfile.j2" %}{% block base %}FROM {{ target.base_image }}\nLABEL team.mark="{{ target.id }}"\n{% endblock %}'
    )
    (tmp_path / "m.toml").write_text('extends = "default"\ntemplate_dir = "t"\ninclude = [{ torch = "2.14.1", flavor = "runtime" }]\n')
    selection = select_targets(Choices(matrix=matrix))
    worker = selection.renderer.bounded
    assert isinstance(worker, TemplateWorker)
    rendered = selection.render()
    assert len(rendered) > 4 and all(f'team.mark="{item.target.id}"' in item.dockerfile for item in rendered)
    assert worker.process is not None and worker.process.poll() is None  # the same worker, still there
    in_process = [selection.renderer.text(planned) for planned in selection.plan()]
    assert [item.dockerfile for item in rendered] == in_process


def test_builtin_templates_render_in_process(monkeypatch):
    """buildkit's own templates are its code: no worker for them (a 10,000-target render must not pay one)."""
    monkeypatch.setattr(TemplateWorker, "render_all", lambda *args: pytest.fail("a built-in template went to the worker"))
    assert len(select_targets(Choices()).render()) > 10


@pytest.mark.slow
def test_a_team_file_shadowing_a_builtin_part_sends_the_render_to_the_worker(tmp_path):
    """runtime.Dockerfile.j2 is built in, but the team's _macros.Dockerfile.j2 it imports is searched first."""
    macros = (builtin_templates_dir() / "_macros.Dockerfile.j2").read_text()
    team(tmp_path, macros + '{% set wide = "x"|center(2000000000) %}', "_macros.Dockerfile.j2")  # runs on import
    with pytest.raises(UserError, match="over budget: the render needs more than"):
        select_targets(Choices(matrix=tmp_path / "m.toml")).render()


@pytest.mark.slow
def test_after_a_bomb_the_next_render_gets_a_fresh_worker(tmp_path):
    team(tmp_path, BOMBS["nested_loops"][0], "boom.Dockerfile.j2")
    team(tmp_path, '{% extends "runtime.Dockerfile.j2" %}', "calm.Dockerfile.j2")
    (tmp_path / "m.toml").write_text(
        'extends = "default"\ntemplate_dir = "t"\nflavors = ["boom", "calm"]\ninclude = [{ torch = "2.13.0", python = "3.12", backend_version = "7.2" }]\n'
    )
    selection = select_targets(Choices(matrix=tmp_path / "m.toml"))
    boom, calm = sorted(selection.plan(), key=lambda planned: planned.target.flavor)
    with pytest.raises(UserError, match="runs longer than the 2 s"):
        selection.renderer.render(boom)
    assert selection.renderer.bounded.process is None  # stopped, not left running the loop
    assert selection.renderer.render(calm).dockerfile.startswith("# ")


def team_flavor(folder: Path, extra: str) -> Path:
    """A matrix of one team flavor, `team`, whose template extends the built-in runtime one with `extra`."""
    team(folder, '{% extends "runtime.Dockerfile.j2" %}{% block extra %}' + extra + "{% endblock %}", "team.Dockerfile.j2")
    (folder / "m.toml").write_text('extends = "default"\ntemplate_dir = "t"\nflavors = ["team"]\ninclude = [{ torch = "2.14.1" }]\n')
    return folder / "m.toml"


@pytest.mark.slow
def test_the_targets_after_a_team_shape_are_planned_while_the_worker_renders_it(tmp_path, monkeypatch):
    """A render plans its targets as it goes: while the worker starts and renders a team template's first shape,
    the CLI plans the targets after it instead of waiting (the same texts as planning everything first)."""
    selection = select_targets(Choices(matrix=team_flavor(tmp_path, "ENV TEAM=1\n")))
    planned_during_shape: list[int] = []
    plans = 0
    plan, shape = selection.renderer.plan, TemplateWorker.shape

    def counted_plan(target):
        nonlocal plans
        plans += 1
        return plan(target)

    def watched_shape(worker, *args, **kwargs):
        before = plans
        try:
            return shape(worker, *args, **kwargs)
        finally:
            planned_during_shape.append(plans - before)

    monkeypatch.setattr(selection.renderer, "plan", counted_plan)
    monkeypatch.setattr(TemplateWorker, "shape", watched_shape)
    rendered = selection.render()
    assert len(rendered) == len(selection.targets) > 4
    assert planned_during_shape[0] == len(selection.targets) - 1  # all the others, while the worker started and rendered
    monkeypatch.undo()
    assert [item.dockerfile for item in rendered] == [selection.renderer.text(planned) for planned in selection.plan()]


@pytest.mark.slow
def test_an_error_planned_ahead_waits_for_its_turn(tmp_path):
    """While the worker renders the first target's shape, the targets after it are planned; one that cannot be
    planned fails in its turn, so the first target's own template error is the one said."""
    selection = select_targets(Choices(matrix=team_flavor(tmp_path, "{{ 1 // 0 }}")))

    def planned():
        yield selection.renderer.plan(selection.targets[0])
        raise UserError(Problem("matrix.toml", "the second target cannot be planned"))

    selection.renderer.prepare()
    with pytest.raises(UserError, match="ZeroDivisionError"):
        selection.renderer.render_all(planned())
