"""The `buildkit` command line: it parses and prints, the app decides. One module per command group adds its
parsers and runs them (matrix, targets, build, images, host, hipify, compat, completion); options.py holds the
option groups several commands share and reads each into the app's frozen option record once; program.py puts
the parser together and turns what a handler raises into the README's exit codes."""

from buildkit.cli.program import build_parser, main

__all__ = ["build_parser", "main"]
