"""Reading matrix files: TOML parsing with line numbers, `extends` chains, template search paths.

This is the I/O edge in front of buildkit.core.matrix, which only sees parsed layers.
"""

from __future__ import annotations

import re
from pathlib import Path

import jinja2

from buildkit.core.matrix import Layer, Matrix, resolve_matrix
from buildkit.errors import Problem, UserError
from buildkit.adapters.bundled import builtin_templates_dir, compat_data, default_matrix_path, tomllib

DEFAULT_NAME = "default"
_HEADER_RE = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(?:#.*)?$")
_PART_RE = re.compile(r"([^.\[\]]+)(?:\[(\d+)\])?")
_TOML_LINE_RE = re.compile(r"\(at line (\d+), column \d+\)")


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def locate(text: str, key: str) -> int | None:
    """Best-effort line of a key path such as torch[2].rocm[1] in a TOML text (tomllib keeps no positions)."""
    lines = text.splitlines()
    headers = [(number, match.group(2), match.group(1) == "[[") for number, line in enumerate(lines) if (match := _HEADER_RE.match(line))]
    start, end = 0, headers[0][0] if headers else len(lines)
    found: int | None = None
    prefix = ""
    for name, index in _PART_RE.findall(key):
        dotted = f"{prefix}.{name}" if prefix else name
        matches = [h for h in headers if h[1] == dotted]
        if matches:
            chosen = matches[int(index)] if index and matches[0][2] and int(index) < len(matches) else matches[0]
            start = chosen[0]
            later = [h[0] for h in headers if h[0] > start]
            end = later[0] if later else len(lines)
            found = start + 1
            prefix = dotted
            continue
        assignment = re.compile(rf"^\s*{re.escape(name)}\s*=")
        for number in range(start + (1 if found else 0), end):
            if assignment.match(lines[number]):
                return number + 1
        break
    return found


def _parse(path: Path) -> tuple[dict, str]:
    shown = _display(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UserError(Problem(shown, "no such matrix file; pass --matrix FILE or run from a folder with matrix.toml")) from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(Problem(shown, f"cannot read the matrix: {error}")) from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as error:
        message = str(error)
        line = _TOML_LINE_RE.search(message)
        raise UserError(Problem(
            shown, f"TOML syntax error: {_TOML_LINE_RE.sub('', message).strip()}", line=int(line.group(1)) if line else None,
        )) from None


def read_layers(path: Path) -> tuple[list[Layer], dict[str, str]]:
    """The file and every file it extends, base first; also each file's text for line lookups."""
    chain: list[Layer] = []
    texts: dict[str, str] = {}
    seen: list[Path] = []
    current: Path | None = path.resolve()
    while current is not None:
        shown = _display(current)
        if current in seen:
            cycle = " -> ".join(_display(p) for p in [*seen, current])
            raise UserError(Problem(shown, f"`extends` forms a cycle: {cycle}", key="extends"))
        seen.append(current)
        data, text = _parse(current)
        texts[shown] = text
        template_dir = data.get("template_dir")
        resolved_templates = None
        if template_dir is not None:
            if not isinstance(template_dir, str) or not (current.parent / template_dir).is_dir():
                raise UserError(Problem(
                    shown, f"template_dir {template_dir!r} is not a folder (relative to {_display(current.parent)})",
                    key="template_dir", line=locate(text, "template_dir"),
                ))
            resolved_templates = str((current.parent / template_dir).resolve())
        chain.insert(0, Layer(path=shown, data=data, template_dir=resolved_templates))
        parent = data.get("extends")
        if parent is None:
            current = None
        elif not isinstance(parent, str) or not parent:
            raise UserError(Problem(shown, 'expected "default" or a path to another matrix file', key="extends", line=locate(text, "extends")))
        elif parent == DEFAULT_NAME:
            current = default_matrix_path().resolve()
        else:
            current = (current.parent / parent).resolve()
            if not current.is_file():
                raise UserError(Problem(shown, f"extends {parent!r}: no such file", key="extends", line=locate(text, "extends")))
    return chain, texts


def load_matrix(path: Path | None) -> Matrix:
    """Load, layer and validate a matrix; errors carry file, key path and (where found) the line."""
    chosen = path if path is not None else default_matrix_path()
    layers, texts = read_layers(chosen)
    try:
        return resolve_matrix(layers, compat_data())
    except UserError as error:
        located = [
            Problem(p.where, p.message, key=p.key, line=p.line or (locate(texts[p.where], p.key) if p.where in texts and p.key else None))
            for p in error.problems
        ]
        raise UserError(located) from None


def template_loader(matrix: Matrix) -> jinja2.BaseLoader:
    """Team template folders first (most specific file first), then the built-in templates."""
    return jinja2.FileSystemLoader([*matrix.template_dirs, str(builtin_templates_dir())])
