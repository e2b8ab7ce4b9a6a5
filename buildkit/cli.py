"""The `buildkit` command: parse arguments, call the library, print. No logic of its own."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from buildkit import __version__
from buildkit.errors import UserError

VENDOR_CHOICES = ("nvidia", "amd", "all")
FORMATS = ("table", "json", "github")


class _Parser(argparse.ArgumentParser):
    """argparse with exit code 2 and one clear line for usage errors (its default already exits 2)."""


def _selection_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--matrix", type=Path, help="matrix file (default: the matrix shipped with buildkit)")
    parser.add_argument("--vendor", choices=VENDOR_CHOICES, default="all", help="nvidia, amd or all (default)")
    parser.add_argument(
        "--select", action="append", default=[], metavar="KEY=GLOB",
        help="keep targets whose KEY (torch, python, backend, backend_version, flavor, vendor, id) matches GLOB; repeatable, all must match",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="buildkit", description="Matched NVIDIA CUDA and AMD ROCm PyTorch images from one TOML matrix.")
    parser.add_argument("--version", action="version", version=f"buildkit {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    matrix = commands.add_parser("matrix", help="work with matrix files")
    matrix_commands = matrix.add_subparsers(dest="matrix_command", required=True, metavar="SUBCOMMAND")
    validate = matrix_commands.add_parser("validate", help="check a matrix: every problem, or a count of its targets")
    validate.add_argument("--matrix", type=Path, help="matrix file (default: the matrix shipped with buildkit)")

    plan = commands.add_parser("plan", help="list the targets a matrix expands to")
    _selection_options(plan)
    plan.add_argument("--format", choices=FORMATS, default="table", help="table (default), json, or github (an Actions matrix)")

    render = commands.add_parser("render", help="write one Dockerfile per target into a folder tree")
    _selection_options(render)
    render.add_argument("--out", type=Path, default=Path("dist"), help="output folder (default: dist)")
    return parser


def _print_notes(notes, console: Console) -> None:
    for note in notes:
        console.print(f"note: {note}", highlight=False, markup=False)


def cmd_matrix_validate(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.planning import select_targets

    selection = select_targets(args.matrix)
    counts = {vendor: sum(1 for r in selection.rendered if r.target.vendor == vendor) for vendor in ("nvidia", "amd")}
    _print_notes(selection.notes, err)
    out.print(f"ok: {len(selection.rendered)} targets ({counts['nvidia']} nvidia, {counts['amd']} amd)", highlight=False)
    return 0


def cmd_plan(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.planning import github_matrix, select_targets, target_json

    selection = select_targets(args.matrix, args.vendor, args.select)
    if args.format == "json":
        print(json.dumps([target_json(item) for item in selection.rendered], indent=2))
    elif args.format == "github":
        print(json.dumps(github_matrix(selection), separators=(",", ":")))
    else:
        table = Table(title=f"{len(selection.rendered)} targets", title_justify="left")
        for column in ("id", "vendor", "tags", "pair", "fingerprint"):
            table.add_column(column, overflow="fold")
        for item in selection.rendered:
            target = item.target
            table.add_row(target.id, target.vendor, "\n".join(target.tag_names), target.pair or "-", item.fingerprint[:12])
        out.print(table)
        _print_notes(selection.notes, err)
    return 0


def cmd_render(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.dist import write_tree
    from buildkit.planning import select_targets

    selection = select_targets(args.matrix, args.vendor, args.select)
    written = write_tree(selection, args.out)
    _print_notes(selection.notes, err)
    out.print(f"rendered {len(written)} Dockerfiles into {args.out}/ (index: {args.out / 'plan.json'})", highlight=False)
    return 0


COMMANDS = {
    ("matrix", "validate"): cmd_matrix_validate,
    ("plan", None): cmd_plan,
    ("render", None): cmd_render,
}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Piped output is read by people too: give tables room instead of rich's 80-column default.
    width = None if sys.stdout.isatty() else 160
    out = Console(width=width, soft_wrap=True)
    err = Console(stderr=True, soft_wrap=True)
    handler = COMMANDS[(args.command, getattr(args, f"{args.command}_command", None))]
    try:
        return handler(args, out, err)
    except UserError as error:
        for problem in error.problems:
            err.print(f"error: {problem}", highlight=False, markup=False)
        return error.exit_code
    except KeyboardInterrupt:
        err.print("interrupted", highlight=False)
        return 130


if __name__ == "__main__":
    sys.exit(main())
