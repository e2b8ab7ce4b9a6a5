"""Shell completion scripts, generated from the command's own argparse parser by shtab.

So a new command or option completes without anyone writing completion code."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterator

SHELLS = ("bash", "zsh", "fish")


def completion_script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The script for `shell`; options and arguments that take a path complete file names."""
    import shtab  # only this command needs it

    for action in _actions(parser):
        if action.type is Path:
            action.complete = shtab.FILE  # type: ignore[attr-defined]  # shtab's documented hook: an attribute it reads off the Action
    return shtab.complete(parser, shell=shell)


def _actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        yield action
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                yield from _actions(subparser)
