"""The hipify preflight: torch's hipify over a CUDA tree, out of place, and what it could not map.

Minutes here instead of hours into a source build: which files hipify converts, and what in them will not
port as it is (CUDA identifiers and headers hipify has no HIP mapping for, inline PTX, warp intrinsics,
CUDA-only libraries), at the line of the user's own file; buildkit.adapters.hipify.compile_check then compiles
the result. torch.utils.hipify ships in every torch wheel; torch is an optional dependency.

The user's tree is only read. torch's hipify copies a tree with shutil.copytree, which follows every
symlink (a link to /etc or $HOME lands in the output; a link loop recurses until the path is too long),
so buildkit copies the tree itself into a scratch folder first, keeping only what lies inside the tree,
hipifies the copy in place, and then writes the result into --out through safe_files: a manifest of what
it wrote, atomic writes, and nothing removed there but its own earlier files.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import shutil
import stat
import tempfile
import time
import unittest.mock
import warnings
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from buildkit.adapters.files.outputs import OwnedFolder, check_output_folder, sha256_file, update_tree
from buildkit.core.porting.analysis import BuildMacros, findings
from buildkit.core.porting.cuda_constants import Definitions
from buildkit.core.porting.preprocessor import INACTIVE
from buildkit.core.porting.report import HipifyReport, Skipped
from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from collections.abc import Iterator
    from types import ModuleType

    from torch.utils.hipify.hipify_python import HipifyResult

MANIFEST = ".buildkit-hipify.json"
TOOL = "buildkit hipify"
# The files torch's hipify reads (its own default list, passed explicitly so the UTF-8 check sees the same).
EXTENSIONS = (".cu", ".cuh", ".c", ".cc", ".cpp", ".h", ".in", ".hpp")
# Version-control data: large, never compiled, and not read by hipify either.
_NOT_COPIED_AT_ROOT = frozenset({".git", ".hg", ".svn"})
_SHOWN_PROBLEMS = 10
# Folders below the tree's top: torch's hipify walks with os.walk, one frame per folder (before Python 3.12),
# under Python's limit of 1,000 frames. A PyTorch checkout goes about a dozen deep.
MAX_DEPTH = 400
# Nested #includes: GCC and clang stop at 200, and torch's hipify follows each by recursion (a chain of 600 headers
# overflowed Python's stack there).
MAX_INCLUDE_DEPTH = 200


def torch_hipify() -> ModuleType:
    """torch.utils.hipify.hipify_python (torch is an optional dependency: its module, seen untyped)."""
    try:
        with warnings.catch_warnings():  # torch's import warns about optional modules (numpy) hipify never uses
            warnings.simplefilter("ignore")
            from torch.utils.hipify import hipify_python
    except ImportError:
        raise UserError(
            Problem(
                "hipify",
                "needs torch's hipify (torch.utils.hipify, in every torch wheel): pip install 'buildkit[hipify]'",
            )
        ) from None
    return hipify_python


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


def check_folders(source: Path, out: Path) -> tuple[Path, Path]:
    """The source tree and --out, resolved; refused when --out is the tree, inside it, or contains it."""
    resolved = source.resolve()
    if not resolved.is_dir():
        raise UserError(Problem(str(source), "is not a folder of CUDA sources"))
    if not os.access(resolved, os.R_OK | os.X_OK):
        raise UserError(Problem(str(source), "cannot be read (permission denied); hipify needs to read the whole tree"))
    target = out.resolve()
    if target == resolved or resolved in target.parents:
        raise UserError(Problem("--out", f"{out} is inside the source tree; hipify runs out of place, pick a folder elsewhere"))
    if target in resolved.parents:
        raise UserError(Problem("--out", f"{out} contains the source tree {source}; hipify never writes around your sources, pick a folder elsewhere"))
    return resolved, target


def run_hipify(source: Path, out: Path, macros: BuildMacros) -> HipifyReport:
    """Hipify `source` into `out`; findings are judged under `macros`, the ROCm build's (in #if branches that
    build never compiles they are listed apart and never block)."""
    source, out = check_folders(source, out)
    hipify_python = torch_hipify()
    folder = OwnedFolder(out, MANIFEST, TOOL)
    check_output_folder(folder)  # before the copy and the conversion, which take minutes on a PyTorch checkout
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="buildkit-hipify-") as scratch:
        staging = Path(scratch) / "tree"
        originals, skipped = copy_tree(source, staging)
        _check_tree(hipify_python, staging, source)
        results = _hipify_in_place(hipify_python, staging)
        update = update_tree(folder, {path.relative_to(staging).as_posix(): path for path in sorted(staging.rglob("*")) if path.is_file()})
        report = HipifyReport(str(source), str(out), skipped=skipped, removed=list(update.removed))
        produced_files = []
        for original, result in sorted(results.items()):
            produced = Path(result.hipified_path or original)
            relative = produced.relative_to(staging).as_posix()
            origin = Path(original).relative_to(staging).as_posix()
            before = originals.get(origin)
            changed = produced.is_file() and before is not None and sha256_file(produced) != before
            (report.converted if changed else report.unchanged).append(relative)
            if changed and relative != origin:
                report.origins[relative] = origin
            if produced.is_file():
                produced_files.append(relative)
        texts = {relative: _read(staging / relative) for relative in produced_files}
        names = Definitions.of(texts.values())  # a mask or block size may be defined in any header of the tree
        report.macros = macros.origin
        for relative, text in texts.items():
            origin = report.origins.get(relative, relative)
            for finding in findings(relative, text, origin, _read(staging / origin) if origin != relative else None, names, macros):
                (report.inactive if finding.state == INACTIVE else report.findings).append(finding)
    report.seconds = round(time.perf_counter() - started, 3)
    return report


def copy_tree(source: Path, staging: Path) -> tuple[dict[str, str], list[Skipped]]:
    """Copy the regular files and folders of `source` into `staging`; return each copied file's sha256 by
    relative path, and what was left out. A symlink is followed only while it leads to a file or folder
    inside the tree (and then copied as what it points to); one leading outside, dangling, or back into a
    folder it sits in is skipped and named."""
    originals: dict[str, str] = {}
    skipped: list[Skipped] = []

    def listing(folder: Path, relative: PurePosixPath) -> Iterator[os.DirEntry[str]]:
        try:
            return iter(sorted(os.scandir(folder), key=lambda entry: entry.name))
        except OSError as error:
            raise UserError(Problem(str(source / relative), f"cannot be read: {error.strerror}; hipify needs to read the whole tree")) from None

    # A stack of open folders, not recursion: a tree 1,200 folders deep is refused with a message, not a RecursionError.
    staging.mkdir()
    stack = [(listing(source, PurePosixPath()), PurePosixPath(), staging, frozenset({source}))]
    while stack:
        entries, relative, target, ancestors = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        path, shown = Path(entry.path), relative / entry.name
        if not relative.parts and entry.name in _NOT_COPIED_AT_ROOT | {MANIFEST}:
            continue  # version-control data, or the manifest of an earlier output hipified again
        real = path
        if entry.is_symlink():
            real, reason = _inside_link(path, source, ancestors)
            if reason:
                skipped.append(Skipped(shown.as_posix(), reason))
                continue
        if real.is_dir():  # real is no symlink here: a plain entry, or where an inside link resolves to
            if len(stack) >= MAX_DEPTH:
                raise UserError(
                    Problem(
                        str(source / shown),
                        f"is more than {MAX_DEPTH} folders below the tree's top: torch's "
                        "hipify walks a tree recursively and cannot go that deep; move "
                        "the sources higher up",
                    )
                )
            (target / entry.name).mkdir()
            stack.append((listing(real, shown), shown, target / entry.name, ancestors | {real}))
        elif real.is_file():
            originals[shown.as_posix()] = _copy_file(real, target / entry.name, source / shown)
        else:
            skipped.append(Skipped(shown.as_posix(), "not a regular file or folder (a FIFO, socket or device): not copied"))
    return originals, skipped


def _inside_link(link: Path, source: Path, ancestors: frozenset[Path]) -> tuple[Path, str]:
    """Where a symlink inside the tree leads, or why it is not followed."""
    try:
        real = link.resolve(strict=True)
    except (OSError, RuntimeError) as error:  # RuntimeError: pathlib's "Symlink loop" before Python 3.13
        if isinstance(error, RuntimeError) or error.errno == errno.ELOOP:
            return link, f"symlink loop (-> {os.readlink(link)}, which never reaches a file or folder): not followed"
        return link, f"symlink to {os.readlink(link)}, which does not exist: not copied"
    if real != source and source not in real.parents:
        return link, f"symlink to {real}, outside the source tree: not copied (copy the file into the tree if hipify should see it)"
    if real in ancestors:
        return link, f"symlink loop: leads back to {real.relative_to(source).as_posix() or '.'}, a folder it sits in: not followed"
    return real, ""


def _copy_file(path: Path, target: Path, shown: Path) -> str:
    digest = hashlib.sha256()
    try:
        # O_NOFOLLOW and the check for a regular file: a file swapped for a link or a FIFO since the listing
        # is neither followed out of the tree nor waited on forever.
        descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            os.close(descriptor)
            raise UserError(Problem(str(shown), "changed while hipify read the tree (it is no longer a regular file); run again"))
        with open(descriptor, "rb") as reader, open(target, "wb") as writer:
            while chunk := reader.read(1024 * 1024):
                digest.update(chunk)
                writer.write(chunk)
        shutil.copymode(path, target)
    except OSError as error:
        if error.filename and Path(error.filename) == target:
            raise UserError(Problem("hipify", f"cannot write its scratch copy {target}: {error.strerror}")) from None
        raise UserError(Problem(str(shown), f"cannot be read: {error.strerror}; hipify needs to read the whole tree")) from None
    return digest.hexdigest()


def _check_tree(hipify_python: ModuleType, staging: Path, source: Path) -> None:
    """What torch's hipify would die on with a traceback, named first, with torch's own matching and include rules:
    a file it reads that is not UTF-8 (a binary file it never reads is no problem), and a chain of headers deeper
    than MAX_INCLUDE_DEPTH (it follows each include by recursion: a chain of 600 overflowed Python's stack)."""
    problems = []
    texts: dict[str, str] = {}
    for name in hipify_python.matched_files_iter(str(staging), includes=["*"], extensions=EXTENSIONS, is_pytorch_extension=True):
        data = Path(name).read_bytes()
        try:
            texts[name] = data.decode("utf-8")
        except UnicodeDecodeError as error:
            shown = source / Path(name).relative_to(staging)
            problems.append(
                Problem(
                    str(shown),
                    f"is not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start}): hipify reads "
                    f"{', '.join(EXTENSIONS)} files as UTF-8 source; convert it (iconv -t UTF-8) or move it out of the tree",
                )
            )
    if problems:
        raise UserError(problems[:_SHOWN_PROBLEMS])
    chain = _deepest_includes(hipify_python, texts)
    if len(chain) > MAX_INCLUDE_DEPTH:
        relative = [Path(os.path.relpath(name, os.path.realpath(staging))).as_posix() for name in chain]
        listed = " -> ".join([*relative[:3], "...", *relative[-2:]])
        raise UserError(
            Problem(
                str(source / relative[0]),
                f"begins a chain of more than {MAX_INCLUDE_DEPTH} nested #includes ({listed}), "
                f"deeper than compilers read (GCC and clang stop at {MAX_INCLUDE_DEPTH}) "
                "and than torch's hipify follows; break the chain",
            )
        )


def _deepest_includes(hipify_python: ModuleType, texts: dict[str, str]) -> list[str]:
    """The deepest chain of files torch's hipify would open one inside another: it reads its files in this order,
    and within each follows every quoted include (and THC_GENERIC_FILE) that names a file of the tree, in order,
    into files it has not read yet. Walked with a stack of its own, each file's includes listed once."""
    names = list(texts)
    basenames = {os.path.basename(name) for name in names}
    patterns = (hipify_python.RE_QUOTE_HEADER, hipify_python.RE_THC_GENERIC_FILE)

    def included(name: str) -> list[str]:
        found = []
        for pattern in patterns:
            for match in pattern.finditer(texts[name]):
                target = os.path.realpath(os.path.join(os.path.dirname(name), match.group(1)))
                if os.path.basename(match.group(1)) in basenames and target in texts:
                    found.append(target)
        return found

    texts = {os.path.realpath(name): text for name, text in texts.items()}
    names = [os.path.realpath(name) for name in names]
    seen: set[str] = set()
    deepest: list[str] = []
    for root in names:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(included(root)))]
        while stack:
            if len(stack) > len(deepest):
                deepest = [name for name, _ in stack]
            if len(stack) > MAX_INCLUDE_DEPTH:
                return deepest
            following = next(stack[-1][1], None)
            if following is None:
                stack.pop()
            elif following not in seen:
                seen.add(following)
                stack.append((following, iter(included(following))))
    return deepest


