"""Regenerate the command reference of docs/commands.md from the parser:
`python -m buildkit.cli.reference --write docs/commands.md` (without --write, print it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from buildkit.cli.program import build_parser
from buildkit.ui.command_reference import command_reference, replace_reference


def main(argv: list[str] | None = None) -> int:
    arguments = argparse.ArgumentParser(description="print the command reference, or write it into its page")
    arguments.add_argument("--write", type=Path, metavar="PAGE", help="replace the page's generated reference")
    args = arguments.parse_args(argv)
    reference = command_reference(build_parser())
    if args.write:
        args.write.write_text(replace_reference(args.write.read_text(encoding="utf-8"), reference), encoding="utf-8")
    else:
        sys.stdout.write(reference)
    return 0


if __name__ == "__main__":
    sys.exit(main())
