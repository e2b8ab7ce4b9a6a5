"""Output folders buildkit owns only file by file: confined, atomic writes and a manifest of what it wrote.

`render --out` and `hipify --out` point at folders that users also keep things in, that may hold symlinks
planted by anyone, and that may be earlier outputs. The promise: buildkit never writes outside the folder,
never follows a symlink inside it, never overwrites or deletes a file it did not write (or that was changed
since), and a reader never sees a half-written file. The manifest (a JSON file in the folder) lists every
file buildkit wrote with its sha256 and every folder it created; the next run removes only those.

Every path below the root is reached one component at a time through directory descriptors opened with
O_NOFOLLOW, so a symlink swapped in between the checks and the writes still cannot lead a write outside.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import secrets
import stat
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard

from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

MANIFEST_FORMAT = 1
MANIFEST_MAX_BYTES = 64 * 1024 * 1024  # a PyTorch checkout's list is a few MB
_SHOWN_PROBLEMS = 10
_CHUNK = 1024 * 1024
_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO someone planted must not hang; it changes nothing for regular files.
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@dataclass(frozen=True)
class OwnedFolder:
    """An output folder and how it is named to the user."""

    root: Path
    manifest: str  # file name inside root, e.g. ".buildkit-render.json"
    tool: str  # "buildkit render": recorded in the manifest and named in messages
    option: str = "--out"


@dataclass(frozen=True)
class TreeUpdate:
    written: tuple[str, ...]  # relative paths written anew or rewritten
    unchanged: tuple[str, ...]  # already there with the same content
    removed: tuple[str, ...]  # files an earlier run wrote that this one no longer does


@dataclass(frozen=True)
class _Manifest:
    files: dict[str, str]  # relative path -> sha256 of what buildkit wrote
    folders: frozenset[str]  # folders buildkit created
    replacing: dict[str, str]  # during an update: what was on disk before (a crash leaves either)


class _Blocked(Exception):
    """A path below the root that buildkit must not write through or over."""

    def __init__(self, relative: str, reason: str) -> None:
        super().__init__(relative, reason)
        self.relative, self.reason = relative, reason


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def check_writable_file(path: Path, option: str) -> None:
    """Fail before a long run, not after it, when its report could not be written."""
    if path.is_symlink():
        raise UserError(Problem(option, f"{path} {_NAMED_SYMLINK}"))
    target = path.parent.resolve() / path.name  # links above the file are the user's path: follow them
    if target.is_dir():
        raise UserError(Problem(option, f"{path} is a folder; name a file"))
    if not target.parent.is_dir():
        raise UserError(Problem(option, f"folder {path.parent} does not exist; create it first or name a file in an existing folder"))
    if target.exists() and not target.is_file():
        raise UserError(Problem(option, f"{path} is in the way and is not a regular file (a FIFO, a device?); move it away or name another file"))


_NAMED_SYMLINK = (
    "is a symlink; buildkit never writes through a link (a cloned repository's matrix.lock or report could "
    "point at any file of yours): remove the link or name the file itself"
)


def write_atomic(path: Path, data: bytes, option: str) -> None:
    """One file (matrix.lock, a --json report, `compat check --write`): written whole or not at all, into a
    folder that exists, by a rename over the name. A symlink in the file's place is refused, never followed
    nor created through; one swapped in after the check is replaced by the rename, its target untouched."""
    check_writable_file(path, option)
    try:
        folder = os.open(path.parent.resolve(), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            _replace_file(folder, path.name, data, None, 0o666 & ~_umask())
        finally:
            os.close(folder)
    except OSError as error:
        raise UserError(Problem(option, f"cannot write {path}: {error.strerror}")) from None


def write_below(root: Path, relative: str, data: bytes, option: str) -> None:
    """A file in a folder buildkit writes into file by file without owning it (`build --out`'s build
    contexts): created with its folders, atomically, never through a symlink inside `root`."""
    with _below(root, relative, option) as descriptor:
        *parents, name = relative.split("/")  # buildkit's own names (contexts/<target id>/Dockerfile)
        with _folder(descriptor, parents, create=True) as parent:
            assert parent is not None  # created when missing
            info = _lstat(parent, name)
            if info is not None and stat.S_ISLNK(info.st_mode):
                raise _Blocked(relative, _SYMLINK)
            _replace_file(parent, name, data, None, 0o666 & ~_umask())


def open_below(root: Path, relative: str, append: bool, option: str) -> int:
    """A descriptor for writing a file that grows while it is read (a build log users tail), below `root`,
    reached without following any symlink: a planted link is refused, not written through."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | (os.O_APPEND if append else os.O_TRUNC)
    with _below(root, relative, option) as descriptor:
        *parents, name = relative.split("/")
        with _folder(descriptor, parents, create=True) as parent:
            assert parent is not None
            try:
                opened = os.open(name, flags, 0o666, dir_fd=parent)
            except OSError as error:
                if error.errno == errno.ELOOP:
                    raise _Blocked(relative, _SYMLINK) from None
                raise
            if not stat.S_ISREG(os.fstat(opened).st_mode):
                os.close(opened)
                raise _Blocked(relative, "is in the way and is not a regular file; move it away")
            os.set_blocking(opened, True)
            return opened


