"""A faulty team template costs what a good one does plus the fault: validating a matrix whose every runtime
target uses it prints one error for the template, naming the target it was found in and how many others it
stops, as soon as the fault is found (compiling it, or rendering its first target's shape), run as a user runs it.

"At once" is counted, not timed (the suite runs on loaded machines): what the CLI sent its template worker, one
set of templates and at most one shape, never a render per target. bench/template_faults.py measures the times."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

FAULTS = {  # fault: (the team's runtime.Dockerfile.j2, what its one error says)
    "syntax_error": (
        '{% extends "_image.Dockerfile.j2" %}{% block base %}\nFROM {{ target.base_image }\n{% endblock %}',
        "runtime.Dockerfile.j2:2: template syntax error",
    ),
    "sandbox_violation": (
        '{% extends "_image.Dockerfile.j2" %}{% block base %}\nFROM {{ target.__class__.__init__.__globals__ }}\n{% endblock %}',
        "runtime.Dockerfile.j2:2: template tried something the sandbox forbids",
    ),
    "self_extending": ('{% extends "runtime.Dockerfile.j2" %}\n{% block extra %}RUN true{% endblock %}', "runtime.Dockerfile.j2:1: template extends itself"),
    "resource_bomb": (
        '{% extends "_image.Dockerfile.j2" %}{% block base %}\n'
        "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}\n{% endblock %}",
        "over budget: the render runs longer than the 2 s",
    ),
}


# The real CLI in a process of its own, with what it sends its template worker counted by kind ("render",
# "shape", or the templates a worker starts with) and written to argv[1] when it ends.
COUNTED_SENDS = """
import collections, json, sys
from buildkit.adapters import template_worker
from buildkit.cli import main
sent = collections.Counter()
real_send = template_worker._send

def counted_send(stream, value):
    sent[value[0] if isinstance(value[0], str) else "templates"] += 1
    return real_send(stream, value)

template_worker._send = counted_send
try:
    code = main(sys.argv[2:])
finally:
    with open(sys.argv[1], "w") as counts:
        json.dump(sent, counts)
sys.exit(code)
"""


@pytest.mark.slow
@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_validate_reports_a_faulty_template_once_and_at_once(fault, tmp_path):
    template, says = FAULTS[fault]
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "runtime.Dockerfile.j2").write_text(template)
    (tmp_path / "m.toml").write_text('extends = "default"\ntemplate_dir = "t"\n')
    counts = tmp_path / "sent.json"
    result = subprocess.run(
        [sys.executable, "-c", COUNTED_SENDS, str(counts), "matrix", "validate", "--matrix", str(tmp_path / "m.toml")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )  # a guard against hangs only: a fault is found in seconds
    errors = result.stderr.splitlines()
    assert result.returncode == 2 and len(errors) == 1 and result.stdout == "", result.stderr
    assert errors[0].startswith(f"error: {tmp_path / 't'}/") and says in errors[0], errors
    # a fault found compiling concerns every target of the template; one found rendering names its target
    named = r"\(104 targets use this template\)$" if fault == "syntax_error" else r"\(target 2\.\S+-runtime and the 103 other targets that use this template\)$"
    assert re.search(named, errors[0]), errors
    # one worker (one set of templates) and the first target's shape at most: not a render, not a worker, per target
    sent = json.loads(counts.read_text())
    assert sent.get("templates", 0) <= 1 and sent.get("shape", 0) <= 1 and sent.get("render", 0) == 0, sent
    assert fault != "resource_bomb" or sent == {"templates": 1, "shape": 1}, sent  # the one shape it went over budget in


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
    assert ("runtime.Dockerfile.j2:1: template extends itself (runtime.Dockerfile.j2 -> _base.Dockerfile.j2 -> runtime.Dockerfile.j2)") in result.err


def test_a_conditional_extends_of_itself_is_left_to_the_render(cli, tmp_path):
    """An `{% extends %}` inside an `{% if %}` is not a loop by itself: the render decides, and here it never takes it."""
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "team.Dockerfile.j2").write_text(
        '{% if target.python == "2.7" %}{% extends "team.Dockerfile.j2" %}{% else %}{% extends "runtime.Dockerfile.j2" %}{% endif %}\n'
    )
    (tmp_path / "m.toml").write_text('extends = "default"\ntemplate_dir = "t"\nflavors = ["team"]\n')
    result = cli("matrix", "validate", "--matrix", Path(tmp_path / "m.toml"))
    assert result.code == 0, result.err
