"""Matrix files as text: their bytes decoded, their TOML parsed, every error located by file and line.

The file loader (buildkit.adapters.files.matrix) reads each file once and hands its bytes here; what comes
back is the parsed table and a line index, which validation later uses to locate each problem. Matrix files
come from forks and pull requests: whatever their bytes, the answer is data or one UserError naming the file.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from collections.abc import Mapping

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

__all__ = ["LineIndex", "TextFile", "decode", "line_of", "parse_toml", "tomllib"]

_TOML_LINE_RE = re.compile(r"\(at line (\d+), column \d+\)")
_HEADER_RE = re.compile(r"\s*(\[\[?)(.+?)\]\]?\s*(?:#.*)?")
_KEY_RE = re.compile(r"\s*((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*=")
_DOTTED_PART_RE = re.compile(r"\"([^\"]*)\"|'([^']*)'|([A-Za-z0-9_-]+)")
_INDEX_RE = re.compile(r"\[\d+\]$")
# A decimal integer Python refuses to convert (sys.get_int_max_str_digits, 4,300 digits by default).
_LONG_INTEGER_RE = re.compile(r"(?<![\w.])[+-]?[0-9](?:_?[0-9]){4300,}")


def _dotted(text: str) -> str:
    return ".".join(next(part for part in match.groups() if part is not None) for match in _DOTTED_PART_RE.finditer(text))


def line_of(lines: Mapping[str, int], key: str) -> int | None:
    """The line of a key path such as torch[2].rocm[1], or of the nearest enclosing key that has one. A path
    cut short for display (ending in "…") is found by its beginning."""
    if key.endswith("…"):
        key = next((known for known in lines if known.startswith(key[:-1])), key[:-1])
    while key:
        if key in lines:
            return lines[key]
        trimmed = _INDEX_RE.sub("", key)
        key = trimmed if trimmed != key else key.rpartition(".")[0]
    return None


class LineIndex:
    """Key path -> line, built in one pass over a TOML text (tomllib keeps no positions), so locating
    any number of problems costs one scan of the file."""

    def __init__(self, text: str) -> None:
        self.lines: dict[str, int] = {}
        counts: dict[str, int] = {}
        prefix = ""
        for number, line in enumerate(text.splitlines(), start=1):
            header = _HEADER_RE.fullmatch(line)
            if header and not _KEY_RE.match(line):
                name = _dotted(header.group(2))
                if header.group(1) == "[[":
                    counts[name] = counts.get(name, -1) + 1
                    name = f"{name}[{counts[name]}]"
                prefix = name
                self.lines.setdefault(prefix, number)
                continue
            key = _KEY_RE.match(line)
            if key:
                path = _dotted(key.group(1))
                self.lines.setdefault(f"{prefix}.{path}" if prefix else path, number)

    def line(self, key: str) -> int | None:
        return line_of(self.lines, key)

    def key_at(self, line: int) -> str:
        """The key whose value holds `line`: the last key written on or before it ("" before the first)."""
        written = [(number, key) for key, number in self.lines.items() if number <= line]
        return max(written, key=lambda item: (item[0], len(item[1])))[1] if written else ""


@dataclass(frozen=True)
class TextFile:
    """One matrix file, parsed."""

    shown: str  # as messages name it
    data: dict[str, Any]
    lines: LineIndex


def decode(data: bytes, shown: str) -> str:
    try:
        # utf-8-sig: editors on some systems start UTF-8 files with a byte-order mark, which TOML forbids
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise UserError(Problem(shown, f"is not UTF-8 text (byte {error.start}): save it as UTF-8", line=line)) from None


def parse_toml(data: bytes, shown: str) -> TextFile:
    text = decode(data, shown)
    try:
        parsed = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        message = str(error)
        line = _TOML_LINE_RE.search(message)
        raise UserError(
            Problem(
                shown,
                f"TOML syntax error: {_TOML_LINE_RE.sub('', message).strip()}",
                line=int(line.group(1)) if line else None,
            )
        ) from None
    except RecursionError:
        raise UserError(Problem(shown, "TOML nesting is too deep to be a matrix (arrays or tables nested hundreds of levels)")) from None
    except ValueError:  # tomllib's int() of a decimal longer than Python converts
        raise UserError(_long_integer(text, shown)) from None
    return TextFile(shown, parsed, LineIndex(text))


def _long_integer(text: str, shown: str) -> Problem:
    limit = f"{sys.get_int_max_str_digits():,}" if hasattr(sys, "get_int_max_str_digits") else "4,300"
    found = _LONG_INTEGER_RE.search(text)
    line = text.count("\n", 0, found.start()) + 1 if found else None
    key = LineIndex(text).key_at(line) if line else ""
    return Problem(shown, f"an integer of more than {limit} digits: no key takes one; write the number the key expects", key=key, line=line)
