"""The build flags a project's setup.py gives torch's extension build, read without running it.

`CUDAExtension(...)` and `CppExtension(...)` calls (by that name, or as an attribute: cpp_extension.CUDAExtension)
are found with the ast module, and their `sources`, `define_macros`, `include_dirs` and `extra_compile_args` are
read where they are literals, or names bound once to a literal and never changed. Anything computed (a list
grown under `if torch.cuda.is_available()`, a helper's result) is not guessed: it is named, with its line, so
the user can pass it with -D, --hipcc-flags or --cxx-flags. Nothing in setup.py is executed.
"""

from __future__ import annotations

import ast
import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

_EXTENSION_CALLS = frozenset({"CUDAExtension", "CppExtension"})
_READ = ("sources", "define_macros", "include_dirs", "extra_compile_args")
# setup.py is someone else's code, read as data: a file past MAX_SETUP_BYTES is not parsed (a real one is a few KB;
# a 50 MB literal exhausted memory), an expression deeper than Python's parser builds is a note (ast.parse raises
# RecursionError on 5,000 nested operators), and a literal nested past MAX_LITERAL_DEPTH is not evaluated (flags are
# lists of strings, or a dict of them).
MAX_SETUP_BYTES = 1 << 20
MAX_LITERAL_DEPTH = 16
MAX_SHOWN_CHARS = 60  # of an argument's source, in a note
# Compiler flags that name a file or folder: one leading out of the tree is not used (the compile check reads the tree).
_PATH_FLAGS = ("-I", "-isystem", "-iquote", "-idirafter", "-include", "-imacros")


@dataclass(frozen=True)
class ExtensionFlags:
    name: str
    line: int
    sources: tuple[str, ...] = ()  # relative to setup.py's folder
    defines: tuple[str, ...] = ()  # -DNAME or -DNAME=VALUE, for every compiler
    include_dirs: tuple[str, ...] = ()
    cxx_flags: tuple[str, ...] = ()  # extra_compile_args["cxx"] (or a plain list: every compiler)
    nvcc_flags: tuple[str, ...] = ()  # extra_compile_args["nvcc"], before torch hipifies them
    unread: tuple[str, ...] = ()  # "define_macros (setup.py:12)": arguments that are not literals
    outside: tuple[str, ...] = ()  # "include_dirs '/usr/include' (setup.py:12)": paths leading out of the tree, not used


@dataclass(frozen=True)
class SetupFlags:
    extensions: tuple[ExtensionFlags, ...] = ()
    problem: str = ""  # setup.py could not be parsed


def read_setup_py(source: str | bytes, shown: str = "setup.py") -> SetupFlags:
    """The extensions of a setup.py, given as its bytes (a UTF-8 byte-order mark or a coding line is read as Python
    reads it) or its text; it is parsed, never run."""
    if len(source) > MAX_SETUP_BYTES:
        return SetupFlags(problem=f"{shown}: larger than {MAX_SETUP_BYTES >> 20} MB, so not read as a setup.py; its build flags were not read")
    text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
    text = text.removeprefix("\ufeff")
    try:
        tree = ast.parse(source.removeprefix(b"\xef\xbb\xbf") if isinstance(source, bytes) else text)
    except SyntaxError as error:
        line = f":{error.lineno}" if error.lineno else ""
        return SetupFlags(problem=f"{shown}{line}: not Python that buildkit can parse ({error.msg}); its build flags were not read")
    except (ValueError, RecursionError, MemoryError) as error:  # NUL bytes; nesting past what the parser builds
        why = "it holds a NUL byte" if isinstance(error, ValueError) else "an expression is nested deeper than Python's parser goes"
        return SetupFlags(problem=f"{shown}: not Python that buildkit can parse ({why}); its build flags were not read")
    literals = _literal_names(tree)
    extensions = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called(node) in _EXTENSION_CALLS:
            extensions.append(_extension(node, literals, shown, text))
    return SetupFlags(tuple(extensions))


def _called(call: ast.Call) -> str:
    function = call.func
    return function.id if isinstance(function, ast.Name) else function.attr if isinstance(function, ast.Attribute) else ""


def _depth(node: ast.AST) -> int:
    """How deep an expression nests, walked with a stack (ast.literal_eval recurses once per level)."""
    deepest, stack = 0, [(node, 1)]
    while stack:
        current, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > MAX_LITERAL_DEPTH:
            return deepest
        stack += [(child, depth + 1) for child in ast.iter_child_nodes(current)]
    return deepest


