"""Which lines of a C/C++/HIP file a build compiles.

The #if/#ifdef/#elif/#else branches evaluated under the macros that build defines, in three values (compiled, not
compiled, and "depends on a macro nobody here knows"), so that what lies in a branch the ROCm build never takes is
not reported as something to port.

A real preprocessor would follow #include into torch's, ROCm's and the project's headers and know every
macro; this one reads one file and knows what it is told (the compiler's and the build flags' macros, the
CUDA compiler's own macros that a ROCm build never defines) plus what the file itself #defines and
#undefs on its way. Any other name leaves its condition open rather than guessed (C would read it as 0,
which is how code in `#if WITH_CUDA` went unchecked). Written here because the Python preprocessors (pcpp)
expand whole translation units and have no notion of a branch that is neither taken nor skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

ACTIVE, INACTIVE, OPEN = "active", "inactive", "open"  # compiled, never compiled, not decidable here

# Three-valued truth: True, False, or None for "not known".
Truth = bool | None


def physical_lines(text: str) -> list[str]:
    """The file's lines as a compiler numbers them: split at line feeds only (a carriage return before one is part
    of the break). str.splitlines() also breaks at form feeds, vertical tabs, U+2028 and others, which C code may
    hold and compilers do not count: every line after one would be named wrongly."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def code_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, code) with // and /* */ comments removed, so prose never counts as a use. Each line is read
    once from left to right (positions, not slices: a 100 MB line of comments costs its length, not its square)."""
    in_block = False
    for number, line in enumerate(physical_lines(text), start=1):
        pieces = []
        position = 0
        slash = block = -2  # where the next // and /* are at or after `position` (-1: none left, -2: not looked for)
        while position < len(line):
            if in_block:
                end = line.find("*/", position)
                if end < 0:
                    break
                position, in_block = end + 2, False
                continue
            if -1 < slash < position or slash == -2:
                slash = line.find("//", position)
            if -1 < block < position or block == -2:
                block = line.find("/*", position)
            if slash >= 0 and (block < 0 or slash < block):
                pieces.append(line[position:slash])
                break
            if block < 0:
                pieces.append(line[position:])
                break
            pieces.append(line[position:block])
            position, in_block = block + 2, True
        yield number, "".join(pieces)


@dataclass(frozen=True)
class Macros:
    """What one compilation knows: macros defined (name -> replacement; None for a function-like macro)
    and names known to be undefined. Every other name is unknown."""

    defined: Mapping[str, str | None] = field(default_factory=dict)
    undefined: frozenset[str] = frozenset()
    name: str = ""  # which compilation: "hipcc (host)", "hipcc (device)", "c++"

    def with_defines(self, defines: Mapping[str, str]) -> Macros:
        return Macros({**self.defined, **defines}, self.undefined - set(defines), self.name)


_DEFINE_RE = re.compile(r"^\s*#\s*define\s+(\w+)(\()?\s*(.*)$")
_MACRO_DEFINITION_RE = re.compile(r"^(\w+)(\()?")


def parse_define(flag_value: str) -> tuple[str, str | None]:
    """-D's value (NAME, NAME=VALUE, NAME(x)=...) as (name, replacement): NAME alone is 1, as compilers define it."""
    name, _, value = flag_value.partition("=")
    match = _MACRO_DEFINITION_RE.match(name)
    if match and match[2]:
        return match[1], None
    return name, value if "=" in flag_value else "1"


def parse_dump(text: str) -> dict[str, str | None]:
    """A compiler's `-dM -E` output (#define lines) as macros."""
    found: dict[str, str | None] = {}
    for line in physical_lines(text):
        match = _DEFINE_RE.match(line)
        if match:
            found[match[1]] = None if match[2] else match[3].strip()
    return found


@dataclass(frozen=True)
class LineState:
    state: str  # ACTIVE | INACTIVE | OPEN
    condition: str = ""  # the innermost condition that is not true here: why a line is inactive or open


