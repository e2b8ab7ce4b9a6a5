"""The README and docs/ say what the tool does, and the suite holds them to it.

Every worked example is run: in each document, a ```toml file=PATH block is written into a fresh folder, and
each ```console run block's `$ buildkit ...` lines run there through the CLI, in order; what the block shows
after a command is its standard output, exactly (notes go to stderr and are not shown). `$ ls PATH` lists a
folder. (A ```console block without `run` shows a session against a real registry or GPU host.) Links
between documents point at files and headings that exist; the README stays a front page.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_BLOCK = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```$", re.M | re.S)
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _examples(document: Path) -> list[tuple[str, str, str]]:
    return [(kind, options.strip(), body) for kind, options, body in _BLOCK.findall(document.read_text())]


def _runnable(document: Path) -> bool:
    return any(kind == "console" and options == "run" for kind, options, _ in _examples(document))


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lowercase, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("document", [d for d in DOCUMENTS if _runnable(d)], ids=lambda d: d.name)
def test_worked_examples_print_what_the_text_shows(cli, tmp_path, monkeypatch, document):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("BUILDKIT_MATRIX", raising=False)
    for kind, options, body in _examples(document):
        if kind == "toml" and options.startswith("file="):
            path = tmp_path / options.removeprefix("file=")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(body)
        if kind != "console" or options != "run":
            continue
        commands = re.split(r"(?m)^\$ ", body)[1:]
        assert commands, f"{document.name}: a console block without a $ command"
        for chunk in commands:
            line, _, shown = chunk.partition("\n")
            words = shlex.split(line)
            if words[0] == "ls":
                printed = "".join(f"{p.name}\n" for p in sorted((tmp_path / words[1]).iterdir()))
            else:
                assert words[0] == "buildkit", f"{document.name}: only buildkit and ls run here: {line}"
                result = cli(*words[1:])
                assert result.code == 0, f"{document.name}: `{line}` exited {result.code}: {result.err}"
                printed = result.out
            assert printed == shown, f"{document.name}: `{line}` printed:\n{printed}"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: d.name)
def test_links_point_at_files_and_headings_that_exist(document):
    for target in _LINK.findall(document.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        linked = (document.parent / path).resolve() if path else document
        assert linked.exists(), f"{document.name} links to {target}, which does not exist"
        if anchor and linked.suffix == ".md":
            headings = {_slug(h) for h in re.findall(r"^#+ (.+)$", linked.read_text(), re.M)}
            assert anchor in headings, f"{document.name} links to {target}: no such heading"


def test_the_worked_examples_are_marked_to_run():
    assert {d.name for d in DOCUMENTS if _runnable(d)} >= {"README.md", "matrix-reference.md"}


def test_the_readme_is_a_front_page_with_its_two_set_up_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    commands = [body.strip() for kind, _, body in _examples(ROOT / "README.md") if kind == "sh" and "venv" in body]
    assert commands[:2] == [
        "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/buildkit matrix validate && .venv/bin/buildkit plan",
        "python3 -m venv .venv && .venv/bin/pip install '.[test]' && .venv/bin/python -m pytest",
    ]
    # every document of docs/ is reachable from the front page
    linked = {Path(target.partition("#")[0]).name for target in _LINK.findall(text)}
    assert {d.name for d in DOCUMENTS[1:] if d.suffix == ".md"} <= linked


def test_the_matrix_reference_tables_are_the_generated_ones():
    from buildkit.ui.matrix_schema import reference_markdown

    assert reference_markdown() in (ROOT / "docs" / "matrix-reference.md").read_text(), "regenerate the tables: buildkit matrix schema --markdown"


def test_the_command_reference_is_the_generated_one():
    """docs/commands.md holds the reference generated from the parser: a new, renamed or reworded option, or a
    changed default, fails here until the page is regenerated."""
    from buildkit.cli import build_parser
    from buildkit.ui.command_reference import command_reference

    assert command_reference(build_parser()) in (ROOT / "docs" / "commands.md").read_text(), (
        "regenerate it: python -m buildkit.cli.reference --write docs/commands.md"
    )


def test_the_command_reference_names_every_option_of_every_command():
    """Read from the page and the parser apart: every command that runs has its section on docs/commands.md,
    and every flag it takes (bar --help and --debug, which the page names once, and hidden old spellings) is in
    that section's table."""
    import argparse

    from buildkit.cli import build_parser

    page = (ROOT / "docs" / "commands.md").read_text()
    sections = dict(re.findall(r"^### `(buildkit [^`]+)`\n(.*?)(?=^### |\Z)", page, re.M | re.S))

    def leaves(parser, words):
        subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subcommands:
            yield words, parser
        for action in subcommands:
            for name, subparser in action.choices.items():
                yield from leaves(subparser, f"{words} {name}")

    commands = dict(leaves(build_parser(), "buildkit"))
    assert set(commands) == set(sections), set(commands) ^ set(sections)
    for words, parser in commands.items():
        flags = {flag for action in parser._actions if action.help != argparse.SUPPRESS for flag in action.option_strings}
        for flag in flags - {"-h", "--help", "--debug"}:
            assert re.search(rf"^\| [^|]*`{re.escape(flag)}`", sections[words], re.M), f"{words}: {flag} is not in docs/commands.md"


@pytest.mark.slow  # parses every module of the package
def test_the_module_map_is_the_generated_one():
    """docs/development.md's module map is generated from the docstrings: a new, moved or renamed module, or a
    reworded summary, fails here until the page is regenerated."""
    from testkit.module_map import module_map

    assert module_map() in (ROOT / "docs" / "development.md").read_text(), "regenerate it: python -m testkit.module_map --write docs/development.md"


@pytest.mark.slow  # copies the package and parses it three times
def test_the_module_map_names_every_module_and_can_fall_behind(tmp_path):
    """Read apart from the generator: every module file of the package is on the page; and a module added to a
    copy of the package, or a summary changed, makes a map the page does not hold."""
    import shutil

    import buildkit
    from testkit.module_map import module_map

    package = Path(buildkit.__file__).parent
    page = (ROOT / "docs" / "development.md").read_text()
    for module in package.rglob("*.py"):
        if module.name != "__init__.py" and (module.parent / "__init__.py").exists():
            assert f"- `{module.name}`: " in page, f"{module.relative_to(package)} is not in docs/development.md's module map"
    copy = tmp_path / "buildkit"
    shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert module_map(copy) == module_map()
    (copy / "core" / "targets" / "new_rule.py").write_text('"""A rule nobody has documented yet."""\n')
    assert module_map(copy) not in page and "`new_rule.py`: A rule nobody has documented yet." in module_map(copy)
    (copy / "core" / "targets" / "new_rule.py").write_text("X = 1\n")
    with pytest.raises(ValueError, match=r"new_rule\.py: no docstring"):
        module_map(copy)
