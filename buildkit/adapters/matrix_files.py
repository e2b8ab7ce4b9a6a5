"""Reading matrix files: TOML parsing with line numbers, `extends` chains, template search paths.

This is the I/O edge in front of buildkit.core.matrix, which only sees parsed layers. Matrix files come
from forks and pull requests, so reading them is bounded (size, nesting) and template folders are
confined: a team's template_dir must lie inside the folder of the matrix that names it, and only
`*.j2` files in it can be loaded as templates.
"""

from __future__ import annotations

import re
from pathlib import Path

import jinja2

from buildkit.adapters.bundled import builtin_templates_dir, compat_data, default_matrix_path, tomllib
from buildkit.core.lock import LOCK_NAME, Lock, read_lock
from buildkit.core.matrix import Layer, Matrix, resolve_matrix
from buildkit.errors import Problem, UserError

DEFAULT_NAME = "default"
MAX_MATRIX_BYTES = 16 * 1024 * 1024  # far beyond any real matrix (100,000 targets take about 1 MB)
_TOML_LINE_RE = re.compile(r"\(at line (\d+), column \d+\)")
_HEADER_RE = re.compile(r"\s*(\[\[?)(.+?)\]\]?\s*(?:#.*)?")
_KEY_RE = re.compile(r"\s*((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*=")
_DOTTED_PART_RE = re.compile(r"\"([^\"]*)\"|'([^']*)'|([A-Za-z0-9_-]+)")
_INDEX_RE = re.compile(r"\[\d+\]$")


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _dotted(text: str) -> str:
    return ".".join(next(part for part in match.groups() if part is not None) for match in _DOTTED_PART_RE.finditer(text))


class LineIndex:
    """Key path -> line, built in one pass over a TOML text (tomllib keeps no positions), so locating
    any number of problems costs one scan of the file."""

    def __init__(self, text: str):
        self.lines: dict[str, int] = {}
        counts: dict[str, int] = {}
        prefix = ""
        for number, line in enumerate(text.splitlines(), start=1):
            header = _HEADER_RE.fullmatch(line)
            if header and not _KEY_RE.match(line):
                name = _dotted(header.group(2))
                if header.group(1) == "[[":
                    counts[name] = counts.get(name, -1) + 1
                    name = f"{name}[{counts[name]}]"
                prefix = name
                self.lines.setdefault(prefix, number)
                continue
            key = _KEY_RE.match(line)
            if key:
                path = _dotted(key.group(1))
                self.lines.setdefault(f"{prefix}.{path}" if prefix else path, number)

    def line(self, key: str) -> int | None:
        """The line of a key path such as torch[2].rocm[1], or of the nearest enclosing key that has one."""
        while key:
            if key in self.lines:
                return self.lines[key]
            trimmed = _INDEX_RE.sub("", key)
            key = trimmed if trimmed != key else key.rpartition(".")[0]
        return None


def locate(text: str, key: str) -> int | None:
    return LineIndex(text).line(key)


def _parse(path: Path) -> tuple[dict, str]:
    shown = _display(path)
    try:
        if not path.is_file():
            what = "a folder" if path.is_dir() else "not a regular file" if path.exists() else "no such matrix file"
            raise UserError(Problem(shown, f"{what}; pass --matrix FILE or run from a folder with matrix.toml"))
        if path.stat().st_size > MAX_MATRIX_BYTES:
            raise UserError(Problem(shown, f"is larger than {MAX_MATRIX_BYTES // 2**20} MB: not a matrix file"))
        # utf-8-sig: editors on some systems start UTF-8 files with a byte-order mark, which TOML forbids
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as error:
        raise UserError(Problem(shown, f"is not UTF-8 text (byte {error.start}): save it as UTF-8")) from None
    except (OSError, ValueError) as error:
        raise UserError(Problem(shown, f"cannot read the matrix: {getattr(error, 'strerror', None) or error}")) from None
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as error:
        message = str(error)
        line = _TOML_LINE_RE.search(message)
        raise UserError(Problem(
            shown, f"TOML syntax error: {_TOML_LINE_RE.sub('', message).strip()}", line=int(line.group(1)) if line else None,
        )) from None
    except RecursionError:
        raise UserError(Problem(shown, "TOML nesting is too deep to be a matrix (arrays or tables nested hundreds of levels)")) from None