@dataclass(frozen=True)
class Unbalanced:
    """A conditional directive without its partner: an #if never closed, an #else, #elif or #endif with no #if.
    Every compiler stops there ("unterminated conditional directive", "#endif without #if")."""

    line: int
    directive: str
    problem: str


class Activity:
    """Each line's state in a file, under one or more compilations (a line is compiled if any compiles it), and
    the conditionals that do not balance (the same under every compilation: they do not depend on macros)."""

    def __init__(self, text: str, contexts: Sequence[Macros]) -> None:
        evaluated = [_evaluate(text, macros) for macros in contexts]
        per_context = [states for states, _ in evaluated]
        self.unbalanced: tuple[Unbalanced, ...] = evaluated[0][1] if evaluated else ()
        self._states: dict[int, LineState] = {}
        for number in range(1, len(physical_lines(text)) + 1):
            states = [lines.get(number, LineState(ACTIVE)) for lines in per_context]
            if any(s.state == ACTIVE for s in states) or not states:
                continue
            chosen = next((s for s in states if s.state == OPEN), states[0])
            self._states[number] = chosen

    def at(self, line: int) -> LineState:
        return self._states.get(line, LineState(ACTIVE))


def _and(a: Truth, b: Truth) -> Truth:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _state(truth: Truth) -> str:
    return ACTIVE if truth is True else INACTIVE if truth is False else OPEN


@dataclass
class _Branch:
    enclosing: Truth  # whether the region holding the #if is compiled
    taken: Truth  # whether an earlier branch of this #if was taken
    here: Truth  # whether this branch is taken
    condition: str  # this branch's directive
    opening: str  # the #if that opened the chain
    outer_why: str = ""  # the innermost condition not true around the #if (kept, not searched for at each directive)

    @property
    def why(self) -> str:
        """The innermost condition that is not true here: this branch's, else the one around its #if."""
        return self.condition if self.here is not True else self.outer_why


def _directives(text: str) -> Iterator[tuple[int, int, str]]:
    """(first line, last line, directive text) with comments removed and backslash continuations joined."""
    lines = list(code_lines(text))
    index = 0
    while index < len(lines):
        number, code = lines[index]
        if code.lstrip().startswith("#"):
            first, parts = number, [code]
            while parts[-1].rstrip().endswith("\\") and index + 1 < len(lines):  # each line looked at once
                parts[-1] = parts[-1].rstrip()[:-1]
                index += 1
                parts.append(lines[index][1])
            yield first, lines[index][0], " ".join(parts).strip()
        index += 1


_DIRECTIVE_RE = re.compile(r"^#\s*(\w+)\s*(.*)$")


