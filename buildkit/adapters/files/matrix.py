"""Reading a matrix: its file, every file it `extends`, its matrix.lock and its templates.

Each is read once, and all before anything is validated; buildkit.core.matrix.resolve then resolves what was read.

Matrix files come from forks and pull requests, so reading them is bounded (size, nesting) and template
folders are confined: a team's template_dir must lie inside the folder of the matrix that names it, only
`*.j2` files in it are templates, and a template is a regular UTF-8 file inside its folder (a link may point
elsewhere in it). A path that cannot be read (a loop of links, a FIFO, a device) is a UserError naming it.
"""

from __future__ import annotations

import errno
import itertools
from pathlib import Path
from typing import Any

from buildkit.adapters.files.bundled import builtin_templates_dir, compat_data, default_matrix_path
from buildkit.adapters.files.inputs import NotReadable, describe_path, read_regular, walk
from buildkit.core.matrix.lock import LOCK_NAME, Lock, read_lock
from buildkit.core.matrix.resolve import CommandLine, Layer, Matrix, MatrixSources, resolve_matrix
from buildkit.core.matrix.templates import UNREAD_FOLDER, TemplateFile, TemplateSet
from buildkit.core.matrix.text import LineIndex, TextFile, parse_toml
from buildkit.errors import Problem, UserError

