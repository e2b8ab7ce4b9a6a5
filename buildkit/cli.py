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

    build = commands.add_parser("build", help="build, tag and report the selected targets on BuildKit")
    _selection_options(build)
    build.add_argument("-j", "--jobs", type=_positive, default=1, help="targets built at once (default 1)")
    build.add_argument("--no-cache", action="store_true", help="build every step again")
    build.add_argument("--fail-fast", action="store_true", help="stop all builds at the first failure")
    build.add_argument("--report", type=Path, help="JSON report path (default: OUT/report.json; Markdown next to it)")
    build.add_argument("--out", type=Path, default=Path("buildkit-out"), help="logs, build contexts, reports (default: buildkit-out)")
    build.add_argument("--docker", help="docker CLI to build with (default: $BUILDKIT_DOCKER, else the first BuildKit-capable one on PATH)")
    build.add_argument("--network", help="network mode for RUN steps, e.g. host (needed where pip reaches the network only from the host)")
    build.add_argument("--pip-conf", type=Path, help="pip.conf for a private index, passed as a BuildKit secret")
    build.add_argument("--index-url", help="pip index URL (credentials allowed), passed as a BuildKit secret")
    build.add_argument("--extra-index-url", action="append", default=[], help="extra pip index URL (credentials allowed); repeatable")
    build.add_argument("--ca-bundle", type=Path, help="CA bundle pip should trust, passed as a BuildKit secret")
    build.add_argument("--no-efficiency", action="store_true", help="skip measuring image size against its filesystem")
    return parser


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {value!r}")
    return number


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


def cmd_build(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.adapters import engine
    from buildkit.build import BuildOptions, Builder
    from buildkit.build_secrets import IndexSettings, build_secrets
    from buildkit.console import LiveDisplay, PlainDisplay
    from buildkit.planning import select_targets
    from buildkit.provenance import created_now, source_revision
    from buildkit.report import run_markdown, write_reports

    selection = select_targets(args.matrix, args.vendor, args.select)
    if not selection.rendered:
        raise UserError("no target matches the selection; see `buildkit plan` with the same options")
    matrix_folder = (args.matrix or Path.cwd()).resolve()
    options = BuildOptions(
        out=args.out, jobs=args.jobs, no_cache=args.no_cache, fail_fast=args.fail_fast, network=args.network,
        efficiency=not args.no_efficiency, created=created_now(),
        revision=source_revision(matrix_folder if matrix_folder.is_dir() else matrix_folder.parent),
    )
    settings = IndexSettings(args.pip_conf, args.index_url, tuple(args.extra_index_url), args.ca_bundle)
    with build_secrets(settings) as (secrets, redact):  # bad secret inputs fail before the engine is touched
        cli = engine.detect_buildkit(args.docker)
        client = engine.connect()
        _print_notes(selection.notes, err)
        err.print(f"building {len(selection.rendered)} targets with {cli.describe()}, {args.jobs} at a time", highlight=False)
        if err.is_terminal:
            with LiveDisplay(err) as display:
                run = Builder(client, cli, options, secrets, redact, display).run(selection.rendered)
        else:
            run = Builder(client, cli, options, secrets, redact, PlainDisplay(err)).run(selection.rendered)
    report = args.report or args.out / "report.json"
    markdown = write_reports(run, cli.describe(), report)
    out.print(run_markdown(run), highlight=False, markup=False)
    err.print(f"report: {report} and {markdown}", highlight=False)
    if run.engine_lost:
        err.print("error: the Docker engine stopped during the build; restart it and run the build again", highlight=False)
    if run.interrupted:
        err.print("interrupted: running builds were stopped", highlight=False)
        return 130
    return 1 if run.failed else 0


COMMANDS = {
    ("matrix", "validate"): cmd_matrix_validate,
    ("plan", None): cmd_plan,
    ("render", None): cmd_render,
    ("build", None): cmd_build,
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