def _evaluate(text: str, macros: Macros) -> tuple[dict[int, LineState], tuple[Unbalanced, ...]]:
    """The state of each line not compiled for sure under `macros` (lines left out are active), and the directives
    that do not balance. Nesting is a list, not recursion: #if inside #if thousands deep is read like two."""
    defined = dict(macros.defined)
    undefined = set(macros.undefined)
    stack: list[_Branch] = []
    opened: list[tuple[int, str]] = []  # (line, directive) of each #if still open, as `stack`
    unbalanced: list[Unbalanced] = []
    states: dict[int, LineState] = {}

    def region() -> Truth:
        return _and(stack[-1].enclosing, stack[-1].here) if stack else True

    def condition() -> str:
        return stack[-1].why if stack else ""

    def evaluate(expression: str) -> Truth:
        value = _Expression(expression, defined, undefined).value()
        return None if value is None else value != 0

    last = 0
    for first, end, directive in _directives(text):
        current, why = region(), condition()
        if current is not True:
            for number in range(last + 1, first):
                states[number] = LineState(_state(current), why)
        match = _DIRECTIVE_RE.match(directive)
        keyword, rest = (match[1], match[2].strip()) if match else ("", "")
        # #elif, #else and #endif belong to the region that holds their #if; every other directive to its own
        holder, holder_why = (
            (current, why) if keyword not in ("elif", "elifdef", "elifndef", "else", "endif") or not stack else (stack[-1].enclosing, stack[-1].outer_why)
        )
        truth: Truth
        if keyword in ("if", "ifdef", "ifndef"):
            truth = evaluate(rest if keyword == "if" else f"{'!' if keyword == 'ifndef' else ''}defined({rest.split()[0] if rest else ''})")
            stack.append(_Branch(current, truth, truth, directive, directive, why))
            opened.append((first, directive))
        elif keyword in ("elif", "elifdef", "elifndef", "else", "endif") and not stack:
            unbalanced.append(Unbalanced(first, directive, f"#{keyword} without #if: the compiler stops here"))
        elif keyword in ("elif", "elifdef", "elifndef", "else") and stack:
            branch = stack[-1]
            if keyword == "else":
                truth = True
            elif keyword == "elif":
                truth = evaluate(rest)
            else:
                truth = evaluate(f"{'!' if keyword == 'elifndef' else ''}defined({rest.split()[0] if rest else ''})")
            here = False if branch.taken is True else _and(truth, None if branch.taken is None else True)
            taken = True if branch.taken is True or truth is True else None if branch.taken is None or truth is None else False
            stack[-1] = _Branch(
                branch.enclosing, taken, here, directive if keyword != "else" else f"#else of {branch.opening}", branch.opening, branch.outer_why
            )
        elif keyword == "endif" and stack:
            stack.pop()
            opened.pop()
        elif keyword in ("define", "undef") and rest:
            name = _MACRO_DEFINITION_RE.match(rest)
            if name and current is not False:
                defined.pop(name[1], None)
                undefined.discard(name[1])
                if current is True and keyword == "define":
                    defined[name[1]] = None if name[2] else rest[len(name[1]) :].strip()
                elif current is True:
                    undefined.add(name[1])
        if holder is not True:
            for number in range(first, end + 1):
                states[number] = LineState(_state(holder), holder_why)
        last = end
    current = region()
    if current is not True:
        for number in range(last + 1, len(physical_lines(text)) + 1):
            states[number] = LineState(_state(current), condition())
    unbalanced += [
        Unbalanced(line, directive, 'never closed: no #endif before the end of the file (the compiler stops with "unterminated conditional directive")')
        for line, directive in opened
    ]
    return states, tuple(sorted(unbalanced, key=lambda found: found.line))


# --- #if expressions -----------------------------------------------------------------------------------------

_TOKEN_RE = re.compile(
    r"\s*(?:(?P<number>\d[\w.]*)|(?P<name>[A-Za-z_]\w*)|(?P<char>'(?:\\.|[^'\\])*')"
    r"|(?P<op>&&|\|\||<<|>>|<=|>=|==|!=|[-+*/%<>&|^!~?:(),]))"
)
_HAS_RE = re.compile(r"^__has_\w+$|^__building_module$")
_BINARY = {  # precedence, lowest first
    "||": 1,
    "&&": 2,
    "|": 3,
    "^": 4,
    "&": 5,
    "==": 6,
    "!=": 6,
    "<": 7,
    ">": 7,
    "<=": 7,
    ">=": 7,
    "<<": 8,
    ">>": 8,
    "+": 9,
    "-": 9,
    "*": 10,
    "/": 10,
    "%": 10,
}
_ARITHMETIC: dict[str, Callable[[int, int], int]] = {
    "|": lambda a, b: a | b,
    "^": lambda a, b: a ^ b,
    "&": lambda a, b: a & b,
    "==": lambda a, b: int(a == b),
    "!=": lambda a, b: int(a != b),
    "<": lambda a, b: int(a < b),
    ">": lambda a, b: int(a > b),
    "<=": lambda a, b: int(a <= b),
    ">=": lambda a, b: int(a >= b),
    "<<": lambda a, b: a << b if 0 <= b < 64 else 0,
    ">>": lambda a, b: a >> b if 0 <= b < 64 else 0,
    "+": lambda a, b: a + b,
    "-": lambda a, b: a - b,
    "*": lambda a, b: a * b,
}
_UNKNOWN = "?"  # a token standing for a value nobody here knows
# Bounds of one #if: beyond them the condition is open (not decidable here), never an error. Macros expanding inside
# macros: a chain of 2,000 once overflowed Python's stack. Tokens after expansion: macros that double at each level
# (A1 = A0+A0, A2 = A1+A1, ...) once ran for minutes. Nesting of the evaluation (parentheses, ?:, operators of
# rising precedence): C requires compilers to take 63 levels of parentheses, 400 overflowed the stack.
MAX_EXPANSION_DEPTH = 200
MAX_EXPANDED_TOKENS = 10_000
MAX_NESTING = 200


