"""Symbolic rendering: one render of a template stands for every target that reads the same values.

From one target to the next, most of what a Dockerfile template reads it only prints: the torch version, the
Python, the tags and labels, the base image. What steers it is a few values (the installer, the names of torch's
layers, whether there is a user), the same for thousands of targets. So a template is rendered with every value
it is given as a *hole*: a stand-in that can be printed, joined, quoted, stored, passed to macros and looped over
(the loop records the sequence's length; a mapping's keys, a record's type are recorded too), but not looked
into. Looking into one (comparing it, testing it, slicing it, a filter that reads it) stops the render; that
value is made real and the render starts again. A render that completes is a `Shape`: its text with a slot for
each printed hole, and the guards it observed (every real value, length, key list and type it read). Any target
whose values meet the guards renders exactly the shape's text with its own values in the slots, since nothing
else of it was looked at; `Shape.fill` writes that text without running the template.

A hole never becomes a Python string a template can read: its `__str__` refuses, and only the environment's
print and join hooks (buildkit.core.render.sandbox) write it, as a marker (a token the caller draws at random, which no
template can know or forge, and the slot's number). Captured output that holds a marker (a macro's result, a
`set` block, a joined string) becomes a Fragment, opaque in turn. What the hooks do not know (a filter that is
not listed here, a C-level string operation on a hole) fails the render, and the caller renders that template
target by target as before.
"""

from __future__ import annotations

import functools
import operator
import re
import types
import typing
from dataclasses import dataclass
from types import FunctionType
from typing import Any

from jinja2.environment import TemplateModule
from jinja2.runtime import Undefined
from jinja2.utils import Namespace

if typing.TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

# A path names a value from the template's variables: the variable, then steps, each (ATTRIBUTE, name),
# (ITEM, key) or (CALL, arguments).
ATTRIBUTE, ITEM, CALL = ".", "[", "("
ANY_INDEX = "*"  # in a pattern: every element of a sequence
Path = tuple[Any, ...]
# What a guard compares: the value's type, a sequence's length, a mapping's keys, or the value itself.
TYPE, LENGTH, KEYS, VALUE = "type", "len", "keys", "value"
_END = "\ue001"  # closes a marker: the slot's number sits between the token and it
# The last transform of a slot whose value is a whole sequence joined (`packages | map('shell_quote') | join(' ')`):
# JOIN then the separator; the transforms before it apply to each element. One slot for the sequence, however long,
# so a shape's size, and the reading of its values per target, do not grow with the list.
JOIN = "\ue002join:"

# Filters that read their argument only through the protocols holes support (iteration, length, a mapping's
# items, the environment's getattr), so they take holes as they are.
PASS_THROUGH_FILTERS = frozenset({"list", "length", "count", "first", "last", "dictsort", "map", "select", "reject", "default", "d"})
# Tests that depend on a value's type alone (a guard fixes it): answered from the representative's value.
TYPE_TESTS = frozenset(
    {
        "defined",
        "undefined",
        "none",
        "string",
        "mapping",
        "sequence",
        "iterable",
        "callable",
        "number",
        "integer",
        "float",
        "boolean",
        "true",
        "false",
        "escaped",
    }
)


class NotParametric(BaseException):
    """The render looked into holes: the values at these patterns must be real. A BaseException, so no `except
    Exception` in Jinja or a template's callees swallows it."""

    def __init__(self, patterns: Iterable[Path]) -> None:
        super().__init__()
        self.patterns = frozenset(patterns)


class Unsupported(Exception):
    """A shape that cannot be written for this target (a slot's value is not text)."""


def pattern(path: Path) -> Path:
    """The path with every sequence index as ANY_INDEX: a value made real for one layer is real for each."""
    return tuple(ANY_INDEX_STEP if type(step) is tuple and step[0] == ITEM and type(step[1]) is int else step for step in path)


ANY_INDEX_STEP = (ITEM, ANY_INDEX)


def _refuse(self: Symbolic, *_args: object, **_kwargs: object) -> Any:
    raise NotParametric(self._patterns())


class Symbolic:
    """A stand-in for a value during a shape render. Every operation that reads the value refuses (NotParametric);
    subclasses allow what does not depend on it."""

    __slots__ = ("_declared", "_path", "_real", "_recorder")

    def __init__(self, recorder: Recorder, path: Path, real: Any, declared: Any = None) -> None:
        # `declared`: the value's type annotation where one is known (a record's field, a declared variable)
        self._recorder, self._path, self._real, self._declared = recorder, path, real, declared

    def _patterns(self) -> set[Path]:
        return {pattern(self._path)}

    def attribute(self, environment: Any, name: str) -> Any:
        raise NotParametric(self._patterns())

    def item(self, environment: Any, key: Any) -> Any:
        raise NotParametric(self._patterns())


