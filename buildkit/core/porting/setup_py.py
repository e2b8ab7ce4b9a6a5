"""The build flags a project's setup.py gives torch's extension build, read without running it.

`CUDAExtension(...)` and `CppExtension(...)` calls (by that name, or as an attribute: cpp_extension.CUDAExtension)
are found with the ast module, and their `sources`, `define_macros`, `include_dirs` and `extra_compile_args` are
read where they are literals, or names bound once to a literal and never changed. Anything computed (a list
grown under `if torch.cuda.is_available()`, a helper's result) is not guessed: it is named, with its line, so
the user can pass it with -D, --hipcc-flags or --cxx-flags. Nothing in setup.py is executed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

_EXTENSION_CALLS = frozenset({"CUDAExtension", "CppExtension"})
_READ = ("sources", "define_macros", "include_dirs", "extra_compile_args")


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


@dataclass(frozen=True)
class SetupFlags:
    extensions: tuple[ExtensionFlags, ...] = ()
    problem: str = ""  # setup.py could not be parsed


def read_setup_py(text: str, shown: str = "setup.py") -> SetupFlags:
    try:
        tree = ast.parse(text)
    except SyntaxError as error:
        return SetupFlags(problem=f"{shown}:{error.lineno}: not Python that buildkit can parse ({error.msg}); its build flags were not read")
    literals = _literal_names(tree)
    extensions = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _called(node) in _EXTENSION_CALLS:
            extensions.append(_extension(node, literals, shown))
    return SetupFlags(tuple(extensions))


def _called(call: ast.Call) -> str:
    function = call.func
    return function.id if isinstance(function, ast.Name) else function.attr if isinstance(function, ast.Attribute) else ""


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
                found[name] = ast.literal_eval(values[0])
            except ValueError:
                continue
    return found


def _extension(call: ast.Call, literals: dict[str, object], shown: str) -> ExtensionFlags:
    values: dict[str, object] = {}
    unread = []
    arguments = {keyword.arg: keyword.value for keyword in call.keywords if keyword.arg}
    for index, positional in enumerate(call.args[:2]):  # CUDAExtension(name, sources, ...)
        arguments.setdefault(("name", "sources")[index], positional)
    def literal(node: ast.expr) -> object:
        return literals[node.id] if isinstance(node, ast.Name) and node.id in literals else ast.literal_eval(node)

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
                    read[literal(entry)] = literal(value)
                except ValueError:
                    unread.append(f"{key}[{ast.unparse(entry) if entry else '**'}] ({shown}:{value.lineno})")
            values[key] = read
            continue
        try:
            values[key] = literal(node)
        except ValueError:
            if key != "name":
                unread.append(f"{key} ({shown}:{node.lineno})")
    compile_args = values.get("extra_compile_args", {})
    if isinstance(compile_args, dict):
        cxx, nvcc = compile_args.get("cxx", []), compile_args.get("nvcc", [])
    else:  # one list: torch passes it to every compiler
        cxx = nvcc = compile_args
    macros = values.get("define_macros", [])
    return ExtensionFlags(
        name=str(values.get("name", "")), line=call.lineno, sources=_strings(values.get("sources")),
        defines=tuple(f"-D{name}" if value is None else f"-D{name}={value}" for name, value in _pairs(macros)),
        include_dirs=_strings(values.get("include_dirs")), cxx_flags=_strings(cxx), nvcc_flags=_strings(nvcc), unread=tuple(unread),
    )


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

        def joined(pick) -> tuple[str, ...]:
            return tuple(dict.fromkeys(flag for extension in own for flag in pick(extension)))

        return UnitFlags((*joined(lambda e: e.defines), *self.defines), (*joined(lambda e: e.nvcc_flags), *self.hipcc_flags),
                         (*joined(lambda e: e.cxx_flags), *self.cxx_flags), joined(lambda e: e.include_dirs))

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
            lines.append(line)
        options = [*self.defines, *(f"hipcc: {f}" for f in self.hipcc_flags), *(f"c++: {f}" for f in self.cxx_flags)]
        if options:
            lines.append(f"command line: {', '.join(options)}")
        return lines


def _normal(path: str) -> str:
    return path.removeprefix("./")
