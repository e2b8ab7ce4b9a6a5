"""Every list a matrix holds costs in proportion to the file: a list past its stated bound (buildkit/core/matrix/fields.py)
is refused unread, in one message naming its key, its size and the bound, and below the bounds a list is shared by
the targets that use it, not copied per target (a 5 MB matrix whose one stack listed 300,000 packages once took
51 s and 6.5 GB: each of its 92 targets, and each of its templates' shapes, held the list and what came from it).
Memory is measured in a child process (its peak resident set, /proc/self/status VmHWM), never time."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from buildkit.adapters.files import matrix as matrix_files
from buildkit.app.targets import Choices, select_targets
from buildkit.core.matrix import fields, templates
from buildkit.core.matrix import resolve as matrix
from buildkit.errors import UserError

REPO = Path(__file__).resolve().parent.parent.parent
# The CLI in a process of its own, which reports its peak resident memory (kB) on its last line of stderr.
_MEASURED = """\
import sys
from buildkit.cli import main
code = main(sys.argv[1:])
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
sys.stderr.write(f"\\npeak-kb={peak}\\n")
sys.exit(code)
"""


def packages_matrix(path: Path, count: int) -> Path:
    """A team matrix whose one stack lists `count` packages, as a generator would write it."""
    with path.open("w") as handle:
        handle.write('extends = "default"\n\n[[torch]]\nversion = "2.14.1"\npackages = [\n')
        handle.writelines(f'  "generated-package-{index}>=1.0",\n' for index in range(count))
        handle.write("]\n")
    return path


def measured(*arguments: object) -> tuple[int, str, int]:
    """(exit code, stderr without the measurement, peak resident memory in bytes) of the CLI in a child process."""
    done = subprocess.run([sys.executable, "-c", _MEASURED, *map(str, arguments)], capture_output=True, text=True, cwd=REPO, timeout=300)  # a hang guard only
    err, _, peak = done.stderr.rstrip().rpartition("\npeak-kb=")
    return done.returncode, err.strip(), int(peak) * 1024


def problems_of(path: Path) -> list[str]:
    try:
        select_targets(Choices(matrix=path))
    except UserError as error:
        return [str(problem) for problem in error.problems]
    return []


@pytest.mark.slow
def test_three_hundred_thousand_packages_cost_the_parse_of_the_file(tmp_path):
    """Refused in one message at the price of reading the file: memory above a small matrix's grows with the file,
    the same per byte at 30,000 and at 300,000 packages, and stays under 300 MB."""
    base = packages_matrix(tmp_path / "base.toml", fields.MAX_ENTRIES + 1)
    code, err, base_peak = measured("matrix", "validate", "--matrix", base)
    assert code == 2
    growth = {}
    for count in (30_000, 300_000):
        path = packages_matrix(tmp_path / f"m{count}.toml", count)
        code, err, peak = measured("matrix", "validate", "--matrix", path)
        assert code == 2 and "Traceback" not in err, err
        assert err.splitlines() == [
            f"error: {path}:5: torch[0].packages: {count:,} entries, more than the "
            f"{fields.MAX_ENTRIES:,} buildkit reads here (a generated list gone wrong?); shorten it"
        ]
        assert peak < 300 << 20, peak
        growth[count] = (peak - base_peak) / (path.stat().st_size - base.stat().st_size)  # bytes of memory per byte of file
    assert growth[300_000] < 20 and growth[300_000] <= 1.5 * max(growth[30_000], 4), growth  # no faster than the file


# (the key a message names, the TOML that sets it one entry past its bound, the bound)
def _list(key: str, count: int, item=lambda index: f'"x{index}"') -> str:
    return f"{key} = [{', '.join(item(index) for index in range(count))}]\n"


PAST_THE_BOUND = {
    "python": (_list("python", fields.MAX_PYTHONS + 1, lambda i: f'"3.{i}"'), fields.MAX_PYTHONS),
    "flavors": (_list("flavors", fields.MAX_FLAVORS + 1), fields.MAX_FLAVORS),
    "companions": (_list("companions", fields.MAX_COMPANIONS + 1), fields.MAX_COMPANIONS),
    "packages": (_list("packages", fields.MAX_ENTRIES + 1), fields.MAX_ENTRIES),
    "os_packages": (_list("os_packages", fields.MAX_ENTRIES + 1), fields.MAX_ENTRIES),
    "rocm_families": (_list("rocm_families", fields.MAX_FAMILIES + 1), fields.MAX_FAMILIES),
    "archs.rocm": ("archs = { rocm = [" + ", ".join(f'"gfx{i:x}"' for i in range(0x900, 0x900 + fields.MAX_ARCHS + 1)) + "] }\n", fields.MAX_ARCHS),
    "exclude": ("exclude = [" + ", ".join(f'{{ python = "3.{i}" }}' for i in range(fields.MAX_RULES + 1)) + "]\n", fields.MAX_RULES),
    "torch[0].cuda": ('[[torch]]\nversion = "2.14.1"\n' + _list("cuda", fields.MAX_BACKEND_VERSIONS + 1, lambda i: f'"13.{i}"'), fields.MAX_BACKEND_VERSIONS),
    "compat.gfx": ("".join(f'[compat.gfx.gfx{i:x}]\nfamily = "x"\n' for i in range(0x2000, 0x2000 + fields.MAX_ENTRIES + 1)), fields.MAX_ENTRIES),
    "compat.torch.2.14.releases": ('[compat.torch."2.14"]\n' + _list("releases", fields.MAX_ENTRIES + 1, lambda i: f'"2.14.{i}"'), fields.MAX_ENTRIES),
    "torch": ("".join(f'[[torch]]\nversion = "2.14.{i}"\n' for i in range(matrix.MAX_STACKS + 1)), matrix.MAX_STACKS),
}


@pytest.mark.parametrize("key", [pytest.param(key, marks=pytest.mark.slow) if key == "exclude" else key for key in PAST_THE_BOUND])
def test_a_list_past_its_bound_is_one_message_with_its_key_size_and_bound(tmp_path, key):
    setting, bound = PAST_THE_BOUND[key]
    path = tmp_path / "m.toml"
    path.write_text('extends = "default"\n' + setting)
    problems = problems_of(path)
    assert len(problems) == 1, problems[:3]
    count = re.search(rf": {re.escape(key)}: ([0-9,]+) ", problems[0])
    assert count and int(count[1].replace(",", "")) > bound and f"more than the {bound:,} buildkit reads here" in problems[0], problems


def test_lists_at_their_bounds_are_read(tmp_path):
    """The bounds refuse only what is past them: a stack of 64 flavors (each with its template) and 1,000 packages
    validates."""
    (tmp_path / "t").mkdir()
    flavors = [f"variant{index}" for index in range(fields.MAX_FLAVORS)]
    for flavor in flavors:
        (tmp_path / "t" / f"{flavor}.Dockerfile.j2").write_text('{% extends "runtime.Dockerfile.j2" %}')
    path = tmp_path / "m.toml"
    path.write_text(
        'extends = "default"\ntemplate_dir = "t"\ninclude = [{ torch = "2.14.1", python = "3.12", backend = "cuda", backend_version = "13.0" }]\n'
        + _list("flavors", fields.MAX_FLAVORS, lambda i: f'"{flavors[i]}"')
        + _list("packages", fields.MAX_ENTRIES, lambda i: f'"package-{i}"')
    )
    assert problems_of(path) == []


@pytest.mark.slow
def test_a_matrix_describing_too_many_targets_is_refused_before_expanding_them(tmp_path):
    """Each stack's lists multiply: its backend versions x Pythons x flavors. Their product over the stacks is
    bounded before a single target is made."""
    (tmp_path / "t").mkdir()
    flavors = [f"variant{index}" for index in range(fields.MAX_FLAVORS)]
    for flavor in flavors:
        (tmp_path / "t" / f"{flavor}.Dockerfile.j2").write_text('{% extends "runtime.Dockerfile.j2" %}')
    pythons = ["3.10", "3.11", "3.12", "3.13", "3.14"]
    per_stack = 4 * len(pythons) * len(flavors)
    stacks = matrix.MAX_TARGETS // per_stack + 1
    lines = [
        'extends = "default"',
        'template_dir = "t"',
        'include = [{ torch = "9.*" }]',
        "rocm_families = []",
        f"flavors = {json.dumps(flavors)}",
        f"python = {json.dumps(pythons)}",
    ]
    for index in range(stacks):
        lines += [
            f'[compat.torch."9.{index}"]',
            f"python = {json.dumps(pythons)}",
            'cuda = ["13.0", "13.2"]',
            'rocm = ["7.2", "7.14"]',
            'torchvision = "1.0"',
            "[[torch]]",
            f'version = "9.{index}.0"',
            'cuda = ["13.0", "13.2"]',
            'rocm = ["7.2", "7.14"]',
        ]
    path = tmp_path / "m.toml"
    path.write_text("\n".join(lines) + "\n")
    problems = problems_of(path)
    assert len(problems) == 1 and problems[0].startswith(f"{path}: torch: the [[torch]] entries describe up to "), problems
    described = int(problems[0].split("describe up to ")[1].split()[0].replace(",", ""))
    assert described >= stacks * per_stack > matrix.MAX_TARGETS  # the generated stacks' own, and the default's inheriting the lists
    assert problems[0].endswith(
        f"targets (each backend version x Python x flavor x ROCm family), more than the {matrix.MAX_TARGETS:,} "
        "buildkit expands at once; split the matrix or narrow its lists"
    )


@pytest.mark.slow
def test_a_template_folder_of_thousands_of_flavors_is_refused_unparsed(tmp_path, monkeypatch):
    """10,000 team flavors once took 50 s and 1.6 GB: past MAX_FOLDER_TEMPLATES the folder is one message, before
    any template is parsed, and the flavors list past its bound is one message too."""
    parsed = []
    real_parse = templates._parse
    monkeypatch.setattr(templates, "_parse", lambda environment, file: parsed.append(file.name) or real_parse(environment, file))
    (tmp_path / "t").mkdir()
    for index in range(matrix_files.MAX_FOLDER_TEMPLATES + 1):
        (tmp_path / "t" / f"f{index}.Dockerfile.j2").write_text('{% extends "runtime.Dockerfile.j2" %}{% block extra %}\n{% endblock %}')
    path = tmp_path / "m.toml"
    path.write_text('extends = "default"\ntemplate_dir = "t"\n' + _list("flavors", 10_000, lambda i: f'"f{i}"'))
    assert problems_of(path) == [
        f"{tmp_path / 't'}: template_dir: holds more than {matrix_files.MAX_FOLDER_TEMPLATES:,} templates "
        "(*.j2 files), more than buildkit reads from a folder: keep the flavors a matrix uses there"
    ]
    assert parsed == []
    (tmp_path / "t" / "f0.Dockerfile.j2").unlink()
    problems = problems_of(path)
    assert len(problems) == 1 and "flavors: 10,000 entries, more than the 64 buildkit reads here" in problems[0]
    assert len(parsed) == len(set(parsed)) and len(parsed) <= matrix_files.MAX_FOLDER_TEMPLATES + 8  # each template parsed once