# Every operation Python offers on a value refuses on a stand-in (the subclasses below allow some): comparing,
# hashing, converting, iterating, indexing, arithmetic, calling. Set on the class after it is made, as a loop.
for _operation in (
    "__str__",
    "__repr__",
    "__format__",
    "__bool__",
    "__len__",
    "__iter__",
    "__reversed__",
    "__contains__",
    "__hash__",
    "__eq__",
    "__ne__",
    "__lt__",
    "__le__",
    "__gt__",
    "__ge__",
    "__getitem__",
    "__add__",
    "__radd__",
    "__sub__",
    "__rsub__",
    "__mul__",
    "__rmul__",
    "__truediv__",
    "__rtruediv__",
    "__floordiv__",
    "__rfloordiv__",
    "__mod__",
    "__rmod__",
    "__pow__",
    "__rpow__",
    "__neg__",
    "__pos__",
    "__abs__",
    "__invert__",
    "__int__",
    "__float__",
    "__index__",
    "__call__",
):
    setattr(Symbolic, _operation, _refuse)


class Hole(Symbolic):
    """A text value, printed as a marker; `transforms` are the text filters (shell_quote…) applied to it."""

    __slots__ = ("transforms",)

    def __init__(self, recorder: Recorder, path: Path, real: Any, declared: Any = None, transforms: tuple[str, ...] = ()) -> None:
        super().__init__(recorder, path, real, declared)
        self.transforms = transforms


class Fragment(Symbolic):
    """Captured output holding markers (a macro's result, a `set` block, a joined string): printable, opaque."""

    __slots__ = ("text",)

    def __init__(self, recorder: Recorder, text: str) -> None:
        super().__init__(recorder, (), None)
        self.text = text

    def _patterns(self) -> set[Path]:
        return self._recorder.patterns_in(self.text)

    def __bool__(self) -> bool:
        if self._recorder.strip_markers(self.text):
            return True  # text of its own: not empty whatever the holes hold
        raise NotParametric(self._patterns())


class Sequence(Symbolic):
    """A tuple or list: its length is observed, its elements are holes of their own."""

    __slots__ = ()

    def _elements(self) -> list[object]:
        self._recorder.guard(self._path, LENGTH)
        self._recorder.iterated[self._path] = self._real
        return [self._recorder.view(element, (*self._path, (ITEM, index)), _element(self._declared, index)) for index, element in enumerate(self._real)]

    def __iter__(self) -> Iterator[object]:
        return iter(self._elements())

    def __reversed__(self) -> Iterator[object]:
        return reversed(self._elements())

    def __len__(self) -> int:
        self._recorder.guard(self._path, LENGTH)
        return len(self._real)

    def __bool__(self) -> bool:
        return len(self) > 0

    def item(self, environment: Any, key: Any) -> Any:
        if type(key) is not int:
            raise NotParametric(self._patterns())  # a slice, or a key a sequence does not take
        self._recorder.guard(self._path, LENGTH)
        if -len(self._real) <= key < len(self._real):
            return self._recorder.view(self._real[key], (*self._path, (ITEM, key)), _element(self._declared, key % len(self._real)))
        return environment.getitem(self._real, key)  # the environment's Undefined, as for the real sequence


class Record(Symbolic):
    """A frozen dataclass (a target, its user, an install plan): its type is observed; its attributes are read
    through the sandbox, as the real record's would be."""

    __slots__ = ()

    def attribute(self, environment: Any, name: str) -> Any:
        value = environment.getattr(self._real, name)
        if isinstance(value, Undefined):
            return value
        return self._recorder.view(value, (*self._path, (ATTRIBUTE, name)), _attribute_types(type(self._real)).get(name))

    def item(self, environment: Any, key: Any) -> Any:
        if type(key) is not str:
            raise NotParametric(self._patterns())
        return self.attribute(environment, key)  # Jinja reads a record's item as its attribute

    def __bool__(self) -> bool:
        if hasattr(type(self._real), "__bool__") or hasattr(type(self._real), "__len__"):
            raise NotParametric(self._patterns())
        return True  # a record without __bool__ or __len__ is always true


