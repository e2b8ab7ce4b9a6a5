"""Command lines printed for a person to paste into a shell: one rule for all of them.

Every argument is shell-quoted (shlex.quote), whatever it holds: a group name read from a host tree's
/etc/group (`render;touch${IFS}X;#`), an image reference, a path, a GPU arch. Only words buildkit writes
itself to be expanded by the shell (`"$USER"`) are Expansions, printed as they are. `doctor` and `detect`
fixes, `run --print`, the line `bake` prints and every hint naming a command are built here; a test feeds
shell syntax through each source into each of them and runs the printed line in a real shell.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass


@dataclass(frozen=True)
class Expansion:
    """A shell word written by buildkit, never from input, that the shell is meant to expand."""

    word: str


USER = Expansion('"$USER"')


def command_line(*words: str | Expansion) -> str:
    """The words as one command line a POSIX shell splits back into exactly these words."""
    return " ".join(word.word if isinstance(word, Expansion) else shlex.quote(word) for word in words)


def pasted(*words: str | Expansion) -> str:
    """command_line() set off in backticks, as findings and hints quote a command inside a sentence."""
    return f"`{command_line(*words)}`"


def assignment(name: str, value: str) -> str:
    """NAME=value for an environment variable, the value quoted."""
    return f"{name}={shlex.quote(value)}"
