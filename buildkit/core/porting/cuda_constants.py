"""What a name in CUDA code stands for, as far as the tree itself says.

A warp mask's width in bits and a block size's value, followed through macros (`#define FULL_MASK 0xffffffff`),
constants and declared types (`constexpr unsigned kMask = ~0u;`, a parameter `unsigned mask`), casts
(`uint32_t(-1)`, `static_cast<unsigned>(-1)`, `(unsigned)-1`) and literals. A name defined twice with different
meanings, or not at all, is not guessed: the answer is None and the finding says it could not tell."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from buildkit.core.porting.preprocessor import code_lines, integer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping

# Integer types by width on Linux (LP64: long is 64 bits). HIP's __activemask() and __ballot() return
# unsigned long long (hip/amd_detail/amd_warp_functions.h, HIP 6.4).
TYPE_BITS = {
    "int": 32,
    "unsigned": 32,
    "unsigned int": 32,
    "signed": 32,
    "signed int": 32,
    "uint32_t": 32,
    "int32_t": 32,
    "uint": 32,
    "long": 64,
    "unsigned long": 64,
    "long long": 64,
    "unsigned long long": 64,
    "long int": 64,
    "unsigned long int": 64,
    "long long int": 64,
    "unsigned long long int": 64,
    "uint64_t": 64,
    "int64_t": 64,
    "size_t": 64,
    "lane_mask_t": 64,
    "__hip_uint64_t": 64,
    "__hip_uint32_t": 32,
}
_SIXTY_FOUR_BIT_CALLS = frozenset({"__activemask", "__ballot", "__ballot64", "__ballot_sync", "__lanemask_lt", "__lanemask_gt", "__lanemask_eq"})
_TYPE = (
    r"(?:unsigned\s+long\s+long(?:\s+int)?|unsigned\s+long(?:\s+int)?|unsigned\s+int|unsigned|signed\s+int|signed"
    r"|long\s+long(?:\s+int)?|long(?:\s+int)?|int|u?int(?:32|64)_t|size_t|lane_mask_t|__hip_uint(?:32|64)_t|uint|auto)"
)
# Each pattern reads a bounded stretch from where it starts (a value, a dim3's arguments): on a line of "int a = b "
# repeated for 64 KB, a value read to the line's end from each declaration took minutes. A longer value is not read
# (the name's width is then not told, as for a name defined nowhere).
MAX_VALUE_CHARS = 256
_DEFINE_RE = re.compile(rf"^\s*#\s*define\s+(?P<name>[A-Za-z_]\w*)(?!\()\s+(?P<value>\S(?:.{{0,{MAX_VALUE_CHARS - 2}}}\S)?)\s*$")
_DECLARATION_RE = re.compile(
    rf"(?<![\w:.>])(?P<type>{_TYPE})\s+(?P<name>[A-Za-z_]\w*)\s*"
    # (?=(?P<run>...))(?P=run): the run taken whole, never given back a character at a time
    rf"(?:=\s*(?=(?P<run>(?:[^;,{{}}()]|\([^;{{}}()]{{0,{MAX_VALUE_CHARS}}}\)){{1,{MAX_VALUE_CHARS}}}))(?P<value>(?P=run))"
    rf"|\{{(?P<braced>[^}}]{{0,{MAX_VALUE_CHARS}}})\}})?\s*(?=[;,)])"
)
_DIM3_RE = re.compile(rf"\bdim3\s+(?P<name>[A-Za-z_]\w*)\s*[({{](?P<args>[^;]{{0,{MAX_VALUE_CHARS}}}?)[)}}]\s*;")
_CAST_RE = re.compile(
    rf"^(?:static_cast|reinterpret_cast)\s*<\s*(?P<type>{_TYPE})\s*>\s*\((?P<inner>.*)\)$|^\(\s*(?P<ctype>{_TYPE})\s*\)\s*(?P<cinner>.+)$"
    rf"|^(?P<ftype>{_TYPE})\s*[({{](?P<finner>.*)[)}}]$"
)
_C_CAST_RE = re.compile(rf"^\(\s*{_TYPE}\s*\)$")  # (unsigned) before a unary minus is a cast, not a subtraction
_CALL_RE = re.compile(r"^(?P<name>[A-Za-z_]\w*)\s*\(.*\)$")
_NAME_RE = re.compile(r"^[A-Za-z_]\w*$")
_ALL_ONES = {32: (1 << 32) - 1, 64: (1 << 64) - 1}
_OPERATIONS: dict[str, Callable[[int, int], int]] = {
    "|": lambda a, b: a | b,
    "^": lambda a, b: a ^ b,
    "&": lambda a, b: a & b,
    "<<": lambda a, b: a << b if b < 64 else 0,
    ">>": lambda a, b: a >> b,
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}
_AMBIGUOUS = "\0"  # a name the tree defines in more than one way


@dataclass(frozen=True)
class Definitions:
    """The names a tree defines: macros and initialised constants (name -> text), declared integer types, dim3 variables."""

    values: Mapping[str, str] = field(default_factory=dict)
    types: Mapping[str, str] = field(default_factory=dict)
    dims: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, texts: Iterable[str]) -> Definitions:
        values: dict[str, str] = {}
        types: dict[str, str] = {}
        dims: dict[str, str] = {}

        def keep(table: dict[str, str], name: str, value: str) -> None:
            value = " ".join(value.split())
            table[name] = value if table.get(name, value) == value else _AMBIGUOUS

        for text in texts:
            for _, code in code_lines(text):
                define = _DEFINE_RE.match(code)
                if define:
                    keep(values, define["name"], define["value"])
                    continue
                for declaration in _DECLARATION_RE.finditer(code):
                    kind = " ".join(declaration["type"].split())
                    value = declaration["value"] or declaration["braced"]
                    if kind != "auto":
                        keep(types, declaration["name"], kind)
                    if value and value.strip():
                        keep(values, declaration["name"], value.strip())
                for dim in _DIM3_RE.finditer(code):
                    keep(dims, dim["name"], dim["args"])
        return cls(values, types, dims)

    def value_of(self, name: str) -> str | None:
        value = self.values.get(name)
        return None if value == _AMBIGUOUS else value


@dataclass(frozen=True)
class Resolved:
    bits: int | None  # the expression's width, None when it cannot be told
    value: int | None  # its value, when it is a constant
    via: str = ""  # how a name was followed: "FULL_MASK = 0xffffffff"


def _strip_parentheses(text: str) -> str:
    text = text.strip()
    while text.startswith("(") and text.endswith(")") and _balanced(text[1:-1]):
        text = text[1:-1].strip()
    return text


def _balanced(text: str) -> bool:
    depth = 0
    for char in text:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if depth < 0:
            return False
    return depth == 0


def _top_level_split(text: str, operators: tuple[str, ...]) -> tuple[str, str, str] | None:
    """The rightmost top-level binary operator of the lowest precedence among `operators`: (left, op, right)."""
    depth = 0
    for index in range(len(text) - 1, 0, -1):
        char = text[index]
        depth += {")": 1, "(": -1, ">": 0, "<": 0}.get(char, 0)
        if depth:
            continue
        for operator in operators:
            start = index - len(operator) + 1
            if (
                start > 0
                and text[start : index + 1] == operator
                and text[start - 1] not in "<>=!&|^+-*/"
                and (index + 1 >= len(text) or text[index + 1] not in "<>=&|")
                and not _C_CAST_RE.match(text[:start].strip())
            ):
                return text[:start].strip(), operator, text[index + 1 :].strip()
    return None


def resolve(expression: str, names: Definitions, depth: int = 0) -> Resolved:
    """The width and value of an integer expression, through the tree's definitions (one longer than
    MAX_VALUE_CHARS is not read: its parentheses are peeled and split once per level)."""
    if depth > 8 or len(expression) > MAX_VALUE_CHARS:
        return Resolved(None, None)
    text = _strip_parentheses(expression)
    if not text:
        return Resolved(None, None)
    for operators in (("|",), ("^",), ("&",), ("<<", ">>"), ("+", "-"), ("*",)):
        split = _top_level_split(text, operators)
        if split:
            left, right = resolve(split[0], names, depth + 1), resolve(split[2], names, depth + 1)
            if split[1] in ("<<", ">>"):
                bits = left.bits
            else:
                bits = max(left.bits, right.bits) if left.bits and right.bits else 64 if 64 in (left.bits, right.bits) else None
            value = None
            if bits and left.value is not None and right.value is not None:
                value = _OPERATIONS[split[1]](left.value, right.value) & _ALL_ONES[bits]
            return Resolved(bits, value, left.via or right.via)
    cast = _CAST_RE.match(text)
    if cast:
        kind = " ".join((cast["type"] or cast["ctype"] or cast["ftype"]).split())
        inner = resolve(cast["inner"] or cast["cinner"] or cast["finner"] or "0", names, depth + 1)
        bits = TYPE_BITS.get(kind)
        value = inner.value & _ALL_ONES[bits] if bits and inner.value is not None else None
        return Resolved(bits, value, inner.via)
    if text[0] in "~-+!":
        inner = resolve(text[1:], names, depth + 1)
        if inner.bits is None or inner.value is None:
            return Resolved(inner.bits, None, inner.via)
        value = {"~": ~inner.value, "-": -inner.value, "+": inner.value, "!": int(not inner.value)}[text[0]]
        return Resolved(inner.bits, value & _ALL_ONES[inner.bits], inner.via)
    call = _CALL_RE.match(text)
    if call:
        return Resolved(64, None) if call["name"] in _SIXTY_FOUR_BIT_CALLS else Resolved(None, None)
    literal = integer(text)
    if literal is not None:
        suffix = text.lower().lstrip("0123456789abcdefx'")
        return Resolved(64 if literal > _ALL_ONES[32] or "l" in suffix else 32, literal)
    if _NAME_RE.match(text):
        declared = names.types.get(text)
        defined = names.value_of(text)
        inner = resolve(defined, names, depth + 1) if defined else Resolved(None, None)
        bits = TYPE_BITS.get(declared) if declared and declared != _AMBIGUOUS else inner.bits
        shown = f"{text} = {defined}" if defined else f"{text} is {declared}" if bits else ""
        value = inner.value & _ALL_ONES[bits] if bits and inner.value is not None else None
        return Resolved(bits, value, inner.via or shown)
    return Resolved(None, None)


def block_threads(expression: str, names: Definitions) -> tuple[int | None, str]:
    """The threads along x of a launch's block argument (dim3(32, 4) is 32), and how a name was followed."""
    text = _strip_parentheses(expression)
    while True:  # hipify writes dim3(dim3(32, 4)) and dim3(block)
        dim = re.match(r"^dim3\s*[({](.*)[)}]$", text)
        if not dim:
            break
        text = _strip_parentheses(_first_argument(dim[1]))
    if _NAME_RE.match(text) and text in names.dims and names.dims[text] != _AMBIGUOUS:
        args = names.dims[text]
        value = resolve(_first_argument(args), names).value
        return value, f"{text}({args})"
    resolved = resolve(text, names)
    return resolved.value, resolved.via


def _first_argument(arguments: str) -> str:
    depth = 0
    for index, char in enumerate(arguments):
        depth += {"(": 1, ")": -1, "<": 0}.get(char, 0)
        if char == "," and depth == 0:
            return arguments[:index]
    return arguments