DEFAULT_NAME = "default"
MAX_MATRIX_BYTES = 16 * 1024 * 1024  # far beyond any real matrix (100,000 targets take about 1 MB)
MAX_TEMPLATE_BYTES = 1024 * 1024  # the built-in templates take 20 KB together
MAX_FOLDER_TEMPLATE_BYTES = 64 * 1024 * 1024  # all the templates of one folder
MAX_FOLDER_ENTRIES = 20_000  # files and folders a template folder's walk looks at (hidden folders are skipped)
MAX_FOLDER_TEMPLATES = 1_000  # *.j2 files of one template folder (each is read and parsed; buildkit ships 8)


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _resolved(path: Path, shown: str, fix: str, named: str = "", key: str = "", line: int | None = None) -> Path:
    """An absolute path with its links followed; a loop of links is a UserError naming the path (`shown`, or
    `named` in the file `shown`)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError, ValueError) as error:  # RuntimeError: a loop of links, before Python 3.13
        loop = isinstance(error, RuntimeError) or getattr(error, "errno", None) == errno.ELOOP
        why = "is a loop of symbolic links" if loop else f"is not a usable path ({getattr(error, 'strerror', None) or error})"
        raise UserError(Problem(shown, f"{named}{why}; {fix}", key=key, line=line)) from None


def locate(text: str, key: str) -> int | None:
    return LineIndex(text).line(key)


_MATRIX_FIX = "pass --matrix FILE (a TOML file) or run from a folder with matrix.toml"
_LOCK_FIX = "matrix.lock is the file `buildkit lock` writes: remove it or run `buildkit lock` again"


def _read(path: Path, fix: str = _MATRIX_FIX) -> TextFile:
    shown = _display(path)
    try:
        data = read_regular(path, MAX_MATRIX_BYTES)
    except NotReadable as error:
        what = "no such matrix file" if error.missing else error.reason
        raise UserError(Problem(shown, f"{what}; {fix}")) from None
    return parse_toml(data, shown)


def _template_dir(current: Path, file: TextFile) -> str | None:
    template_dir = file.data.get("template_dir")
    if template_dir is None:
        return None
    folder = current.parent.resolve()
    where: dict[str, Any] = dict(key="template_dir", line=file.lines.line("template_dir"))
    try:
        candidate = (folder / template_dir).resolve() if isinstance(template_dir, str) else None
    except (OSError, RuntimeError, ValueError):  # a NUL byte, a loop of links
        candidate = None
    if candidate is None or not candidate.is_dir():
        raise UserError(Problem(file.shown, f"template_dir {template_dir!r} is not a folder (relative to {_display(folder)})", **where))
    if candidate != folder and folder not in candidate.parents:
        raise UserError(
            Problem(
                file.shown, f"template_dir {template_dir!r} leads outside {_display(folder)}: team templates must live in the matrix's own folder tree", **where
            )
        )
    return str(candidate)


def _unread_templates(current: Path, file: TextFile) -> tuple[str, ...]:
    """The *.j2 files of a templates/ folder beside a matrix that sets no template_dir (never the shipped
    matrix's own templates): they are not read, and the matrix's warnings say so."""
    folder = current.parent / UNREAD_FOLDER
    if "template_dir" in file.data or not folder.is_dir() or folder.resolve() == builtin_templates_dir().resolve():
        return ()
    try:
        names = (entry.name for entry in itertools.islice(folder.iterdir(), MAX_FOLDER_ENTRIES))
        found = tuple(sorted(name for name in names if name.endswith(".j2")))
        # a copy of buildkit's own templates (a checkout of buildkit, installed without -e): nothing goes unread
        builtin = builtin_templates_dir()
        if all((builtin / name).is_file() and (builtin / name).read_bytes() == (folder / name).read_bytes() for name in found):
            return ()
        return found
    except OSError:  # unreadable: nothing to say about files buildkit cannot see
        return ()


def read_layers(path: Path) -> list[Layer]:
    """The file and every file it extends, base first."""
    chain: list[Layer] = []
    seen: list[Path] = []
    current: Path | None = _resolved(path, str(path)[:200], _MATRIX_FIX)
    while current is not None:
        shown = _display(current)
        if current in seen:
            cycle = " -> ".join(_display(p) for p in [*seen, current])
            raise UserError(Problem(shown, f"`extends` forms a cycle: {cycle}", key="extends"))
        seen.append(current)
        file = _read(current)
        chain.insert(
            0,
            Layer(
                path=shown, data=file.data, template_dir=_template_dir(current, file), lines=file.lines.lines, unread_templates=_unread_templates(current, file)
            ),
        )
        parent = file.data.get("extends")
        where: dict[str, Any] = dict(key="extends", line=file.lines.line("extends"))
        if parent is None:
            current = None
        elif not isinstance(parent, str) or not parent or "\0" in parent or len(parent) > 1024:
            raise UserError(Problem(shown, 'expected "default" or a path to another matrix file', **where))
        elif parent == DEFAULT_NAME:
            current = default_matrix_path().resolve()
        else:
            current = _resolved(current.parent / parent, shown, 'expected a matrix file or "default"', f"extends {parent!r}: ", **where)
            what = describe_path(current)
            if what:
                raise UserError(Problem(shown, f'extends {parent!r}: {what}; expected a matrix file (a path relative to this file) or "default"', **where))
    return chain


def lock_path(matrix: Path | None) -> Path:
    """matrix.lock beside the matrix file (beside the shipped matrix for the default one)."""
    chosen = matrix if matrix is not None else default_matrix_path()
    return _resolved(chosen, str(chosen)[:200], _MATRIX_FIX).parent / LOCK_NAME


def _lock_file(matrix: Path | None) -> TextFile | None:
    path = lock_path(matrix)
    what = describe_path(path)
    if what == "no such file":
        return None
    if what:  # a folder, FIFO or device in the lock's place is a mistake to say, not a lock to ignore
        raise UserError(Problem(_display(path), f"{what}; {_LOCK_FIX}"))
    return _read(path, _LOCK_FIX)


def read_matrix_lock(matrix: Path | None) -> Lock:
    file = _lock_file(matrix)
    return read_lock(file.data, file.shown) if file is not None else Lock()


def _template(root: Path, path: Path, name: str, builtin: bool) -> TemplateFile:
    """One `*.j2` file of a template folder, or why it cannot be a template."""
    shown = _display(path)

    def problem(message: str, line: int | None = None) -> TemplateFile:
        return TemplateFile(name, str(path), builtin=builtin, problem=Problem(shown, message, line=line))

    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError) as error:  # a link to nothing, or a loop of links
        return problem(f"is a link that leads nowhere ({getattr(error, 'strerror', None) or error}): a template must be a file in its template folder")
    if real != root and root not in real.parents:
        return problem("is a link leading out of its template folder: templates must be files inside it")
    try:
        data = read_regular(real, MAX_TEMPLATE_BYTES)
        return TemplateFile(name, str(path), data.decode("utf-8"), builtin)
    except NotReadable as error:
        return problem(f"{error.reason}: a template must be a text file in its template folder")
    except UnicodeDecodeError as error:
        return problem(f"is not UTF-8 text (byte {error.start}): save the template as UTF-8", data.count(b"\n", 0, error.start) + 1)


def _folder_templates(folder: Path, builtin: bool) -> list[TemplateFile]:
    """Every `*.j2` file below a template folder (links to folders are not followed, hidden folders skipped),
    bounded: a template_dir pointing at a whole repository must not read it all."""
    root = folder.resolve()
    found: list[TemplateFile] = []
    entries = size = 0
    for current, folders, files in walk(root):
        folders[:] = sorted(name for name in folders if not name.startswith("."))
        entries += len(folders) + len(files)
        if entries > MAX_FOLDER_ENTRIES:
            raise UserError(
                Problem(
                    _display(folder),
                    f"holds more than {MAX_FOLDER_ENTRIES:,} files and folders: point template_dir at a folder of templates",
                    key="template_dir",
                )
            )
        for name in sorted(files + [folder for folder in folders if folder.endswith(".j2")]):  # a folder named x.j2 is refused
            if name.endswith(".j2"):
                if len(found) == MAX_FOLDER_TEMPLATES:
                    raise UserError(
                        Problem(
                            _display(folder),
                            f"holds more than {MAX_FOLDER_TEMPLATES:,} templates (*.j2 files), more "
                            "than buildkit reads from a folder: keep the flavors a matrix uses there",
                            key="template_dir",
                        )
                    )
                path = Path(current, name)
                found.append(_template(root, path, path.relative_to(root).as_posix(), builtin))
                size += len(found[-1].text)
        if size > MAX_FOLDER_TEMPLATE_BYTES:
            raise UserError(Problem(_display(folder), f"holds more than {MAX_FOLDER_TEMPLATE_BYTES // 2**20} MB of templates", key="template_dir"))
    return found


def read_templates(layers: list[Layer]) -> TemplateSet:
    """The team folders' templates (the most specific file's folder first), then the built-in ones; each name
    from the first folder that has it. A block a team template fills that its parents never define is an error."""
    folders = [(Path(layer.template_dir), False) for layer in reversed(layers) if layer.template_dir]
    chosen: dict[str, TemplateFile] = {}
    for folder, builtin in [*folders, (builtin_templates_dir(), True)]:
        for template in _folder_templates(folder, builtin):
            chosen.setdefault(template.name, template)
    templates = TemplateSet(chosen.values())
    undefined = templates.undefined_blocks()
    if undefined:
        raise UserError(undefined)
    return templates


def read_sources(path: Path | None, use_lock: bool = True, command_line: CommandLine = CommandLine()) -> MatrixSources:
    """Every file a matrix is made of, read once: its `extends` chain, its matrix.lock (unless use_lock is
    off) and its templates; with what the command line sets of it."""
    layers = read_layers(path if path is not None else default_matrix_path())
    return MatrixSources(tuple(layers), read_templates(layers), _lock_file(path) if use_lock else None, command_line)


def load_matrix(path: Path | None, use_lock: bool = True, command_line: CommandLine = CommandLine()) -> Matrix:
    """Read a matrix (read_sources), lay the command line's values over it, then layer and validate it once;
    errors carry file (or option), key path and line."""
    return resolve_matrix(read_sources(path, use_lock, command_line), compat_data())
