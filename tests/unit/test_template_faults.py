"""A faulty team template costs what a good one does plus the fault: validating a matrix whose every runtime
target uses it prints one error for the template, naming the target it was found in and how many others it
stops, as soon as the fault is found (compiling it, or rendering its first target's shape), run as a user runs it.

The bounds here are generous regression guards (the suite runs on loaded machines); bench/template_faults.py
measures the times."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from buildkit.adapters.template_worker import TIME_BUDGET

FAULTS = {  # fault: (the team's runtime.Dockerfile.j2, what its one error says)
    "syntax_error": ('{% extends "_image.Dockerfile.j2" %}{% block base %}\nFROM {{ target.base_image }\n{% endblock %}',
                     "runtime.Dockerfile.j2:2: template syntax error"),
    "sandbox_violation": ('{% extends "_image.Dockerfile.j2" %}{% block base %}\nFROM {{ target.__class__.__init__.__globals__ }}\n'
                          '{% endblock %}', "runtime.Dockerfile.j2:2: template tried something the sandbox forbids"),
    "self_extending": ('{% extends "runtime.Dockerfile.j2" %}\n{% block extra %}RUN true{% endblock %}',
                       "runtime.Dockerfile.j2:1: template extends itself"),
    "resource_bomb": ('{% extends "_image.Dockerfile.j2" %}{% block base %}\n'
                      '{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}\n{% endblock %}',
                      "over budget: the render runs longer than the 2 s"),
}


@pytest.mark.slow
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_validate_reports_a_faulty_template_once_and_at_once(fault, tmp_path):
    template, says = FAULTS[fault]
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "runtime.Dockerfile.j2").write_text(template)
    (tmp_path / "m.toml").write_text('extends = "default"\ntemplate_dir = "t"\n')
    started = time.monotonic()
    result = subprocess.run([sys.executable, "-m", "buildkit", "matrix", "validate", "--matrix", str(tmp_path / "m.toml")],
                            capture_output=True, text=True, timeout=60, cwd=tmp_path)
    elapsed = time.monotonic() - started
    errors = result.stderr.splitlines()
    assert result.returncode == 2 and len(errors) == 1 and result.stdout == "", result.stderr
    assert errors[0].startswith(f"error: {tmp_path / 't'}/") and says in errors[0], errors
    # a fault found compiling concerns every target of the template; one found rendering names its target
    named = r"\(104 targets use this template\)$" if fault == "syntax_error" else r"\(target 2\.\S+-runtime and the 103 other targets that use this template\)$"
    assert re.search(named, errors[0]), errors
    # a cheap fault costs a worker's start; a bomb its CPU budget and the CLI's margin: not one worker per target
    assert elapsed < (TIME_BUDGET + 8 if fault == "resource_bomb" else 8), elapsed


def test_a_fault_in_a_part_every_flavor_uses_is_one_error(cli, tmp_path):
    """runtime and devel both extend the team's _image.Dockerfile.j2: its fault is reported once, for both."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "_image.Dockerfile.j2").write_text("{% block base %}{% endblock %}\nRUN {{ target.no_such_field }}\n")
    (tmp_path / "m.toml").write_text('extends = "default"\ntemplate_dir = "t"\n')
    result = cli("matrix", "validate", "--matrix", Path(tmp_path / "m.toml"))
    assert result.code == 2 and result.err.count("error: ") == 1, result.err
    assert "_image.Dockerfile.j2:2: template uses an undefined value" in result.err


def test_templates_that_extend_each_other_are_one_error_before_any_render(cli, tmp_path):
    """runtime extends the team's _base, which extends runtime: said from the parsed chain, at the template that
    starts the loop, with the loop named."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "runtime.Dockerfile.j2").write_text('{% extends "_base.Dockerfile.j2" %}\n')
    (tmp_path / "t" / "_base.Dockerfile.j2").write_text('\n{% extends "runtime.Dockerfile.j2" %}\n')
    (tmp_path / "m.toml").write_text('extends = "default"\ntemplate_dir = "t"\n')
    result = cli("matrix", "validate", "--matrix", Path(tmp_path / "m.toml"))
    assert result.code == 2 and result.err.count("error: ") == 1, result.err
    assert ("runtime.Dockerfile.j2:1: template extends itself "
            "(runtime.Dockerfile.j2 -> _base.Dockerfile.j2 -> runtime.Dockerfile.j2)") in result.err


def test_a_conditional_extends_of_itself_is_left_to_the_render(cli, tmp_path):
    """An `{% extends %}` inside an `{% if %}` is not a loop by itself: the render decides, and here it never takes it."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "team.Dockerfile.j2").write_text(
        '{% if target.python == "2.7" %}{% extends "team.Dockerfile.j2" %}{% else %}{% extends "runtime.Dockerfile.j2" %}{% endif %}\n')
    (tmp_path / "m.toml").write_text('extends = "default"\ntemplate_dir = "t"\nflavors = ["team"]\n')
    result = cli("matrix", "validate", "--matrix", Path(tmp_path / "m.toml"))
    assert result.code == 0, result.err
