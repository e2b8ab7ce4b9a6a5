"""The module map of docs/development.md, generated from the docstrings of buildkit's folders and modules.

Each folder and module is listed with its docstring's summary: the first line where it is a paragraph of its own,
else the first sentence. The page keeps its prose around the generated part, between BEGIN and END; a test fails
when the map falls behind the code. Regenerate it: `python -m testkit.module_map --write docs/development.md`
(without --write, it is printed).
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

import buildkit

BEGIN = "<!-- generated from the docstrings by `python -m testkit.module_map --write docs/development.md`: edit the docstrings, not this map -->"
END = "<!-- end of the generated module map -->"
PACKAGE = Path(buildkit.__file__).parent
_SENTENCE_END = re.compile(r"\.(?:\s|$)")


def summary(path: Path) -> str:
    """A module's docstring in one line: its first line, where that is a paragraph of its own; else its first
    sentence, its lines joined."""
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    if not docstring:
        raise ValueError(f"{path}: no docstring; every module and folder says in its docstring what it holds")
    paragraph = docstring.split("\n\n")[0]
    if "\n" in paragraph:
        end = _SENTENCE_END.search(paragraph)
        paragraph = paragraph[: end.start() + 1] if end else paragraph
    return " ".join(paragraph.split())


def _folder(folder: Path, depth: int) -> list[str]:
    indent = "  " * depth
    lines = [f"{indent}- **`{folder.name}/`**: {summary(folder / '__init__.py')}"]
    for module in sorted(folder.glob("*.py")):
        if module.name != "__init__.py":
            lines.append(f"{indent}  - `{module.name}`: {summary(module)}")
    for room in sorted(path.parent for path in folder.glob("*/__init__.py")):
        lines += _folder(room, depth + 1)
    return lines


def module_map(package: Path = PACKAGE) -> str:
    """Markdown: every folder of the package (a package of its own) with its modules, each with its summary."""
    return "\n".join([BEGIN, "", *_folder(package, 0), "", END]) + "\n"


def replace_map(page: str, generated: str) -> str:
    """The page with its generated part (BEGIN to END, markers included) replaced."""
    start, end = page.index(BEGIN), page.index(END) + len(END) + 1
    return page[:start] + generated + page[end:]


def main(argv: list[str] | None = None) -> int:
    arguments = argparse.ArgumentParser(description="print the module map, or write it into its page")
    arguments.add_argument("--write", type=Path, metavar="PAGE", help="replace the page's generated module map")
    args = arguments.parse_args(argv)
    generated = module_map()
    if args.write:
        args.write.write_text(replace_map(args.write.read_text(encoding="utf-8"), generated), encoding="utf-8")
    else:
        sys.stdout.write(generated)
    return 0


if __name__ == "__main__":
    sys.exit(main())