@contextmanager
def _below(root: Path, relative: str, option: str) -> Iterator[int]:
    """`root`, created with its folders, opened for work on the file `relative` below it: a planted link
    (_Blocked) or a failed write becomes one message naming the file, and the folder is closed after."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        raise UserError(Problem(option, f"cannot create or open {root}: {error.strerror}; pick a folder you can write to")) from None
    try:
        yield descriptor
    except _Blocked as blocked:
        raise UserError(Problem(str(root / blocked.relative), blocked.reason)) from None
    except OSError as error:
        raise UserError(Problem(option, f"cannot write {root / relative}: {error.strerror}")) from None
    finally:
        os.close(descriptor)


def _lstat(folder: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return None


def check_output_folder(folder: OwnedFolder) -> None:
    """Refuse early, creating nothing, what update_tree would refuse anyway: an --out that is a file, that
    cannot be created, or that holds files buildkit did not write."""
    if folder.root.exists() or folder.root.is_symlink():
        with _opened_root(folder) as root, _reported(folder):
            _read_manifest(root, folder)
        return
    existing = next(parent for parent in folder.root.parents if parent.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UserError(Problem(folder.option, f"cannot create {folder.root}: {existing} is not a folder you can write to; pick another folder"))


def update_tree(folder: OwnedFolder, files: Mapping[str, bytes | Path]) -> TreeUpdate:
    """Make the folder hold exactly `files` (relative path -> content, or a file to copy) among what buildkit
    owns there: write them atomically, remove the files an earlier run wrote that `files` no longer lists,
    and the folders it created that are empty then. Anything else in the folder is left as it is; a file in
    the way that buildkit did not write, or changed since, or a symlink on the way, stops the run before
    anything is touched."""
    wanted = {_checked_relative(path, folder): source for path, source in files.items()}
    if folder.manifest in wanted:
        raise UserError(Problem(str(folder.root / folder.manifest), f"is the name of {folder.tool}'s list of written files; rename the input file"))
    with _opened_root(folder) as root, _reported(folder):
        earlier = _read_manifest(root, folder)
        hashes = {path: _source_sha256(source) for path, source in wanted.items()}
        on_disk, created, problems = _inspect(root, folder, earlier, hashes)
        if problems:
            problems = list(dict.fromkeys(problems))  # a symlinked folder blocks every file below it: name it once
            shown = problems[:_SHOWN_PROBLEMS]
            if len(problems) > len(shown):
                shown.append(Problem(folder.option, f"and {len(problems) - len(shown)} more such paths"))
            raise UserError(shown)
        _remove_stray_temporaries(root, {"", *(path.rpartition("/")[0] for path in (*earlier.files, *wanted))})
        stale = sorted(path for path in earlier.files if path not in wanted and on_disk.get(path))
        changing = sorted(path for path in wanted if on_disk.get(path) != hashes[path])
        if earlier.files == hashes and not changing and not earlier.replacing:
            return TreeUpdate((), tuple(sorted(wanted)), ())
        folders = earlier.folders | created
        # First a list that covers both states, so a run stopped half-way leaves nothing unaccounted for.
        _write_manifest(
            root,
            folder,
            _Manifest(
                {**earlier.files, **hashes},
                folders,
                {path: current for path in changing if (current := on_disk.get(path))},
            ),
        )
        for path in stale:
            _remove_file(root, path)
        umask = _umask()
        for path in changing:
            _write_file(root, path, wanted[path], umask)
        _write_manifest(root, folder, _Manifest(hashes, _remove_empty_folders(root, folders), {}))
    return TreeUpdate(tuple(changing), tuple(sorted(set(wanted) - set(changing))), tuple(stale))


# --- the root and its manifest -------------------------------------------------------------------------------


@contextmanager
def _reported(folder: OwnedFolder) -> Iterator[None]:
    """What the folder does under buildkit's hands (a symlink swapped in after the checks, a disk that
    fills up, a file it cannot read) as one message naming the path."""
    try:
        yield
    except _Blocked as blocked:  # nothing outside the folder was touched: the descriptors never follow links
        raise UserError(Problem(str(folder.root / blocked.relative), blocked.reason)) from None
    except OSError as error:
        where = error.filename if isinstance(error.filename, str) else str(folder.root)
        raise UserError(Problem(str(folder.root), f"cannot update {where}: {error.strerror}")) from None


@contextmanager
def _opened_root(folder: OwnedFolder) -> Iterator[int]:
    root = folder.root
    if root.is_symlink() and not root.exists():
        raise UserError(Problem(folder.option, f"{root} is a symlink to nothing; pick a folder"))
    if root.exists() and not root.is_dir():
        raise UserError(Problem(folder.option, f"{root} is a file, not a folder; pick a folder"))
    try:
        root.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        existing = next((parent for parent in root.parents if parent.exists()), None)
        reason = f"{existing} is a file" if existing and not existing.is_dir() else error.strerror
        raise UserError(Problem(folder.option, f"cannot create or open {root}: {reason}; pick a folder you can write to")) from None
    try:
        yield descriptor
    finally:
        os.close(descriptor)


def _read_manifest(root: int, folder: OwnedFolder) -> _Manifest:
    shown = folder.root / folder.manifest
    try:
        descriptor = os.open(folder.manifest, _READ, dir_fd=root)
    except FileNotFoundError:
        if any(not _is_temporary(name) for name in os.listdir(root)):
            raise UserError(
                Problem(
                    folder.option,
                    f"{folder.root} is not empty and is not an earlier {folder.tool} output (it has no {folder.manifest}, "
                    f"the list of files {folder.tool} wrote); pick an empty or new folder",
                )
            ) from None
        return _Manifest({}, frozenset(), {})
    except OSError as error:
        raise UserError(Problem(str(shown), f"cannot be read as {folder.tool}'s list of written files: {error.strerror}")) from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise UserError(Problem(str(shown), f"is not a file {folder.tool} wrote; pick another {folder.option}"))
        if info.st_size > MANIFEST_MAX_BYTES:
            raise UserError(Problem(str(shown), f"is larger than {MANIFEST_MAX_BYTES} bytes, not a list {folder.tool} wrote; pick another {folder.option}"))
        with os.fdopen(os.dup(descriptor), "rb") as handle:
            text = handle.read(MANIFEST_MAX_BYTES)
    finally:
        os.close(descriptor)
    try:
        data = json.loads(text.decode("utf-8"))
        if not isinstance(data, dict) or data.get("written_by") != folder.tool or data.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"not written by this version of {folder.tool}")
        files, folders, replacing = data.get("files"), data.get("folders"), data.get("replacing", {})
        if not (_is_hash_map(files) and _is_hash_map(replacing) and isinstance(folders, list) and all(isinstance(f, str) for f in folders)):
            raise ValueError("unexpected structure")
        manifest = _Manifest(
            {_checked_relative(p, folder): h for p, h in files.items()},
            frozenset(_checked_relative(p, folder) for p in folders),
            {_checked_relative(p, folder): h for p, h in replacing.items()},
        )
    except (ValueError, UnicodeDecodeError, UserError) as error:
        raise UserError(
            Problem(
                str(shown),
                f"is not a valid list of files {folder.tool} wrote ({error}); {folder.tool} cannot tell its files "
                f"from yours there: pick another {folder.option}",
            )
        ) from None
    return manifest


def _is_hash_map(value: object) -> TypeGuard[dict[str, str]]:
    return isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) and len(v) == 64 and all(c in "0123456789abcdef" for c in v) for k, v in value.items()
    )


def _checked_relative(path: str, folder: OwnedFolder) -> str:
    parts = path.split("/")
    if not path or "\0" in path or any(part in ("", ".", "..") for part in parts):
        raise UserError(Problem(str(folder.root), f"refusing path {path!r}: not a plain relative path below the folder"))
    return path


def _write_manifest(root: int, folder: OwnedFolder, manifest: _Manifest) -> None:
    document = {
        "written_by": folder.tool,
        "format": MANIFEST_FORMAT,
        "note": "the files and folders buildkit wrote here; it removes only these, and only while unchanged",
        "files": dict(sorted(manifest.files.items())),
        "folders": sorted(manifest.folders),
    }
    if manifest.replacing:
        document["replacing"] = dict(sorted(manifest.replacing.items()))
    _replace_file(root, folder.manifest, (json.dumps(document, indent=1) + "\n").encode("utf-8"), None, 0o666 & ~_umask())


# --- inspecting before touching anything ---------------------------------------------------------------------


def _inspect(root: int, folder: OwnedFolder, earlier: _Manifest, hashes: dict[str, str]) -> tuple[dict[str, str | None], set[str], list[Problem]]:
    """What is on disk now for every path involved (sha256, or None when absent), the folders that will be
    created, and every problem in the way."""
    on_disk: dict[str, str | None] = {}
    created: set[str] = set()
    problems: list[Problem] = []
    for path in sorted(set(earlier.files) | set(hashes)):
        try:
            current = _current_sha256(root, path)
        except _Blocked as blocked:
            problems.append(Problem(str(folder.root / blocked.relative), blocked.reason))
            continue
        on_disk[path] = current
        if current is None:
            if path in hashes:
                created |= _missing_folders(root, path)
        elif path in earlier.files:
            if current not in (earlier.files[path], earlier.replacing.get(path)) and current != hashes.get(path):
                problems.append(
                    Problem(
                        str(folder.root / path),
                        f"was changed since {folder.tool} wrote it; it neither overwrites nor removes it: move it away (or delete it) and run again",
                    )
                )
        else:  # even with the same content: a file buildkit lists as its own is one it may delete later
            problems.append(
                Problem(
                    str(folder.root / path),
                    f"is not a file {folder.tool} wrote (it is not in {folder.manifest}), so it is not overwritten: "
                    f"move it away or pick another {folder.option}",
                )
            )
    return on_disk, created, problems


def _current_sha256(root: int, path: str) -> str | None:
    *parents, name = path.split("/")
    with _folder(root, parents, create=False) as parent:
        if parent is None:
            return None
        try:
            info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return None
        if stat.S_ISLNK(info.st_mode):
            raise _Blocked(path, _SYMLINK)
        if not stat.S_ISREG(info.st_mode):
            raise _Blocked(path, "is in the way and is not a regular file; move it away")
        descriptor = os.open(name, _READ, dir_fd=parent)
        try:
            digest = hashlib.sha256()
            while chunk := os.read(descriptor, _CHUNK):
                digest.update(chunk)
            return digest.hexdigest()
        finally:
            os.close(descriptor)


def _missing_folders(root: int, path: str) -> set[str]:
    parts = path.split("/")[:-1]
    for depth in range(len(parts), 0, -1):
        with _folder(root, parts[:depth], create=False) as existing:
            if existing is not None:
                return {"/".join(parts[:d]) for d in range(depth + 1, len(parts) + 1)}
    return {"/".join(parts[:d]) for d in range(1, len(parts) + 1)}


_SYMLINK = "is a symlink; buildkit never writes through or over a symlink inside its output folder (it could lead outside): remove it or pick another folder"


@contextmanager
def _folder(root: int, parts: list[str], create: bool) -> Iterator[int | None]:
    """A descriptor for root/parts, reached without following any symlink; None when a part is missing."""
    descriptor = os.dup(root)
    try:
        for depth, part in enumerate(parts):
            try:
                following = os.open(part, _DIRECTORY, dir_fd=descriptor)
            except FileNotFoundError:
                if not create:
                    os.close(descriptor)
                    descriptor = -1
                    yield None
                    return
                # another writer (`build -j`'s contexts are written side by side) may make it first; the open
                # below still refuses whatever is not a folder
                with suppress(FileExistsError):
                    os.mkdir(part, 0o777, dir_fd=descriptor)
                following = os.open(part, _DIRECTORY, dir_fd=descriptor)
            except OSError as error:
                if error.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                shown = "/".join(parts[: depth + 1])
                if stat.S_ISLNK(os.stat(part, dir_fd=descriptor, follow_symlinks=False).st_mode):
                    raise _Blocked(shown, _SYMLINK) from None
                raise _Blocked(shown, "is a file where buildkit needs a folder; move it away") from None
            os.close(descriptor)
            descriptor = following
        yield descriptor
    finally:
        if descriptor >= 0:
            os.close(descriptor)


# --- changing the tree ---------------------------------------------------------------------------------------


def _write_file(root: int, path: str, source: bytes | Path, umask: int) -> None:
    *parents, name = path.split("/")
    with _folder(root, parents, create=True) as parent:
        assert parent is not None  # created when missing
        if isinstance(source, Path):
            mode = stat.S_IMODE(os.stat(source).st_mode) & ~umask  # keep an executable script executable
            _replace_file(parent, name, None, source, mode)
        else:
            _replace_file(parent, name, source, None, 0o666 & ~umask)


def _temporary_name(name: str) -> str:
    return f".{name[:100]}.{secrets.token_hex(6)}{_TEMPORARY_SUFFIX}"


_TEMPORARY_SUFFIX = ".buildkit-tmp"
_TEMPORARY_RE = re.compile(r"\..{1,100}\.[0-9a-f]{12}" + re.escape(_TEMPORARY_SUFFIX), re.DOTALL)


def _is_temporary(name: str) -> bool:
    """A temporary file _replace_file names: one a run killed mid-write (SIGKILL, a power cut) left behind."""
    return bool(_TEMPORARY_RE.fullmatch(name))


def _remove_stray_temporaries(root: int, folders: set[str]) -> None:
    """Remove what earlier interrupted runs left of their temporary files in the folders this run writes to:
    they would otherwise stay in the output, and in every build context sent from it."""
    for path in sorted(folders):
        with _folder(root, path.split("/") if path else [], create=False) as folder:
            if folder is None:
                continue
            for name in os.listdir(folder):
                if _is_temporary(name):
                    info = _lstat(folder, name)
                    if info is not None and stat.S_ISREG(info.st_mode):
                        os.unlink(name, dir_fd=folder)


def _replace_file(folder: int, name: str, data: bytes | None, source: Path | None, mode: int) -> None:
    """Write a temporary file beside the target, then rename it over the target: readers see the old file
    or the new one, never a part. rename replaces a symlink itself, never the file it points to. The
    temporary file is removed on any exception, Ctrl-C and SIGTERM included (the CLI raises on SIGTERM);
    one a killed run leaves is removed by the next update_tree."""
    temporary = _temporary_name(name)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=folder)
    try:
        try:
            if data is not None:
                view = memoryview(data)
                while view:
                    view = view[os.write(descriptor, view) :]
            else:
                assert source is not None  # one of the two is given
                with open(source, "rb") as handle:
                    while chunk := handle.read(_CHUNK):
                        view = memoryview(chunk)
                        while view:
                            view = view[os.write(descriptor, view) :]
            os.fchmod(descriptor, mode)
        finally:
            os.close(descriptor)
        os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=folder)
        raise


def _remove_file(root: int, path: str) -> None:
    *parents, name = path.split("/")
    with _folder(root, parents, create=False) as parent:
        if parent is not None:
            with suppress(FileNotFoundError):
                os.unlink(name, dir_fd=parent)


def _remove_empty_folders(root: int, folders: frozenset[str] | set[str]) -> frozenset[str]:
    """Remove the folders buildkit created that hold nothing now, deepest first; return those that remain.
    rmdir removes only an empty folder and never follows a symlink, so a user's file keeps its folder."""
    remaining = set()
    for path in sorted(folders, key=lambda p: p.count("/"), reverse=True):
        *parents, name = path.split("/")
        with _folder(root, parents, create=False) as parent:
            if parent is None:
                continue
            try:
                os.rmdir(name, dir_fd=parent)
            except FileNotFoundError:
                pass
            except OSError as error:
                if error.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                    raise
                remaining.add(path)
    return frozenset(remaining)


def _source_sha256(source: bytes | Path) -> str:
    return sha256_file(source) if isinstance(source, Path) else sha256_bytes(source)


def _umask() -> int:
    # os.umask can only be read by setting it; the value is restored at once (single-threaded CLI).
    current = os.umask(0o022)
    os.umask(current)
    return current
