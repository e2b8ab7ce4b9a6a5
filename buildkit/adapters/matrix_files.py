"""Reading matrix files: TOML parsing with line numbers, `extends` chains, template search paths.

This is the I/O edge in front of buildkit.core.matrix, which only sees parsed layers. Matrix files come
from forks and pull requests, so reading them is bounded (size, nesting) and template folders are
confined: a team's template_dir must lie inside the folder of the matrix that names it, and only
`*.j2` files in it can be loaded as templates.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

import jinja2

from buildkit.adapters.bundled import builtin_templates_dir, compat_data, default_matrix_path, tomllib
from buildkit.adapters.regular_files import NotReadable, describe_path, read_regular
from buildkit.core.lock import LOCK_NAME, Lock, read_lock
from buildkit.core.matrix import Layer, Matrix, line_of, resolve_matrix
from buildkit.errors import Problem, UserError

DEFAULT_NAME = "default"
MAX_MATRIX_BYTES = 16 * 1024 * 1024  # far beyond any real matrix (100,000 targets take about 1 MB)
MAX_TEMPLATE_BYTES = 1024 * 1024  # the built-in templates take 20 KB together
FLAVOR_SUFFIX = ".Dockerfile.j2"  # a flavor's template: runtime.Dockerfile.j2 (buildkit.core.render.template_name)
_TOML_LINE_RE = re.compile(r"\(at line (\d+), column \d+\)")
_HEADER_RE = re.compile(r"\s*(\[\[?)(.+?)\]\]?\s*(?:#.*)?")
_KEY_RE = re.compile(r"\s*((?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*')(?:\s*\.\s*(?:[A-Za-z0-9_-]+|\"[^\"]*\"|'[^']*'))*)\s*=")
_DOTTED_PART_RE = re.compile(r"\"([^\"]*)\"|'([^']*)'|([A-Za-z0-9_-]+)")


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
        return line_of(self.lines, key)


def locate(text: str, key: str) -> int | None:
    return LineIndex(text).line(key)


_MATRIX_FIX = "pass --matrix FILE (a TOML file) or run from a folder with matrix.toml"
_LOCK_FIX = "matrix.lock is the file `buildkit lock` writes: remove it or run `buildkit lock` again"


def _parse(path: Path, fix: str = _MATRIX_FIX) -> tuple[dict, str]:
    shown = _display(path)
    try:
        data = read_regular(path, MAX_MATRIX_BYTES)
    except NotReadable as error:
        what = "no such matrix file" if error.missing else error.reason
        raise UserError(Problem(shown, f"{what}; {fix}")) from None
    try:
        # utf-8-sig: editors on some systems start UTF-8 files with a byte-order mark, which TOML forbids
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise UserError(Problem(shown, f"is not UTF-8 text (byte {error.start}): save it as UTF-8", line=line)) from None
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
            what = describe_path(current)
            if what:
                raise UserError(Problem(shown, f"extends {parent!r}: {what}; expected a matrix file (a path relative to "
                                               "this file) or \"default\"", key="extends", line=index.line("extends")))
    return chain, indexes


def lock_path(matrix: Path | None) -> Path:
    """matrix.lock beside the matrix file (beside the shipped matrix for the default one)."""
    return (matrix if matrix is not None else default_matrix_path()).resolve().parent / LOCK_NAME


def read_matrix_lock(matrix: Path | None) -> Lock:
    path = lock_path(matrix)
    what = describe_path(path)
    if what == "no such file":
        return Lock()
    if what:  # a folder, FIFO or device in the lock's place is a mistake to say, not a lock to ignore
        raise UserError(Problem(_display(path), f"{what}; {_LOCK_FIX}"))
    data, _ = _parse(path, _LOCK_FIX)
    return read_lock(data, _display(path))


def load_matrix(path: Path | None, use_lock: bool = True) -> Matrix:
    """Load, layer and validate a matrix (with its matrix.lock unless use_lock is off); errors carry file,
    key path and (where found) the line."""
    chosen = path if path is not None else default_matrix_path()
    layers, indexes = read_layers(chosen)
    lock = read_matrix_lock(path) if use_lock else Lock()
    try:
        matrix = resolve_matrix(layers, compat_data(), lock, template_flavors(layers))
    except UserError as error:
        located = [
            Problem(p.where, p.message, key=p.key, line=p.line or (indexes[p.where].line(p.key) if p.where in indexes and p.key else None))
            for p in error.problems
        ]
        raise UserError(located) from None
    return replace(matrix, lines={shown: index.lines for shown, index in indexes.items()})


class TemplateLoader(jinja2.FileSystemLoader):
    """Templates from the team folders, then the built-in ones; only `*.j2` files are templates, so an
    `{% include %}` cannot pull in any other file of the folder. A template is a regular UTF-8 file inside
    its folder (a link may point elsewhere in it): a link out of the folder, a FIFO, a device, a folder in a
    template's place, an oversized or undecodable file are errors naming the file, never skipped in favour
    of the next folder's template of that name and never read past their bounds."""

    def get_source(self, environment: jinja2.Environment, template: str):
        if not template.endswith(".j2"):
            raise jinja2.TemplateNotFound(template)
        pieces = jinja2.loaders.split_template_path(template)  # refuses "..": names stay below each folder
        for folder in self.searchpath:
            root = Path(folder).resolve()
            path = Path(folder, *pieces)
            shown = _display(path)
            if not os.path.lexists(path):
                continue
            try:
                real = path.resolve(strict=True)
            except (OSError, RuntimeError) as error:  # a link to nothing, or a loop of links
                raise UserError(Problem(shown, f"is a link that leads nowhere ({getattr(error, 'strerror', None) or error}): "
                                               "a template must be a file in its template folder")) from None
            if real != root and root not in real.parents:
                raise UserError(Problem(shown, "is a link leading out of its template folder: templates must be files inside it"))
            try:
                data = read_regular(real, MAX_TEMPLATE_BYTES)
                text = data.decode("utf-8")
            except NotReadable as error:
                raise UserError(Problem(shown, f"{error.reason}: a template must be a text file in its template folder")) from None
            except UnicodeDecodeError as error:
                raise UserError(Problem(shown, f"is not UTF-8 text (byte {error.start}): save the template as UTF-8",
                                        line=data.count(b"\n", 0, error.start) + 1)) from None
            return text, str(path), lambda: False  # auto_reload is off: a run never re-reads a template
        raise jinja2.TemplateNotFound(template)


def template_flavors(layers: list[Layer]) -> frozenset[str]:
    """The flavors a matrix can use: FLAVOR.Dockerfile.j2 in its template folders or the built-in ones
    (names starting with _ are parts that flavors extend, not flavors)."""
    folders = [*(layer.template_dir for layer in layers if layer.template_dir), str(builtin_templates_dir())]
    return frozenset(
        path.name.removesuffix(FLAVOR_SUFFIX)
        for folder in folders for path in Path(folder).glob(f"*{FLAVOR_SUFFIX}") if not path.name.startswith("_")
    )


def template_loader(matrix: Matrix) -> jinja2.BaseLoader:
    """Team template folders first (most specific file first), then the built-in templates."""
    return TemplateLoader([*matrix.template_dirs, str(builtin_templates_dir())], followlinks=False)