def _template_dir(current: Path, data: dict, shown: str, index: LineIndex) -> str | None:
    template_dir = data.get("template_dir")
    if template_dir is None:
        return None
    folder = current.parent.resolve()
    try:
        candidate = (folder / template_dir).resolve() if isinstance(template_dir, str) else None
    except (OSError, ValueError):
        candidate = None
    if candidate is None or not candidate.is_dir():
        raise UserError(Problem(shown, f"template_dir {template_dir!r} is not a folder (relative to {_display(folder)})",
                                key="template_dir", line=index.line("template_dir")))
    if candidate != folder and folder not in candidate.parents:
        raise UserError(Problem(shown, f"template_dir {template_dir!r} leads outside {_display(folder)}: team templates must "
                                       "live in the matrix's own folder tree", key="template_dir", line=index.line("template_dir")))
    return str(candidate)


def read_layers(path: Path) -> tuple[list[Layer], dict[str, LineIndex]]:
    """The file and every file it extends, base first; also each file's line index."""
    chain: list[Layer] = []
    indexes: dict[str, LineIndex] = {}
    seen: list[Path] = []
    try:
        current: Path | None = path.resolve()
    except (OSError, ValueError) as error:
        raise UserError(Problem(str(path)[:200], f"not a usable path: {error}")) from None
    while current is not None:
        shown = _display(current)
        if current in seen:
            cycle = " -> ".join(_display(p) for p in [*seen, current])
            raise UserError(Problem(shown, f"`extends` forms a cycle: {cycle}", key="extends"))
        seen.append(current)
        data, text = _parse(current)
        index = indexes[shown] = LineIndex(text)
        chain.insert(0, Layer(path=shown, data=data, template_dir=_template_dir(current, data, shown, index)))
        parent = data.get("extends")
        if parent is None:
            current = None
        elif not isinstance(parent, str) or not parent or "\0" in parent or len(parent) > 1024:
            raise UserError(Problem(shown, 'expected "default" or a path to another matrix file', key="extends", line=index.line("extends")))
        elif parent == DEFAULT_NAME:
            current = default_matrix_path().resolve()
        else:
            current = (current.parent / parent).resolve()
            if not current.is_file():
                raise UserError(Problem(shown, f"extends {parent!r}: no such file", key="extends", line=index.line("extends")))
    return chain, indexes


def lock_path(matrix: Path | None) -> Path:
    """matrix.lock beside the matrix file (beside the shipped matrix for the default one)."""
    return (matrix if matrix is not None else default_matrix_path()).resolve().parent / LOCK_NAME


def read_matrix_lock(matrix: Path | None) -> Lock:
    path = lock_path(matrix)
    if not path.is_file():
        return Lock()
    data, _ = _parse(path)
    return read_lock(data, _display(path))


def load_matrix(path: Path | None, use_lock: bool = True) -> Matrix:
    """Load, layer and validate a matrix (with its matrix.lock unless use_lock is off); errors carry file,
    key path and (where found) the line."""
    chosen = path if path is not None else default_matrix_path()
    layers, indexes = read_layers(chosen)
    lock = read_matrix_lock(path) if use_lock else Lock()
    try:
        return resolve_matrix(layers, compat_data(), lock)
    except UserError as error:
        located = [
            Problem(p.where, p.message, key=p.key, line=p.line or (indexes[p.where].line(p.key) if p.where in indexes and p.key else None))
            for p in error.problems
        ]
        raise UserError(located) from None


class TemplateLoader(jinja2.FileSystemLoader):
    """Templates from the team folders, then the built-in ones; only `*.j2` files are templates, so an
    `{% include %}` cannot pull in any other file of the folder."""

    def get_source(self, environment: jinja2.Environment, template: str):
        if not template.endswith(".j2"):
            raise jinja2.TemplateNotFound(template)
        source, filename, uptodate = super().get_source(environment, template)
        real = Path(filename).resolve()
        if not any(real == root or root in real.parents for root in map(lambda p: Path(p).resolve(), self.searchpath)):
            raise UserError(Problem(filename, "is a link leading out of its template folder: templates must be files inside it"))
        return source, filename, uptodate


def template_loader(matrix: Matrix) -> jinja2.BaseLoader:
    """Team template folders first (most specific file first), then the built-in templates."""
    return TemplateLoader([*matrix.template_dirs, str(builtin_templates_dir())], followlinks=False)
