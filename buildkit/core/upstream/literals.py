"""Python modules from a wheel read as data: the literal values of their top-level assignments, never imported or
executed, within bounds fixed before anything is parsed.

torch/version.py (`__version__ = '2.15.0+cu132'`, `cuda: Optional[str] = '13.2'`) and tables such as
PYTORCH_RELEASES_CODE_CC in torch/cuda/__init__.py come from an index someone else serves. Parsing the whole module
with `ast` costs what its author wants: a 5,000-deep expression raised RecursionError in ast.parse, and a 50 MB
module exhausted memory. So a module is at most MAX_MODULE_CHARS, and only the assignment asked for is parsed:
- module_constants: each top-level line `NAME = <scalar>` (an optional annotation; the scalar a plain string, a
  number, True, False or None, at most MAX_SCALAR_CHARS) is matched by a pattern that cannot backtrack and read by
  ast.literal_eval, which for a scalar cannot recurse;
- assigned_literal: the bracketed literal after `NAME =` (a dict, list, set or tuple) is cut out by a scan that
  counts its brackets and stops past `max_chars` or `max_depth`, so ast only ever sees a snippet of bounded size and
  nesting.
Pure: text in, values out; one LiteralError sentence for anything past a bound or not a literal.
"""

from __future__ import annotations

import ast
import re

MAX_MODULE_CHARS = 1 << 20  # torch/cuda/__init__.py is about 80 KB, torch/version.py under 1 KB
MAX_SCALAR_CHARS = 4096
MAX_LITERAL_CHARS = 64 << 10
MAX_LITERAL_DEPTH = 8
_STRING = rf"'(?:[^'\\\n]|\\.){{0,{MAX_SCALAR_CHARS}}}'|\"(?:[^\"\\\n]|\\.){{0,{MAX_SCALAR_CHARS}}}\""
_NUMBER = r"[-+]?[0-9][0-9_]{0,63}(?:\.[0-9_]{0,64})?(?:[eE][-+]?[0-9]{1,4})?"
# A top-level assignment line: the name, an annotation (no `=` in it), then the value up to the end of the line.
_ASSIGNMENT = re.compile(r"^(?P<name>[A-Za-z_]\w{0,99})[ \t]*(?::[^=\n]{0,200})?=[ \t]*", re.MULTILINE)
_SCALAR = re.compile(rf"(?P<value>{_STRING}|{_NUMBER}|True|False|None)[ \t]*(?:#[^\n]{{0,{MAX_SCALAR_CHARS}}})?\r?(?:\n|$)")
_OPENERS, _CLOSERS = "{[(", "}])"
ABSENT = object()  # assigned_literal's answer for a module without the assignment


class LiteralError(ValueError):
    """A module or a value past its bound, or not a literal; the message is one sentence."""


def _bounded(text: str, shown: str) -> None:
    if len(text) > MAX_MODULE_CHARS:
        raise LiteralError(f"{shown} is {len(text):,} characters, more than the {MAX_MODULE_CHARS:,} read of a module")


def module_constants(text: str, shown: str = "the module") -> dict[str, object]:
    """Every top-level `NAME = <scalar>` of a module, by name (the last assignment wins, as when it runs). Other
    lines, and assignments of anything but a scalar literal, are left out."""
    _bounded(text, shown)
    found: dict[str, object] = {}
    for assignment in _ASSIGNMENT.finditer(text):
        scalar = _SCALAR.match(text, assignment.end())
        if scalar is not None:
            found[assignment["name"]] = ast.literal_eval(scalar["value"])
    return found


def assigned_literal(text: str, name: str, shown: str = "the module", max_chars: int = MAX_LITERAL_CHARS, max_depth: int = MAX_LITERAL_DEPTH) -> object:
    """The literal a top-level `NAME = ...` (or `NAME: TYPE = ...`) assigns: a scalar, or a bracketed literal of at
    most `max_chars` characters nested at most `max_depth` deep; ABSENT when the module assigns no such name."""
    _bounded(text, shown)
    for assignment in _ASSIGNMENT.finditer(text):
        if assignment["name"] != name:
            continue
        start = assignment.end()
        scalar = _SCALAR.match(text, start)
        if scalar is not None:
            return ast.literal_eval(scalar["value"])
        return literal(cut_literal(text, start, name, max_chars, max_depth), name)
    return ABSENT


def cut_literal(text: str, start: int, name: str = "the value", max_chars: int = MAX_LITERAL_CHARS, max_depth: int = MAX_LITERAL_DEPTH) -> str:
    """The bracketed literal that starts at `start`: its brackets counted (outside strings and comments) until the
    first closes, refused past `max_chars` characters or `max_depth` levels before anything parses it. Its strings
    hold no escape and no line break (keys and names of a table need neither, and a string then ends where it
    seems to)."""
    if start >= len(text) or text[start] not in _OPENERS:
        raise LiteralError(f"{name} is not a literal table (nor a string or a number)")
    depth, quote, position = 0, "", start
    end = min(len(text), start + max_chars)
    while position < end:
        char = text[position]
        if quote:
            if char in "\\\n":
                raise LiteralError(f"{name} holds a string with an escape or a line break")
            if char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char == "#":
            newline = text.find("\n", position, end)
            position = end if newline < 0 else newline
            continue
        elif char in _OPENERS:
            depth += 1
            if depth > max_depth:
                raise LiteralError(f"{name} is nested deeper than {max_depth} levels")
        elif char in _CLOSERS:
            depth -= 1
            if depth == 0:
                return text[start : position + 1]
        position += 1
    raise LiteralError(f"{name} does not end within {max_chars:,} characters")


def literal(snippet: str, name: str = "the value") -> object:
    """ast.literal_eval of a snippet cut_literal bounded (its size and nesting are what the parser and the evaluator
    recurse on)."""
    try:
        return ast.literal_eval(ast.parse(snippet.strip(), mode="eval"))
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError) as error:
        raise LiteralError(f"{name} is not a literal ({type(error).__name__})") from None
