"""The command reference of docs/commands.md, generated from the argparse parser itself.

Every command, every option with its value, default and help line, so the reference cannot drift from the tool (a
test compares them).

The page keeps its prose around the generated part, which lies between BEGIN and END (replace_reference).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

BEGIN = "<!-- generated from the parser by `python -m buildkit.cli.reference --write docs/commands.md`: edit the options' help, not this text -->"
END = "<!-- end of the generated reference -->"
_EVERYWHERE = {"-h", "--help", "--debug"}  # every command takes them; the page says so once
_TYPE_METAVARS = {"Path": "PATH", "positive": "N", "int": "N"}  # what a value without a metavar of its own is


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each subcommand, in the order they were added, hidden ones left out."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, subparser in action.choices.items():
                if name in helps:
                    yield name, helps[name], subparser


def _commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], str, argparse.ArgumentParser]]:
    """Every command that runs (a parser without subcommands of its own), with its words and help."""
    for name, help_text, subparser in _subcommands(parser):
        if any(True for _ in _subcommands(subparser)):
            yield from _commands(subparser, (*words, name))
        else:
            yield (*words, name), help_text, subparser


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _value(action: argparse.Action) -> str:
    if action.nargs == 0:
        return ""
    if action.choices is not None:
        return " \\| ".join(f"`{choice}`" for choice in action.choices)
    metavar = action.metavar if isinstance(action.metavar, str) else _TYPE_METAVARS.get(getattr(action.type, "__name__", ""), action.dest.upper())
    repeated = " (repeatable)" if isinstance(action, argparse._AppendAction) else ""
    return f"`{metavar}`{repeated}"


def _default(action: argparse.Action) -> str:
    default = action.default
    if default is None or default is argparse.SUPPRESS or default is False or default == [] or action.nargs == 0:
        return ""
    return f"`{default}`"


def _flags(action: argparse.Action) -> str:
    if action.option_strings:
        return ", ".join(f"`{flag}`" for flag in action.option_strings)
    return f"`{action.metavar or action.dest}`" + (" (optional)" if action.nargs in ("?", "*") else "")


def _options(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for action in parser._actions:
        if action.help == argparse.SUPPRESS or _EVERYWHERE & set(action.option_strings):
            continue
        rows.append(f"| {_flags(action)} | {_value(action)} | {_default(action)} | {_cell(action.help or '')} |")
    return rows


def command_reference(parser: argparse.ArgumentParser) -> str:
    """Markdown: per command its words, what it does and a table of its arguments and options."""
    lines = [BEGIN, ""]
    for words, help_text, subparser in _commands(parser):
        lines += [f"### `{' '.join((parser.prog, *words))}`", "", _cell(help_text[:1].upper() + help_text[1:]) + ".", ""]
        rows = _options(subparser)
        if rows:
            lines += ["| argument or option | value | default | what it does |", "|---|---|---|---|", *rows, ""]
    return "\n".join([*lines, END]) + "\n"


def replace_reference(page: str, reference: str) -> str:
    """The page with its generated part (BEGIN to END, markers included) replaced by `reference`."""
    start, end = page.index(BEGIN), page.index(END) + len(END) + 1
    return page[:start] + reference + page[end:]
