"""The `buildkit` program: the parser, made of every command group's, and main(), which parses, runs one handler
and turns what it raises into the README's exit codes and one line each."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from rich.console import Console

from buildkit import __version__
from buildkit.cli.build import add_build, add_lock, add_publish
from buildkit.cli.compat import add_compat
from buildkit.cli.completion import add_completion
from buildkit.cli.hipify import add_hipify
from buildkit.cli.host import add_detect, add_doctor, add_kube, add_run
from buildkit.cli.images import add_parity, add_sbom, add_test, add_verify
from buildkit.cli.matrix import add_matrix_commands
from buildkit.cli.options import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_READER_GONE,
    EXIT_TERMINATED,
    Invocation,
)
from buildkit.cli.report import add_report
from buildkit.cli.targets import add_bake, add_plan, add_render
from buildkit.errors import UserError
from buildkit.ui import views

# The commands, in the order --help lists them; each adds its parser and handler.
COMMAND_PARSERS = (
    add_matrix_commands,
    add_plan,
    add_render,
    add_build,
    add_lock,
    add_bake,
    add_publish,
    add_test,
    add_parity,
    add_detect,
    add_run,
    add_hipify,
    add_doctor,
    add_kube,
    add_compat,
    add_verify,
    add_sbom,
    add_report,
    add_completion,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="buildkit", description="Matched NVIDIA CUDA and AMD ROCm PyTorch images from one TOML matrix.")
    parser.add_argument("--version", action="version", version=f"buildkit {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an internal error")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMAND_PARSERS:
        add(commands)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is, as Ctrl-C is: every writer removes its temporary files on the
    way out and running builds are stopped, instead of the process vanishing mid-write."""


def _raise_terminated(_signum: int, _frame: object) -> None:
    raise Terminated


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # everything after `--` is the container's command (buildkit run, kube), never buildkit's options
    ours, rest = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = build_parser()
    args = parser.parse_args(ours)
    # Piped output is read by people too: give tables room instead of rich's 80-column default.
    call = Invocation(args, tuple(rest), Console(width=None if sys.stdout.isatty() else 160, soft_wrap=True), Console(stderr=True, soft_wrap=True), parser)
    if threading.current_thread() is threading.main_thread():  # tests call main() from threads too
        signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        return int(args.run(call))
    except UserError as error:
        for problem in error.problems:
            views.say(call.err, f"error: {problem}")
        return error.exit_code
    except KeyboardInterrupt as interrupt:
        views.say(call.err, "terminated" if isinstance(interrupt, Terminated) else "interrupted")
        return EXIT_TERMINATED if isinstance(interrupt, Terminated) else EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (`buildkit plan --format json | head`): not an error of ours to report; point
        # stdout at /dev/null so the interpreter's final flush does not raise again on the way out
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_READER_GONE
    except Exception as error:  # a bug, not a user error: one line unless --debug asks for the traceback
        if args.debug:
            raise
        views.say(call.err, f"internal error (a bug in buildkit, please report it): {type(error).__name__}: {error}; run again with --debug for the traceback")
        return EXIT_FAILED