class _TreeOnlyPath:
    """os.path as torch's hipify sees it during a run: a path outside the scratch tree does not exist. torch follows
    each `#include "X"` whose name ends like one of the tree's files to X, wherever it leads (an absolute path, or
    ../ out of the tree), records it among its results and rewrites the include to a path relative to the scratch
    copy, which leads nowhere (or elsewhere) from --out. Seen as missing, the include is left as written."""

    def __init__(self, staging: Path) -> None:
        self._tree = os.path.realpath(staging)

    def exists(self, path: str) -> bool:
        real = os.path.realpath(path)
        return (real == self._tree or real.startswith(self._tree + os.sep)) and os.path.exists(real)

    def __getattr__(self, name: str) -> Any:  # the rest of os.path, whatever torch's hipify calls
        return getattr(os.path, name)


class _TreeOnlyOs:
    """The os module for torch's hipify, with _TreeOnlyPath as its path."""

    def __init__(self, staging: Path) -> None:
        self.path = _TreeOnlyPath(staging)

    def __getattr__(self, name: str) -> Any:  # the rest of os
        return getattr(os, name)


def _hipify_in_place(hipify_python: ModuleType, staging: Path) -> dict[str, HipifyResult]:
    # torch's hipify keeps its results in a module-level dict that grows with every call: start it empty,
    # so this run's results are exactly this tree's.
    hipify_python.HIPIFY_FINAL_RESULT.clear()
    with (
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
        unittest.mock.patch.object(hipify_python, "os", _TreeOnlyOs(staging)),
    ):  # its banner; the tree only
        try:
            results = hipify_python.hipify(
                project_directory=str(staging),
                output_directory=str(staging),
                includes=["*"],
                extensions=EXTENSIONS,
                show_progress=False,
                is_pytorch_extension=True,
            )
        except OSError as error:
            raise UserError(Problem("hipify", f"could not write its scratch copy: {error.strerror} ({error.filename})")) from None
    # whatever else it reports (a path outside the tree) was neither read nor written: only the tree's files count
    return {
        original: result
        for original, result in results.items()
        if _inside(Path(original), staging) and (result.hipified_path is None or _inside(Path(result.hipified_path), staging))
    }


def _inside(path: Path, tree: Path) -> bool:
    return os.path.realpath(path).startswith(os.path.realpath(tree) + os.sep)