class _Unreadable(Exception):
    """The expression is past a bound: its value is open."""


def integer(literal: str) -> int | None:
    """A C integer literal's value (suffixes u, l, ll, z dropped), or None when it is not one."""
    text = literal.lower().rstrip("ulz").replace("'", "")
    if len(text) > 66:  # 0b and 64 binary digits: a longer literal is no C integer (and int() has a limit on digits)
        return None
    try:
        if text.startswith(("0x", "0b")):
            return int(text, 0)
        return int(text, 8) if text.startswith("0") and len(text) > 1 else int(text)
    except ValueError:
        return None


@dataclass(slots=True)
class _Frame:
    """One token list of _Expression._expand's stack (its docstring says what each field is for). Not frozen: `index`
    moves on as the list is read."""

    tokens: list[str]
    index: int
    expanding: frozenset[str]
    began: int


class _Expression:
    """A #if expression with its macros replaced, evaluated with None for what is not known. `expansions` and
    `deepest` count what it took (macros expanded, the nesting reached), for the bounds above."""

    def __init__(self, expression: str, defined: Mapping[str, str | None], undefined: set[str]) -> None:
        self.expansions = 0
        self.deepest = 0
        self._depth = 0
        self.position = 0
        try:
            self.tokens: list[str] | None = self._expand(self._tokens(expression), defined, undefined)
        except _Unreadable:
            self.tokens = None

    @staticmethod
    def _tokens(text: str) -> list[str]:
        found = []
        position = 0
        while position < len(text):
            match = _TOKEN_RE.match(text, position)
            if not match or match.end() == position:
                if text[position:].strip():
                    found.append(_UNKNOWN)  # a token this evaluator does not read: the whole expression is open
                break
            found.append(match.group().strip())
            position = match.end()
        return found

    def _expand(self, tokens: list[str], defined: Mapping[str, str | None], undefined: set[str]) -> list[str]:
        """The tokens with every macro replaced, macros inside macros too, without recursion: a stack of the token
        lists being read, each with where it is, the macros being expanded there, and (for a macro's own list)
        how long the output was when it began (a macro that expands to nothing stands for an unknown value)."""
        out: list[str] = []
        frames = [_Frame(tokens, 0, frozenset(), -1)]
        while frames:
            frame = frames[-1]
            tokens, index, expanding, began = frame.tokens, frame.index, frame.expanding, frame.began
            if index >= len(tokens):
                frames.pop()
                if began >= 0 and len(out) == began:
                    out.append(_UNKNOWN)
                continue
            if len(out) > MAX_EXPANDED_TOKENS:
                raise _Unreadable
            token = tokens[index]
            frame.index = index + 1
            if token == "defined":
                name, frame.index = self._defined_operand(tokens, index + 1)
                out.append("1" if name in defined else "0" if name in undefined else _UNKNOWN)
            elif re.match(r"[A-Za-z_]", token):
                called = index + 1 < len(tokens) and tokens[index + 1] == "("
                if _HAS_RE.match(token) or (token in defined and defined[token] is None) or (called and token not in defined):
                    out.append(_UNKNOWN)
                    frame.index = self._skip_call(tokens, index + 1) if called else index + 1
                elif token in ("true", "false"):
                    out.append("1" if token == "true" else "0")
                elif token in defined and token not in expanding:
                    self.expansions += 1
                    if len(frames) > MAX_EXPANSION_DEPTH:
                        raise _Unreadable
                    frames.append(_Frame(self._tokens(defined[token] or ""), 0, expanding | {token}, len(out)))
                elif token in undefined:
                    out.append("0")
                else:
                    out.append(_UNKNOWN)
            else:
                out.append(token)
        return out

    @staticmethod
    def _defined_operand(tokens: list[str], index: int) -> tuple[str, int]:
        if index < len(tokens) and tokens[index] == "(":
            name = tokens[index + 1] if index + 1 < len(tokens) else ""
            return name, index + 3
        return (tokens[index] if index < len(tokens) else ""), index + 1

    @staticmethod
    def _skip_call(tokens: list[str], index: int) -> int:
        depth = 0
        while index < len(tokens):
            depth += {"(": 1, ")": -1}.get(tokens[index], 0)
            index += 1
            if depth == 0:
                break
        return index

    def value(self) -> int | None:
        if self.tokens is None:
            return None
        try:
            result = self._conditional()
        except (IndexError, ValueError, ZeroDivisionError, _Unreadable):
            return None
        return result if self.position == len(self.tokens) else None

    def _peek(self) -> str:
        assert self.tokens is not None
        return self.tokens[self.position] if self.position < len(self.tokens) else ""

    def _enter(self) -> None:
        """One level deeper into the expression (a ?:, an operand of a higher precedence, a parenthesis)."""
        self._depth += 1
        self.deepest = max(self.deepest, self._depth)
        if self._depth > MAX_NESTING:
            raise _Unreadable

    def _conditional(self) -> int | None:
        self._enter()
        try:
            condition = self._binary(1)
            if self._peek() != "?":
                return condition
            self.position += 1
            if_true = self._conditional()
            if self._peek() != ":":
                raise ValueError("expected ':'")
            self.position += 1
            if_false = self._conditional()
        finally:
            self._depth -= 1
        if condition is None:
            return if_true if if_true == if_false else None
        return if_true if condition else if_false

    def _binary(self, precedence: int) -> int | None:
        left = self._unary()
        while _BINARY.get(self._peek(), 0) >= precedence:
            operator = self._peek()
            self.position += 1
            self._enter()
            try:
                right = self._binary(_BINARY[operator] + 1)
            finally:
                self._depth -= 1
            left = self._apply(operator, left, right)
        return left

    @staticmethod
    def _apply(operator: str, left: int | None, right: int | None) -> int | None:
        if operator == "&&":
            return 0 if left == 0 or right == 0 else None if left is None or right is None else 1
        if operator == "||":
            return 1 if (left not in (None, 0)) or (right not in (None, 0)) else None if left is None or right is None else 0
        if left is None or right is None:
            return None
        if operator in ("/", "%"):
            return None if right == 0 else int(left / right) if operator == "/" else left - int(left / right) * right
        result = _ARITHMETIC[operator](left, right)
        return result if result.bit_length() <= 64 else None  # past any C integer: 5,000 products would grow without end

    def _unary(self) -> int | None:
        prefixes = []  # !, ~, - and + before an operand, applied innermost first: a loop, not recursion (5,000 of them)
        while self._peek() in ("!", "~", "-", "+"):
            prefixes.append(self._peek())
            self.position += 1
        operand = self._operand()
        for prefix in reversed(prefixes):
            if operand is None:
                return None
            operand = {"!": int(not operand), "~": ~operand, "-": -operand, "+": operand}[prefix]
            if operand.bit_length() > 64:
                return None  # past any C integer (and ~ of a huge value stays huge)
        return operand

    def _operand(self) -> int | None:
        token = self._peek()
        self.position += 1
        if token == "(":
            self._enter()
            try:
                inner = self._conditional()
            finally:
                self._depth -= 1
            if self._peek() != ")":
                raise ValueError("expected ')'")
            self.position += 1
            return inner
        if token == _UNKNOWN:
            return None
        if token.startswith("'"):
            return None
        value = integer(token)
        if value is None:
            raise ValueError(f"not a number: {token}")
        return value
