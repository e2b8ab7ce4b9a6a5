"""`buildkit completion bash|zsh|fish`: the shell's completion script, generated from the parser."""

from __future__ import annotations

import sys

from buildkit.cli.options import EXIT_OK, Commands, Invocation, command
from buildkit.ui.completion import SHELLS


def add_completion(commands: Commands) -> None:
    completion = command(commands, "completion", run_completion, help="print a shell completion script: eval or source it from your shell's start-up file")
    completion.add_argument("shell", choices=SHELLS, help=", ".join(SHELLS))


def run_completion(call: Invocation) -> int:
    from buildkit.ui.completion import completion_script

    sys.stdout.write(completion_script(call.parser, call.args.shell))
    return EXIT_OK
