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
    build.add_argument("--gpu", choices=GPU_MODES, default="auto", help=GPU_HELP)

    test = commands.add_parser("test", help="smoke-test images: backend build check and, with a GPU, real kernels")
    test.add_argument("images", nargs="*", metavar="IMAGE", help="image references (default: the selected targets' images)")
    _selection_options(test)
    test.add_argument("--gpu", choices=GPU_MODES, default="auto", help=GPU_HELP)
    test.add_argument("--json", type=Path, help="write the verdicts and probe reports as JSON")
    test.add_argument("--timeout", type=_positive, default=300, help="seconds the probe may run per image (default 300)")

    parity = commands.add_parser("parity", help="compare a pair's CUDA and ROCm twins: OS, Python, packages")
    parity.add_argument("subjects", nargs="+", metavar="PAIR | IMAGE IMAGE", help="a pair key from the matrix, or two images")
    parity.add_argument("--matrix", type=Path, help="matrix file (default: the matrix shipped with buildkit)")
    parity.add_argument("--json", type=Path, help="write the differences as JSON")
    return parser


GPU_MODES = ("auto", "require", "skip")
GPU_HELP = "auto: run kernels when the host has the image's GPU vendor (default); require: fail without one; skip: never"


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
    from buildkit.build import BuildOptions, build_targets
    from buildkit.build_secrets import IndexSettings
    from buildkit.console import LiveDisplay, PlainDisplay
    from buildkit.planning import select_targets
    from buildkit.provenance import created_now, source_revision
    from buildkit.report import run_markdown, write_reports

    selection = select_targets(args.matrix, args.vendor, args.select)
    if not selection.rendered:
        raise UserError("no target matches the selection; see `buildkit plan` with the same options")
    matrix_folder = args.matrix.resolve().parent if args.matrix else Path.cwd()
    options = BuildOptions(
        out=args.out, jobs=args.jobs, no_cache=args.no_cache, fail_fast=args.fail_fast, network=args.network,
        efficiency=not args.no_efficiency, created=created_now(), revision=source_revision(matrix_folder), gpu=args.gpu,
    )
    settings = IndexSettings(args.pip_conf, args.index_url, tuple(args.extra_index_url), args.ca_bundle)
    _print_notes(selection.notes, err)
    display = LiveDisplay(err) if err.is_terminal else PlainDisplay(err)
    with display:
        run, engine_description = build_targets(
            selection.rendered, options, settings, args.docker, display, selection.matrix.compat.vendor_packages,
        )
    report = args.report or args.out / "report.json"
    markdown = write_reports(run, engine_description, report)
    out.print(run_markdown(run), highlight=False, markup=False)
    err.print(f"report: {report} and {markdown}", highlight=False)
    if run.engine_lost:
        err.print("error: the Docker engine stopped during the build; restart it and run the build again", highlight=False)
    if run.interrupted:
        err.print("interrupted: running builds were stopped", highlight=False)
        return 130
    return 1 if run.failed else 0


def cmd_test(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.adapters import engine
    from buildkit.adapters.host import gpu_access
    from buildkit.planning import select_targets
    from buildkit.report import verdict_json
    from buildkit.smoke.check import smoke_test

    images = list(args.images) or [item.target.tags[0] for item in select_targets(args.matrix, args.vendor, args.select).rendered]
    if not images:
        raise UserError("no image to test: name images, or select targets whose images were built")
    client = engine.connect()
    access = gpu_access()
    verdicts = []
    for image in images:
        err.print(f"testing {image}", highlight=False)
        verdicts.append(smoke_test(client, image, args.gpu, access, args.timeout))
    table = Table(title=f"smoke tests (--gpu {args.gpu})", title_justify="left")
    for column in ("image", "torch", "verdict", "kernels", "failures"):
        table.add_column(column, overflow="fold")
    for verdict in verdicts:
        table.add_row(
            verdict.image, verdict.torch or "-", "pass" if verdict.passed else "FAIL", verdict.kernels,
            "\n".join(verdict.failures) or "-",
        )
    out.print(table)
    if args.json:
        args.json.write_text(json.dumps([verdict_json(v) for v in verdicts], indent=2) + "\n", encoding="utf-8")
    return 0 if all(v.passed for v in verdicts) else 1


def cmd_parity(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.adapters import engine
    from buildkit.planning import select_targets
    from buildkit.smoke.check import probe_report
    from buildkit.smoke.parity import compare

    selection = select_targets(args.matrix)
    if len(args.subjects) == 1:
        twins = [item.target for item in selection.rendered if item.target.pair == args.subjects[0]]
        if len(twins) != 2:
            known = sorted({item.target.pair for item in selection.rendered if item.target.pair})
            raise UserError(f"{args.subjects[0]!r} is not a pair of this matrix; pairs: {', '.join(known[:8])}{' …' if len(known) > 8 else ''}")
        images = [twin.tags[0] for twin in sorted(twins, key=lambda t: t.backend)]
    elif len(args.subjects) == 2:
        images = list(args.subjects)
    else:
        raise UserError("parity compares one pair (PAIR) or two images (IMAGE IMAGE)")
    client = engine.connect()
    reports = [probe_report(client, image) for image in images]
    result = compare(images[0], reports[0], images[1], reports[1], selection.matrix.compat.vendor_packages)
    if args.json:
        args.json.write_text(json.dumps({"images": images, "passed": result.passed, "differences": list(result.differences)}, indent=2) + "\n")
    if result.passed:
        out.print(f"parity: {images[0]} and {images[1]} hold the same OS, Python and packages (vendor runtimes aside)", highlight=False)
        return 0
    out.print(f"parity: {len(result.differences)} difference(s) between {images[0]} and {images[1]}:", highlight=False)
    for difference in result.differences:
        out.print(f"  - {difference}", highlight=False, markup=False)
    return 1


COMMANDS = {
    ("matrix", "validate"): cmd_matrix_validate,
    ("plan", None): cmd_plan,
    ("render", None): cmd_render,
    ("build", None): cmd_build,
    ("test", None): cmd_test,
    ("parity", None): cmd_parity,
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
