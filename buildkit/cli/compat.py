"""`buildkit compat check`: the compatibility data against what PyPI and the wheel indexes publish."""

from __future__ import annotations

import sys
from pathlib import Path

from buildkit.cli.options import EXIT_DIFFERS, EXIT_FAILED, EXIT_OK, Commands, Invocation, command
from buildkit.errors import Problem, UserError
from buildkit.ui import views


def add_compat(commands: Commands) -> None:
    compat = command(commands, "compat", None, help="work with the compatibility data")
    compat_commands = compat.add_subparsers(dest="compat_command", required=True, metavar="SUBCOMMAND")
    check = command(
        compat_commands,
        "check",
        run_check,
        help=f"compare the compatibility data with what PyPI and the wheel indexes publish; exit {EXIT_DIFFERS} when they differ, "
        f"{EXIT_FAILED} when an index cannot be read",
    )
    check.add_argument("--index", metavar="URL|none", help="PyTorch's wheel index (default: the data's [wheel_index] url); none leaves it out")
    check.add_argument(
        "--pypi",
        metavar="URL|none",
        help="the package index for torch's, torchvision's and torchaudio's releases (default: the one pip uses); none leaves it out",
    )
    check.add_argument(
        "--layout-index",
        action="append",
        default=[],
        metavar="LAYOUT=URL|none",
        help="the index of a thin-ROCm layout with one of its own (default: the data's, for the layouts in use)",
    )
    check.add_argument("--deep", action="store_true", help="also read the newest releases' GPU libraries for the archs their code carries (downloads them)")
    check.add_argument("--data", type=Path, metavar="PATH", help="compatibility data file (default: the one shipped with buildkit)")
    check.add_argument(
        "--default-matrix", type=Path, metavar="PATH", help="the matrix to keep in step (default: the shipped default matrix, when --data is the shipped data)"
    )
    check.add_argument("--write", action="store_true", help="apply the proposed change to the data file and the matrix (exit 0 once it agrees)")
    check.add_argument("--json", action="store_true", help="print JSON instead of Markdown")


def _layout_indexes(values: list[str]) -> dict[str, str]:
    layouts = {}
    for value in values:
        name, separator, url = value.partition("=")
        if not separator or not name or not url:
            raise UserError(Problem("--layout-index", f"{value!r}: expected LAYOUT=URL or LAYOUT=none, e.g. amd-multi-arch=none"))
        layouts[name] = url
    return layouts


def run_check(call: Invocation) -> int:
    from buildkit.app.compat_check import check_compat
    from buildkit.ui.compat import compat_json, compat_markdown

    args = call.args
    outcome = check_compat(
        args.index,
        args.data,
        args.write,
        pypi_url=args.pypi,
        layout_indexes=_layout_indexes(args.layout_index),
        deep=args.deep,
        matrix_path=args.default_matrix,
    )
    if args.json:
        views.print_json(compat_json(outcome))
    else:
        sys.stdout.write(compat_markdown(outcome))
    return EXIT_OK if outcome.agrees else EXIT_DIFFERS