def literal(node: ast.expr) -> object:
    """ast.literal_eval of an expression no deeper than MAX_LITERAL_DEPTH; ValueError for anything else."""
    if _depth(node) > MAX_LITERAL_DEPTH:
        raise ValueError("nested too deeply to be a list of flags")
    try:
        return ast.literal_eval(node)
    except (TypeError, SyntaxError, MemoryError, RecursionError) as error:  # {[]: 1}, or what literal_eval refuses otherwise
        raise ValueError(str(error)) from None


def _literal_names(tree: ast.Module) -> dict[str, object]:
    """Names bound exactly once, to a literal, and never changed in place (+=, x[k] = ..., x.append(...))."""
    bound: dict[str, list[ast.expr | None]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    bound.setdefault(target.id, []).append(node.value)
                elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
                    bound.setdefault(target.value.id, []).append(None)
        elif isinstance(node, ast.AugAssign | ast.AnnAssign) and isinstance(node.target, ast.Name):
            bound.setdefault(node.target.id, []).append(None if isinstance(node, ast.AugAssign) else node.value)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name):
            bound.setdefault(node.func.value.id, []).append(None)  # a method call may change it
    found = {}
    for name, values in bound.items():
        if len(values) == 1 and values[0] is not None:
            try:
                found[name] = literal(values[0])
            except ValueError:
                continue
    return found


def _source(text: str, node: ast.expr) -> str:
    """An argument as written (its first characters: ast.unparse recurses, and a note needs a glimpse)."""
    segment = ast.get_source_segment(text, node) or "?"
    return segment if len(segment) <= MAX_SHOWN_CHARS else segment[:MAX_SHOWN_CHARS] + "…"


def _extension(call: ast.Call, literals: dict[str, object], shown: str, text: str) -> ExtensionFlags:
    values: dict[str, object] = {}
    unread = []
    arguments = {keyword.arg: keyword.value for keyword in call.keywords if keyword.arg}
    for index, positional in enumerate(call.args[:2]):  # CUDAExtension(name, sources, ...)
        arguments.setdefault(("name", "sources")[index], positional)

    def value_of(node: ast.expr) -> object:
        return literals[node.id] if isinstance(node, ast.Name) and node.id in literals else literal(node)

    for key in ("name", *_READ):
        node = arguments.get(key)
        if node is None:
            continue
        if isinstance(node, ast.Dict):  # extra_compile_args={"cxx": [...], "nvcc": flags}: each compiler's on its own
            read = {}
            for entry, value in zip(node.keys, node.values):
                try:
                    if entry is None:  # **others: not readable
                        raise ValueError
                    read[value_of(entry)] = value_of(value)
                except (ValueError, TypeError):  # TypeError: an unhashable key
                    unread.append(f"{key}[{_source(text, entry) if entry else '**'}] ({shown}:{value.lineno})")
            values[key] = read
            continue
        try:
            values[key] = value_of(node)
        except ValueError:
            if key != "name":
                unread.append(f"{key} ({shown}:{node.lineno})")
    compile_args = values.get("extra_compile_args", {})
    if isinstance(compile_args, dict):
        cxx, nvcc = compile_args.get("cxx", []), compile_args.get("nvcc", [])
    else:  # one list: torch passes it to every compiler
        cxx = nvcc = compile_args
    macros = values.get("define_macros", [])
    outside: list[str] = []
    where = f"({shown}:{call.lineno})"
    sources = _inside(_strings(values.get("sources")), "sources", where, outside)
    include_dirs = _inside(_strings(values.get("include_dirs")), "include_dirs", where, outside)
    return ExtensionFlags(
        name=str(values.get("name", "")),
        line=call.lineno,
        sources=sources,
        defines=tuple(f"-D{name}" if value is None else f"-D{name}={value}" for name, value in _pairs(macros)),
        include_dirs=include_dirs,
        cxx_flags=_flags_inside(_strings(cxx), where, outside),
        nvcc_flags=_flags_inside(_strings(nvcc), where, outside),
        unread=tuple(unread),
        outside=tuple(dict.fromkeys(outside)),
    )


def leads_outside(path: str) -> bool:
    """Whether a path setup.py names (relative to its folder) leaves the tree: absolute, or up past its top."""
    normal = posixpath.normpath(path.replace("\\", "/"))
    return posixpath.isabs(normal) or normal == ".." or normal.startswith("../") or "\0" in path