class Table(Symbolic):
    """A dict (build args, labels): its keys are observed, its values are holes of their own."""

    __slots__ = ()
    _METHODS = ("items", "keys", "values", "get")

    def _keys(self) -> list[Any]:
        self._recorder.guard(self._path, KEYS)
        return list(self._real)

    def _value(self, key: Any) -> Any:
        arguments = typing.get_args(self._declared)
        return self._recorder.view(self._real[key], (*self._path, (ITEM, key)), arguments[1] if len(arguments) == 2 else None)

    def items(self) -> list[tuple[Any, Any]]:
        return [(key, self._value(key)) for key in self._keys()]

    def keys(self) -> list[Any]:
        return self._keys()

    def values(self) -> list[Any]:
        return [self._value(key) for key in self._keys()]

    def get(self, key: Any, default: Any = None) -> Any:
        return self._value(key) if key in self._keys() else default

    def __iter__(self) -> Iterator[Any]:
        return iter(self._keys())

    def __len__(self) -> int:
        return len(self._keys())

    def __bool__(self) -> bool:
        return bool(self._keys())

    def __contains__(self, key: Any) -> bool:
        return key in self._keys()

    def attribute(self, environment: Any, name: str) -> Any:
        if name in self._METHODS:
            return getattr(self, name)
        if name in self._keys():
            return self._value(name)
        raise NotParametric(self._patterns())  # another dict method, or no such key: read the real dict

    def item(self, environment: Any, key: Any) -> Any:
        if isinstance(key, Symbolic):
            raise NotParametric(key._patterns())
        if key in self._keys():
            return self._value(key)
        raise NotParametric(self._patterns())


