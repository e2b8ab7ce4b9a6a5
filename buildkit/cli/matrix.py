"""`buildkit matrix validate | show | schema`: check a matrix, print it resolved, print its schema."""

from __future__ import annotations

import sys

from buildkit.app.targets import Choices, validate_selection
from buildkit.cli.options import EXIT_OK, Commands, Invocation, add_matrix, command, matrix_path
from buildkit.errors import UserError
from buildkit.ui import views


def add_matrix_commands(commands: Commands) -> None:
    matrix = command(commands, "matrix", None, help="work with matrix files")
    matrix_commands = matrix.add_subparsers(dest="matrix_command", required=True, metavar="SUBCOMMAND")
    validate = command(
        matrix_commands, "validate", run_validate, help="check a matrix and render every template it uses: every problem, or a count of its targets"
    )
    add_matrix(validate)
    validate.add_argument(
        "--format",
        choices=views.VALIDATE_FORMATS,
        default=views.VALIDATE_FORMATS[0],
        help="text (default), or github: problems as ::error annotations on their file and line",
    )
    show = command(matrix_commands, "show", run_show, help="print the matrix as its `extends` chain resolves it, as TOML")
    add_matrix(show)
    schema = command(matrix_commands, "schema", run_schema, help="print the JSON Schema of matrix files (for editors), or with --markdown the key reference")
    schema.add_argument("--markdown", action="store_true", help="the reference tables of docs/matrix-reference.md instead")


def run_validate(call: Invocation) -> int:
    try:
        validated = validate_selection(Choices(matrix=matrix_path(call)))  # validate has only --matrix: every target
    except UserError as error:
        if call.args.format != "github":
            raise
        for line in views.github_annotations(error.problems):
            sys.stdout.write(line + "\n")
        return error.exit_code
    views.notes(call.err, validated.notes)
    views.say(call.out, views.validation_summary(validated.targets))
    return EXIT_OK


def run_schema(call: Invocation) -> int:
    from buildkit.ui.matrix_schema import reference_markdown, schema_text

    sys.stdout.write(reference_markdown() if call.args.markdown else schema_text())
    return EXIT_OK


def run_show(call: Invocation) -> int:
    from buildkit.app.matrix_show import resolve

    sys.stdout.write(views.escaped_lines(views.matrix_toml(resolve(matrix_path(call)))))
    return EXIT_OK