def _inside(paths: tuple[str, ...], key: str, where: str, outside: list[str]) -> tuple[str, ...]:
    kept = []
    for path in paths:
        if leads_outside(path):
            outside.append(f"{key} {path[:MAX_SHOWN_CHARS]!r} {where}")
        else:
            kept.append(path)
    return tuple(kept)


def _flags_inside(flags: tuple[str, ...], where: str, outside: list[str]) -> tuple[str, ...]:
    """The flags, but those naming a path out of the tree (-I/usr/local/cuda/include, or -include ../x.h as two)."""
    kept: list[str] = []
    for flag in flags:
        lone = kept[-1] if kept and kept[-1] in _PATH_FLAGS else None  # a flag whose path is this one
        prefix = next((p for p in _PATH_FLAGS if flag.startswith(p) and flag != p), None)
        path = flag if lone else flag[len(prefix) :] if prefix else None
        if path is not None and leads_outside(path):
            if lone:
                kept.pop()
            outside.append(f"flag {' '.join(filter(None, (lone, flag)))[:MAX_SHOWN_CHARS]!r} {where}")
        else:
            kept.append(flag)
    return tuple(kept)


def _strings(value: object) -> tuple[str, ...]:
    return tuple(item for item in value if isinstance(item, str)) if isinstance(value, list | tuple) else ()


def _pairs(value: object) -> list[tuple[str, object]]:
    if not isinstance(value, list | tuple):
        return []
    return [(str(item[0]), item[1]) for item in value if isinstance(item, tuple | list) and len(item) == 2]


@dataclass(frozen=True)
class UnitFlags:
    """The project's own flags for one translation unit, on top of torch's."""

    defines: tuple[str, ...]  # both compilers
    hipcc: tuple[str, ...]  # hipcc only (extra_compile_args["nvcc"], hipified as torch does, and --hipcc-flags)
    cxx: tuple[str, ...]  # the C++ compiler only (extra_compile_args["cxx"] and --cxx-flags)
    include_dirs: tuple[str, ...]  # relative to the tree


@dataclass(frozen=True)
class ProjectFlags:
    """setup.py's extensions (with their nvcc flags as hipcc gets them) and the command line's -D, --hipcc-flags, --cxx-flags."""

    extensions: tuple[ExtensionFlags, ...] = ()
    defines: tuple[str, ...] = ()
    hipcc_flags: tuple[str, ...] = ()
    cxx_flags: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # what could not be read

    def for_unit(self, source: str) -> UnitFlags:
        """A unit's flags: those of the extension listing its source, else of every extension (a file setup.py
        does not list, or whose sources are not literal), then the command line's."""
        own = [e for e in self.extensions if source in {_normal(s) for s in e.sources}] or list(self.extensions)

        def joined(pick: Callable[[ExtensionFlags], tuple[str, ...]]) -> tuple[str, ...]:
            return tuple(dict.fromkeys(flag for extension in own for flag in pick(extension)))

        return UnitFlags(
            (*joined(lambda e: e.defines), *self.defines),
            (*joined(lambda e: e.nvcc_flags), *self.hipcc_flags),
            (*joined(lambda e: e.cxx_flags), *self.cxx_flags),
            joined(lambda e: e.include_dirs),
        )

    def described(self) -> list[str]:
        """Where each flag came from, one line each, for the report."""
        lines = list(self.notes)
        for extension in self.extensions:
            flags = [*extension.defines, *(f"-I{d}" for d in extension.include_dirs)]
            flags += [f"hipcc: {' '.join(extension.nvcc_flags)}"] if extension.nvcc_flags else []
            flags += [f"c++: {' '.join(extension.cxx_flags)}"] if extension.cxx_flags else []
            line = f"setup.py:{extension.line} {extension.name or 'extension'}: {', '.join(flags) or 'no flags of its own'}"
            if extension.unread:
                line += f" (not literal, not read: {', '.join(extension.unread)}; pass them with -D, --hipcc-flags or --cxx-flags)"
            if extension.outside:
                line += (
                    f" (outside the source tree, not used: {', '.join(extension.outside)}; hipify and its compile check read "
                    "the tree only: copy what it needs into it)"
                )
            lines.append(line)
        options = [*self.defines, *(f"hipcc: {f}" for f in self.hipcc_flags), *(f"c++: {f}" for f in self.cxx_flags)]
        if options:
            lines.append(f"command line: {', '.join(options)}")
        return lines


def _normal(path: str) -> str:
    return path.removeprefix("./")