class Function(Symbolic):
    """A plain function among the variables (support_file): called with real arguments, its result is a hole."""

    __slots__ = ()

    def call(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Any:
        if kwargs or any(type(argument) not in (str, int) for argument in args):
            self._recorder.refuse_symbolic((*args, *kwargs.values()))
            raise NotParametric(self._patterns())  # arguments a path cannot name: the function is real
        return self._recorder.view(self._real(*args), (*self._path, (CALL, args)))


@functools.cache
def _runtime_type(annotation: Any) -> type | None:
    """The one class every value of this annotation has (str, tuple[str, ...] -> tuple), None for a union or an
    unknown annotation. Annotations are what mypy checks the records against."""
    origin = typing.get_origin(annotation) or annotation
    return origin if isinstance(origin, type) and origin is not types.UnionType else None


@functools.cache
def _element(annotation: Any, index: int) -> Any:
    """The annotation of a sequence's element: tuple[str, ...] -> str, tuple[str, int] at 1 -> int."""
    arguments = typing.get_args(annotation)
    if typing.get_origin(annotation) is tuple:
        if len(arguments) == 2 and arguments[1] is Ellipsis:
            return arguments[0]
        return arguments[index] if index < len(arguments) else None
    return arguments[0] if typing.get_origin(annotation) is list and arguments else None


_ATTRIBUTE_TYPES: dict[type, dict[str, Any]] = {}


def _attribute_types(record: type) -> dict[str, Any]:
    """A record's fields' and properties' annotations (read once per record type)."""
    if record in _ATTRIBUTE_TYPES:
        return _ATTRIBUTE_TYPES[record]
    found = _ATTRIBUTE_TYPES[record] = dict(typing.get_type_hints(record))
    for name, value in vars(record).items():
        function = value.fget if isinstance(value, property) else value.func if isinstance(value, functools.cached_property) else None
        if function is not None:
            found[name] = typing.get_type_hints(function).get("return")
    return found


def _is_record(value: Any) -> bool:
    params = getattr(type(value), "__dataclass_params__", None)
    return params is not None and params.frozen


class Recorder:
    """One shape render: turns values into holes (except those at `real` patterns), numbers the holes it prints,
    and keeps the guards it observes."""

    def __init__(self, real: Iterable[Path], marker: str, transforms: Iterable[str]) -> None:
        self.real = set(real)
        self.marker = marker
        self.transforms = frozenset(transforms)  # the text filters that make a hole of a hole
        self.guards: dict[tuple[Path, str], None] = {}  # ordered: a guard's path exists once those before it hold
        self.slots: dict[tuple[Path, tuple[str, ...]], int] = {}  # (path, transforms) -> slot number
        self.iterated: dict[Path, Any] = {}  # sequences whose elements the render took, by path (the real sequence)
        self._markers = re.compile(re.escape(marker) + r"(\d+)" + _END)

    def guard(self, path: Path, kind: str) -> None:
        self.guards[(path, kind)] = None

    def view(self, value: Any, path: Path, declared: Any = None) -> Any:
        """What the render is given for `value`: itself where it is real or a plain number, else its hole. Its type
        is a guard, unless `declared` (its annotation: a record's field, a declared variable) fixes it."""
        if isinstance(value, Undefined):
            return value  # whether it is there follows from the type, keys or length guarded before it
        kind = type(value)
        if value is None or kind in (bool, int, float) or pattern(path) in self.real:
            self.guard(path, VALUE)
            return value
        proxy: type[Symbolic] | None = (
            Hole
            if kind is str
            else Sequence
            if kind in (tuple, list)
            else Table
            if kind is dict
            else Record
            if _is_record(value)
            else Function
            if kind is FunctionType
            else None
        )
        if proxy is None:
            self.guard(path, VALUE)
            return value
        if _runtime_type(declared) is not kind:
            self.guard(path, TYPE)
        return proxy(self, path, value, declared)

    # --- what the environment's hooks call --------------------------------------------------------------------

    def print(self, value: Hole | Fragment) -> str:
        if isinstance(value, Fragment):
            return value.text
        slot = self.slots.setdefault((value._path, value.transforms), len(self.slots))
        return f"{self.marker}{slot}{_END}"

    def captured(self, text: str) -> str | Fragment:
        """Joined output: a Fragment where it holds markers."""
        return Fragment(self, text) if self.marker in text else text

    def patterns_in(self, text: str) -> set[Path]:
        numbers = {int(found.group(1)) for found in self._markers.finditer(text)}
        return {pattern(path) for (path, _), slot in self.slots.items() if slot in numbers}

    def strip_markers(self, text: str) -> str:
        return self._markers.sub("", text)

    def symbolic_in(self, values: Iterable[Any]) -> set[Path]:
        """The patterns of every hole among these values, inside lists, tuples, dicts, sets and namespaces too,
        and of every marker in their strings (an imported template's text)."""
        found: set[Path] = set()
        pending = list(values)
        while pending:
            value = pending.pop()
            if isinstance(value, Symbolic):
                found |= value._patterns()
            elif type(value) is str:
                if self.marker in value:
                    found |= self.patterns_in(value)
            elif isinstance(value, (list, tuple, set, frozenset)):
                pending.extend(value)
            elif isinstance(value, dict):
                pending.extend(value.keys())
                pending.extend(value.values())
            elif isinstance(value, Namespace):
                pending.extend(value._Namespace__attrs.values())
            elif isinstance(value, TemplateModule):
                pending.append(str(value))
        return found

    def refuse_symbolic(self, values: Iterable[Any]) -> None:
        found = self.symbolic_in(values)
        if found:
            raise NotParametric(found)

    def checked(self, result: Any) -> Any:
        """A callee's result: text holding markers becomes a Fragment."""
        return self.captured(result) if type(result) is str else result

    def filter(self, name: str, function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if name in self.transforms and args and type(args[0]) is Hole and len(args) == 1 and not kwargs:
            hole = args[0]
            return Hole(self, hole._path, hole._real, hole._declared, (*hole.transforms, name))
        if name == "join":
            return self._join(args, kwargs, function)
        if name not in PASS_THROUGH_FILTERS:
            self.refuse_symbolic((*args, *kwargs.values()))
        return self.checked(function(*args, **kwargs))

    def _join(self, args: tuple[Any, ...], kwargs: dict[str, Any], function: Callable[..., Any]) -> Any:
        """`join` (do_join: `str(d).join(map(str, value))`) of holes and fragments: their text with the separator
        between them."""
        eval_context, value, *rest = args
        separator = rest[0] if rest else kwargs.get("d", "")
        if rest[1:] or set(kwargs) - {"d"} or isinstance(value, (str, Hole, Fragment)):
            self.refuse_symbolic((*args, *kwargs.values()))  # by attribute, or the characters of a text
            return self.checked(function(*args, **kwargs))
        items = list(value)  # a Sequence's elements (its length observed), or a plain iterable's
        if not self.symbolic_in([*items, separator]):
            return function(eval_context, items, separator)
        whole = self._whole_sequence(items)
        if whole is not None and type(separator) is str:
            path, transforms = whole
            return self.captured(self.print(Hole(self, path, self.iterated[path], None, (*transforms, JOIN + separator))))
        texts = []
        for item in (separator, *items):
            if type(item) in (Hole, Fragment):
                texts.append(self.print(item))
            else:
                self.refuse_symbolic([item])
                texts.append(str(item))
        return self.captured(texts[0].join(texts[1:]))

    def _whole_sequence(self, items: list[Any]) -> tuple[Path, tuple[str, ...]] | None:
        """(the sequence's path, the text filters each element went through) where `items` are every element of
        one sequence the render iterated, in order, each a hole filtered alike; else None."""
        if not items or type(items[0]) is not Hole or not items[0]._path:
            return None
        path, transforms = items[0]._path[:-1], items[0].transforms
        if path not in self.iterated or len(self.iterated[path]) != len(items):
            return None
        for index, item in enumerate(items):
            if type(item) is not Hole or item.transforms != transforms or item._path != (*path, (ITEM, index)):
                return None
        return path, transforms

    def test(self, name: str, function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if name in TYPE_TESTS and args:
            # a fragment is text; any other stand-in, its representative's value (a guard fixes its type)
            first = "" if type(args[0]) is Fragment else args[0]._real if isinstance(args[0], Symbolic) else args[0]
            self.refuse_symbolic((*args[1:], *kwargs.values()))
            return function(first, *args[1:], **kwargs)
        self.refuse_symbolic((*args, *kwargs.values()))
        return function(*args, **kwargs)

    # --- the result ---------------------------------------------------------------------------------------------

    def shape(self, text: str) -> ShapeData:
        """The finished render's text, split at its markers."""
        literals, slots = [], []
        start = 0
        for found in self._markers.finditer(text):
            literals.append(text[start : found.start()])
            slots.append(int(found.group(1)))
            start = found.end()
        literals.append(text[start:])
        values = sorted(self.slots, key=self.slots.__getitem__)  # in slot order
        return ShapeData(tuple(self.guards), tuple(values), tuple(literals), tuple(slots), frozenset(self.real))


@dataclass(frozen=True)
class ShapeData:
    """A shape as plain data (what the template worker answers, as JSON)."""

    guards: tuple[tuple[Path, str], ...]
    values: tuple[tuple[Path, tuple[str, ...]], ...]  # each slot's value: its path and the transforms applied
    literals: tuple[str, ...]  # the text between slots: one more than slots
    slots: tuple[int, ...]  # for each printed hole, in order, its value's number
    real: frozenset[Path]  # the patterns the render read as real values

    def to_json(self) -> dict[str, list[Any]]:
        return {
            "guards": [[_path_json(path), kind] for path, kind in self.guards],
            "values": [[_path_json(path), list(transforms)] for path, transforms in self.values],
            "literals": list(self.literals),
            "slots": list(self.slots),
            "real": [_path_json(path) for path in self.real],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ShapeData:
        return cls(
            tuple((_path_of(path), str(kind)) for path, kind in data["guards"]),
            tuple((_path_of(path), tuple(map(str, transforms))) for path, transforms in data["values"]),
            tuple(map(str, data["literals"])),
            tuple(map(int, data["slots"])),
            frozenset(map(_path_of, data["real"])),
        )


def _path_json(path: Path) -> list[Any]:
    return [path[0], *([kind, list(argument) if kind == CALL else argument] for kind, argument in path[1:])] if path else []


def _path_of(data: list[Any]) -> Path:
    """A path from JSON, each step checked: a worker's answer is data, never trusted to be well formed."""
    if not data:
        return ()
    steps = []
    for kind, argument in data[1:]:
        if (kind == ATTRIBUTE and type(argument) is str) or (kind == ITEM and type(argument) in (str, int)):
            steps.append((kind, argument))
        elif kind == CALL and type(argument) is list and all(type(item) in (str, int) for item in argument):
            steps.append((kind, tuple(argument)))
        else:
            raise ValueError(f"not a path step: {kind!r} {argument!r}")
    if type(data[0]) is not str:
        raise ValueError(f"not a variable: {data[0]!r}")
    return (data[0], *steps)


def frozen(value: Any) -> Any:
    """A value as a dictionary key: containers as tuples (a dict keeps its order), anything unhashable as itself
    by identity (never equal to another target's: a shape of its own)."""
    if type(value) is dict:
        return ("dict", tuple((key, frozen(item)) for key, item in value.items()))
    if type(value) is list:
        return ("list", tuple(frozen(item) for item in value))
    if type(value) is tuple:
        return tuple(frozen(item) for item in value)
    try:
        hash(value)
    except TypeError:
        return ("unhashable", id(value))
    return value


class _Node:
    """One step of the paths a tree reads: what is asked of the value there, and the steps below it."""

    __slots__ = ("children", "kinds", "step")

    def __init__(self, step: Any) -> None:
        self.step = step
        self.kinds: list[str] = []
        self.children: dict[Any, _Node] = {}


_MISSING = object()
TEXT = "text"  # a PathTree request for the value itself
_READ_ERRORS = (LookupError, TypeError, AttributeError, Unsupported)


def _call(function: Any, arguments: tuple[Any, ...]) -> Any:
    if type(function) is not FunctionType:
        raise Unsupported("only the variables' own functions are called")
    return function(*arguments)


class PathTree:
    """Reads paths from a target's variables, as the render read them (attributes through the sandbox's getattr,
    items by key, calls of the variables' own plain functions only), each asked for a kind: a guard's fact (its
    type, length, keys or frozen value) or TEXT (the value itself); _MISSING where a path leads nowhere.

    A tree is read once per target, so it is compiled: per variable, one Python function that reads each step
    once for all the paths through it (the arguments of its steps stay in a table the code indexes, never in its
    text). Trees that ask the same of a variable (the flavors of a matrix extend the same template) share that
    function, and with it its memory: a variable that is the very object the function read last (targets share
    their install plan, across flavors too) gives the same answers again, since records are frozen. A variable
    asked only for itself (a stage's name) is read inline."""

    def __init__(
        self,
        getattr_: Callable[[Any, str], Any],
        requests: Iterable[tuple[Path, str]],
        trusted: Mapping[type, Iterable[str]] = {},
        sample: Mapping[str, Any] | None = None,
    ) -> None:
        """`trusted`: per record type, the attributes getattr_ reads with Python's getattr; `sample`: a target's
        variables, whose records' types the code checks first for those (a type check, not a table look-up)."""
        self._getattr, self._trusted = getattr_, trusted
        roots: dict[str, _Node] = {}
        for path, kind in requests:
            node = roots.setdefault(path[0], _Node(path[0]))
            for step in path[1:]:
                node = node.children.setdefault(step, _Node(step))
            if kind not in node.kinds:
                node.kinds.append(kind)
        self.position: dict[tuple[Path, str], int] = {}  # (path, kind) -> where read() answers it
        readers: list[Callable[[Any], list[Any]] | None] = []
        for name, root in roots.items():
            first = len(self.position)
            if root.kinds == [TEXT] and not root.children:  # the variable itself (a stage's name): read inline
                self.position[((name,), TEXT)] = first
                readers.append(None)
                continue
            body: list[str] = []
            constants: list[Any] = []
            self._emit(root, (name,), "v", 2, body, constants, (sample or {}).get(name, _MISSING), first)
            readers.append(_variable_reader(getattr_, "\n".join(body), tuple((type(item), item) for item in constants), len(self.position) - first))
        answers = [
            f"variables.get(N[{index}], MISSING)" if reader is None else f"*R[{index}](variables.get(N[{index}], MISSING))"
            for index, reader in enumerate(readers)
        ]
        code = f"lambda variables: [{', '.join(answers)}]"
        self.read: Callable[[Mapping[str, Any]], list[Any]] = eval(code, {"R": readers, "N": list(roots), "MISSING": _MISSING})
        self.size = len(self.position)

    def _emit(self, node: _Node, path: Path, value: str, depth: int, lines: list[str], constants: list[Any], sample: Any, first: int) -> None:
        """The code that reads `node`'s requests into `out`, numbered from `first` (the variable's first answer)."""
        indent = "    " * depth
        for kind in node.kinds:
            self.position[(path, kind)] = len(self.position)
            answer = {
                TEXT: value,
                TYPE: f"type({value})",
                LENGTH: f"length({value})",
                KEYS: f"keys({value})",
                VALUE: f"{value} if type({value}) in PLAIN else frozen({value})",
            }[kind]
            lines.append(f"{indent}out[{self.position[(path, kind)] - first}] = {answer}")
        for step, child in node.children.items():
            constants.append(step[1])
            argument = f"K[{len(constants) - 1}]"
            if step[0] == ATTRIBUTE and sample is not _MISSING and step[1] in self._trusted.get(type(sample), ()):
                constants.append(type(sample))
                read = f"getattr({value}, {argument}) if type({value}) is K[{len(constants) - 1}] else ga({value}, {argument})"
            else:
                read = {ATTRIBUTE: f"ga({value}, {argument})", ITEM: f"{value}[{argument}]", CALL: f"call({value}, {argument})"}[step[0]]
            inner = f"v{depth}"
            lines += [
                f"{indent}try:",
                f"{indent}    {inner} = {read}",
                f"{indent}except ERRORS:",
                f"{indent}    {inner} = MISSING",
                f"{indent}if {inner} is not MISSING:",
            ]
            before = len(lines)
            self._emit(child, (*path, step), inner, depth + 1, lines, constants, self._sample_step(sample, step), first)
            if len(lines) == before:
                lines.append(f"{indent}    pass")

    def _sample_step(self, sample: Any, step: tuple[str, Any]) -> Any:
        if sample is _MISSING or step[0] == CALL:
            return _MISSING
        try:
            found = self._getattr(sample, step[1]) if step[0] == ATTRIBUTE else sample[step[1]]
        except _READ_ERRORS:
            return _MISSING
        return _MISSING if isinstance(found, Undefined) else found


_READER = """\
def read(v):
    if v is LAST[0]:
        return LAST[1]
    out = [MISSING] * SIZE
    if v is not MISSING:
{body}
    LAST[:] = v, out
    return out
"""


@functools.lru_cache(256)
def _variable_reader(getattr_: Callable[[Any, str], Any], body: str, typed_constants: tuple[tuple[type, Any], ...], size: int) -> Callable[[Any], list[Any]]:
    """One variable's compiled reader, made once for every tree that asks the same of it (its code, its steps'
    arguments, typed so that 1 and True stay apart, and the sandbox's getattr). The list it answers is shared:
    callers copy it."""

    def read_attribute(value: Any, name: str) -> Any:  # what the sandbox reads, _MISSING for its Undefined
        found = getattr_(value, name)
        return _MISSING if isinstance(found, Undefined) else found

    namespace: dict[str, Any] = {
        "MISSING": _MISSING,
        "SIZE": size,
        "K": [item for _, item in typed_constants],
        "LAST": [_MISSING, [_MISSING] * size],
        "ga": read_attribute,
        "call": _call,
        "ERRORS": _READ_ERRORS,
        "length": _length,
        "keys": _keys,
        "frozen": frozen,
        "PLAIN": _PLAIN,
    }
    exec(compile(_READER.format(body=body or "        pass"), "<buildkit path tree>", "exec"), namespace)
    read: Callable[[Any], list[Any]] = namespace["read"]
    return read


_PLAIN = frozenset({str, int, bool, float, type(None)})  # a value that is its own frozen form


def _length(value: Any) -> Any:
    try:
        return len(value)
    except TypeError:
        return _MISSING


def _keys(value: Any) -> Any:
    try:
        return tuple(value)
    except TypeError:
        return _MISSING


class TextFilter(typing.NamedTuple):
    """A filter a hole's text may go through (shell_quote…): the function, and how long its result can be at
    most (factor * the text's length + extra), for a size bound that needs no filtering."""

    function: Callable[[str], str]
    factor: int
    extra: int


class Shape:
    """A shape ready to fill: how a target's text is written from the answers of its book's tree (the guards it
    must meet, and the value of each slot)."""

    def __init__(self, data: ShapeData, filters: Mapping[str, TextFilter]) -> None:
        self.data = data
        # a joined sequence's slot: its separator (the last name), the filters before it apply to each element
        joins = [names[-1][len(JOIN) :] if names and names[-1].startswith(JOIN) else None for _, names in data.values]
        chains = [names[:-1] if join is not None else names for (_, names), join in zip(data.values, joins)]
        unknown = {name for names in chains for name in names if name not in filters}
        if unknown or any(slot >= len(data.values) for slot in data.slots) or len(data.literals) != len(data.slots) + 1:
            raise Unsupported(f"a shape with unknown filters {sorted(unknown)} or slots")
        self._filters = [tuple(filters[name] for name in names) for names in chains]
        # the values a filter changes, with their chains: most values are written as they are
        self._filtered = [
            (index, tuple(text_filter.function for text_filter in chain)) for index, chain in enumerate(self._filters) if chain and joins[index] is None
        ]
        # the joined sequences: each element through its chain, then the separator between them
        self._joined = [
            (index, tuple(text_filter.function for text_filter in self._filters[index]), join) for index, join in enumerate(joins) if join is not None
        ]
        # each slot's text among the values' texts, picked at C speed (a slot may repeat a value)
        self._slot_texts: Callable[[list[str]], tuple[str, ...]] = _picker(list(data.slots))
        # the text is its literals with each slot's text between them: one join (str.format would scan the
        # kilobytes of literal text for braces at every fill)
        self._pieces: list[str] = [text for literal in data.literals for text in (literal, "")][:-1]
        self._literal_size = sum(map(len, data.literals))
        self._raw: Callable[[list[Any]], tuple[Any, ...]] = _picker([])  # the values' texts among a tree's answers (bind())
        self._counts = [0] * len(data.values)
        for slot in data.slots:
            self._counts[slot] += 1
        # a size bound without filtering: a filter chain makes a text of n characters factor * n + extra at most
        self._weights, self._constant = [], 0
        for count, chain in zip(self._counts, self._filters):
            factor, extra = 1, 0
            for text_filter in chain:
                factor, extra = factor * text_filter.factor, extra * text_filter.factor + text_filter.extra
            self._weights.append(count * factor)
            self._constant += count * extra

    def bind(self, position: Mapping[tuple[Path, str], int]) -> None:
        """Where the book's tree answers this shape's values."""
        self._raw = _picker([position[(path, TEXT)] for path, _ in self.data.values])

    def _texts(self, answers: list[Any]) -> list[str]:
        texts = list(self._raw(answers))
        for index, functions in self._filtered:
            for function in functions:
                texts[index] = function(texts[index])
        for index, functions, separator in self._joined:
            if type(texts[index]) not in (tuple, list):
                raise Unsupported("a joined sequence that is not one here")
            elements = texts[index]
            for function in functions:
                elements = map(function, elements)
            texts[index] = separator.join(elements)
        return texts

    def _size(self, texts: Iterable[str], weights: Iterable[int], constant: int = 0) -> int:
        weighted: int = sum(map(operator.mul, weights, map(len, texts)))  # (operator.mul is typed to answer Any)
        return self._literal_size + constant + weighted

    def fits(self, answers: list[Any], limit: int) -> bool:
        """Whether the target's text has at most `limit` characters: a bound from its values' lengths first,
        their filtered texts only where the bound is over."""
        if not self._joined and self._size(self._raw(answers), self._weights, self._constant) <= limit:
            return True  # (a joined sequence's length is not its text's: its text is written to be measured)
        return self._size(self._texts(answers), self._counts) <= limit

    def fill(self, answers: list[Any], limit: int | None = None) -> str:
        """The target's text. Raises OverflowError when it would be longer than `limit`."""
        texts = self._texts(answers)
        if limit is not None and self._size(texts, self._counts) > limit:
            raise OverflowError
        pieces = self._pieces.copy()
        pieces[1::2] = self._slot_texts(texts)
        return "".join(pieces)


def _picker(positions: list[int]) -> Callable[[list[Any]], tuple[Any, ...]]:
    """The answers at these positions, as a tuple (operator.itemgetter's, which gives one alone as itself)."""
    if len(positions) == 1:
        position = positions[0]
        return lambda answers: (answers[position],)
    if not positions:
        return lambda _answers: ()
    return operator.itemgetter(*positions)


class _Page:
    """The shapes that observed the same guards, by the facts of those guards."""

    def __init__(self, guards: tuple[tuple[Path, str], ...]) -> None:
        self.guards = guards
        self.shapes: dict[tuple[Any, ...], Shape] = {}  # facts -> shape
        self.facts: Callable[[list[Any]], tuple[Any, ...]] = tuple  # a target's facts among the book's tree's answers

    def bind(self, position: Mapping[tuple[Path, str], int]) -> None:
        self.facts = _picker([position[guard] for guard in self.guards])
        for shape in self.shapes.values():
            shape.bind(position)


class ShapeBook:
    """The shapes of one template, found by the facts of a target's variables. One tree reads, once per target,
    what every page's guards ask and every shape prints; the page (guard list) that answered last is asked
    first (targets come in runs)."""

    def __init__(self, getattr_: Callable[[Any, str], Any], filters: Mapping[str, TextFilter], trusted: Mapping[type, Iterable[str]] = {}) -> None:
        self._getattr = getattr_
        self._filters = filters
        self._trusted = trusted
        self._pages: list[_Page] = []
        self._requests: dict[tuple[Path, str], None] = {}  # what the tree reads: every page's guards, every printed path
        self._tree: PathTree | None = None

    def __len__(self) -> int:
        return sum(len(page.shapes) for page in self._pages)

    def find(self, variables: Mapping[str, Any]) -> tuple[Shape, list[Any]] | None:
        """The shape that stands for these variables, and the answers to fill it with."""
        if self._tree is None:
            return None
        answers = self._tree.read(variables)
        for index, page in enumerate(self._pages):
            found = page.shapes.get(page.facts(answers))
            if found is not None:
                if index:
                    self._pages.insert(0, self._pages.pop(index))
                return found, answers
        return None

    def add(self, data: ShapeData, variables: Mapping[str, Any]) -> tuple[Shape, list[Any]]:
        """The shape `data`, rendered from the target whose variables these are, and that target's answers."""
        shape = Shape(data, self._filters)
        page = next((page for page in self._pages if page.guards == data.guards), None)
        if page is None:
            page = _Page(data.guards)
            self._pages.insert(0, page)
        new = [request for request in (*data.guards, *((path, TEXT) for path, _ in data.values)) if request not in self._requests]
        if self._tree is None or new:  # a tree that reads these too: every page and shape learns its positions
            self._requests.update(dict.fromkeys(new))
            self._tree = PathTree(self._getattr, self._requests, self._trusted, variables)
            for each in self._pages:
                each.bind(self._tree.position)
        page.bind(self._tree.position)
        shape.bind(self._tree.position)
        answers = self._tree.read(variables)
        page.shapes[page.facts(answers)] = shape
        return shape, answers
