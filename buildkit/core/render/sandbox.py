"""The Jinja sandbox every template runs in, its code generator and filters.

The code generator lets a shape render print holes; the filters are those templates get; and a template error is
located in its file and line here.

Team templates arrive in pull requests: in Jinja's immutable sandbox they read the target, not the interpreter or
the host, and `*` and `**` are bounded. Reading a record's fields takes a direct path (plain, frozen data). While
a shape render runs (buildkit.core.render.shapes), the environment's hooks give holes their meaning.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import shlex
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar

import jinja2
import jinja2.nodes
import jinja2.sandbox
from jinja2.compiler import CodeGenerator, Frame, optimizeconst
from jinja2.environment import TemplateModule
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context, Macro

from buildkit.core.install_plan import InstallLayer, LayerCopy, Narrowing, TorchInstall
from buildkit.core.matrix.resolve import User
from buildkit.core.render.shapes import Fragment, Function, Hole, NotParametric, Recorder, Symbolic, TextFilter
from buildkit.core.targets.plan import Target, Twin
from buildkit.core.vendors import Vendor
from buildkit.errors import Problem, printable

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

_CONTROL = re.compile("[\x00-\x1f]")


def dockerfile_string(value: str) -> str:
    """`value` as one double-quoted Dockerfile word (a LABEL value): its backslashes, quotes and `$` escaped, so
    the builder neither ends the word nor expands a variable in it. Matrix values never hold a line break
    (validation refuses control characters); one here would start a new instruction, so it is refused."""
    if _CONTROL.search(value):
        raise ValueError(f"a control character in a Dockerfile string: {value!r}")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


MAX_PRODUCT_ITEMS = 1_000_000  # characters or items one `*` may produce: a Dockerfile is a few KB
MAX_EXPONENT = 256
# The text filters a shape applies to a hole's value when it fills a target's text (buildkit.core.render.shapes), with how
# long they make a text of n characters at most: quote's worst is a ' as '"'"' (5), dockerfile_string escapes each
# character with one backslash at most, and both add two quotes.
# Filling applies them to thousands of targets' values, many the same (a vendor, a Python): their results are kept.
TEXT_FILTERS = {
    "shell_quote": TextFilter(functools.lru_cache(4096)(shlex.quote), 5, 2),
    "dockerfile_string": TextFilter(functools.lru_cache(4096)(dockerfile_string), 2, 2),
}


def _public_attributes(record: type) -> set[str]:
    """What a template may read of a record straight: its fields and its public properties (plain data computed
    from them)."""
    computed = (
        name for klass in record.__mro__ for name, value in vars(klass).items() if isinstance(value, (property, cached_property)) and not name.startswith("_")
    )
    return {*(field.name for field in dataclasses.fields(record)), *computed}


class _CodeGenerator(CodeGenerator):
    """Jinja's code, with `{{ }}` output and `~` going through the environment's print and join hooks, so a shape
    render (buildkit.core.render.shapes) can print a hole without it ever becoming a string the template can read."""

    def _output_child_pre(self, node: jinja2.nodes.Expr, frame: Frame, finalize: CodeGenerator._FinalizeInfo) -> None:
        self.write("environment.print_value(")

    def _output_child_post(self, node: jinja2.nodes.Expr, frame: Frame, finalize: CodeGenerator._FinalizeInfo) -> None:
        self.write(")")

    @optimizeconst
    def visit_Concat(self, node: jinja2.nodes.Concat, frame: Frame) -> None:
        self.write("environment.join_values((")
        for argument in node.nodes:
            self.visit(argument, frame)
            self.write(", ")
        self.write("))")


class Sandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, with a direct path for reading the public fields and properties of the records a
    template is given (a Target, its User and twins, an install plan, a vendor): plain, frozen data, so checking
    each read costs a sandbox what it saves nothing. `*` and `**` are bounded: `{{ "x" * 10**10 }}` or
    `{{ 9 ** 9 ** 9 }}` in a team template is a template error, not a process that eats the machine's memory or
    never ends (the sandbox already bounds range()).

    While `recording` is set, the render is a shape render: the hooks below give holes their meaning."""

    TRUSTED: ClassVar[dict[type, set[str]]] = {
        record: _public_attributes(record) for record in (Target, User, Twin, TorchInstall, InstallLayer, LayerCopy, Narrowing, Vendor)
    }
    intercepted_binops = frozenset({"*", "**"})
    code_generator_class = _CodeGenerator
    recording: Recorder | None = None

    # the hooks take a template's values, whatever it computes: Any, as in Jinja's own signatures of them
    def print_value(self, value: Any) -> str:
        if self.recording is not None and type(value) in (Hole, Fragment):
            return self.recording.print(value)
        return str(value)  # any other stand-in refuses

    def join_values(self, values: Iterable[Any]) -> str | Fragment:
        text = "".join(map(self.print_value, values))
        return text if self.recording is None else self.recording.captured(text)

    # Jinja's own joins of captured output: macro results, set blocks, super(). Jinja declares them str; in a shape render
    # one that holds holes is a Fragment, opaque output Jinja only passes on (buildkit.core.render.shapes)
    def concat(self, pieces: Iterable[str]) -> str | Fragment:  # type: ignore[override]
        text = "".join(pieces)
        return text if self.recording is None else self.recording.captured(text)

    def getattr(self, obj: Any, attribute: str) -> Any:
        if self.recording is not None and isinstance(obj, Symbolic):
            return obj.attribute(self, attribute)
        if attribute in self.TRUSTED.get(type(obj), ()) or (type(obj) is TemplateModule and not attribute.startswith("_")):
            return getattr(obj, attribute)  # a record's data, or a macro an imported template exports
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        if self.recording is not None:
            self.recording.refuse_symbolic([argument])
            if isinstance(obj, Symbolic):
                return obj.item(self, argument)
        return super().getitem(obj, argument)

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        recording = __self.recording
        if recording is not None:
            # Jinja's own arguments for a context-aware callee: the loop's and block's variables, not the call's
            given = {name: value for name, value in kwargs.items() if name not in ("_loop_vars", "_block_vars")}
            if type(__obj) is Function:
                return __obj.call(args, given)
            if isinstance(__obj, Symbolic):
                raise NotParametric(__obj._patterns())
            if isinstance(getattr(__obj, "__self__", None), Symbolic):
                return __obj(*args, **given)  # a stand-in's own method: a table's items()
            if type(__obj) is not Macro:  # a template's macro takes holes; anything else would read them
                recording.refuse_symbolic((*args, *given.values()))
        # a template's own macro is template code, already inside the sandbox
        result = __context.call(__obj, *args, **kwargs) if type(__obj) is Macro else super().call(__context, __obj, *args, **kwargs)
        return result if recording is None else recording.checked(result)

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if self.recording is not None:
            self.recording.refuse_symbolic((left, right))
        if operator == "**" and isinstance(right, int) and not isinstance(left, float) and abs(right) > MAX_EXPONENT:
            raise SecurityError(f"exponent {right} is larger than {MAX_EXPONENT}")
        if operator == "*":
            for sequence, count in ((left, right), (right, left)):
                if isinstance(sequence, (str, list, tuple)) and isinstance(count, int) and len(sequence) * count > MAX_PRODUCT_ITEMS:
                    raise SecurityError(f"the product would hold more than {MAX_PRODUCT_ITEMS:,} items")
        return super().call_binop(context, operator, left, right)


def _hooked(environment: Sandbox, name: str, function: Callable[..., Any], test: bool) -> Callable[..., Any]:
    """A filter or test that, during a shape render, goes through the recorder (which decides what it may do with
    holes); otherwise it is the function itself, one attribute check later."""

    @functools.wraps(function)  # keeps Jinja's pass_context marks
    def hooked(*args: Any, **kwargs: Any) -> Any:
        recording = environment.recording
        if recording is None:
            return function(*args, **kwargs)
        return (recording.test if test else recording.filter)(name, function, args, kwargs)

    return hooked


def make_environment(loader: jinja2.BaseLoader) -> Sandbox:
    environment = Sandbox(
        loader=loader,
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # Dockerfiles, not HTML; every value is grammar-checked before it gets here
        keep_trailing_newline=True,
        auto_reload=False,  # one run renders many targets from templates that do not change under it
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update({"shell_quote": shlex.quote, "dockerfile_string": dockerfile_string})
    # jinja2 leaves Environment.tests unannotated: mypy infers dict[str, builtins.function], a type it cannot call
    tests: dict[str, Any] = environment.tests
    environment.filters = {name: _hooked(environment, name, function, False) for name, function in environment.filters.items()}
    environment.tests = {name: _hooked(environment, name, function, True) for name, function in tests.items()}
    return environment


def template_problem(name: str, error: BaseException, target: Target) -> Problem:
    """Where in which template an error happened: Jinja maps its frames back to template lines."""
    if isinstance(error, jinja2.TemplateSyntaxError):
        return Problem(error.filename or error.name or name, f"template syntax error: {_one_line(error.message or '')}", line=error.lineno)
    where, line = name, None
    frame = error.__traceback__
    while frame is not None:
        filename = frame.tb_frame.f_code.co_filename
        if filename.endswith(".j2"):
            where, line = filename, frame.tb_lineno
        frame = frame.tb_next
    if isinstance(error, jinja2.UndefinedError):
        message = f"template uses an undefined value: {error.message}"
    elif isinstance(error, SecurityError):
        message = f"template tried something the sandbox forbids: {error}"
    elif isinstance(error, RecursionError):
        # most often a team file named like a built-in template that extends that name: it extends itself
        message = f"template recurses without end (does it include itself? {SHADOWING_HINT})"
    else:
        message = f"template failed: {type(error).__name__}: {error}"
    return Problem(where, f"{_one_line(message)} (target {target.id})", line=line)


SHADOWING_HINT = "a team template of a built-in name shadows it: give yours a flavor's name, <flavor>.Dockerfile.j2, to extend the built-in one"


def _one_line(text: str) -> str:
    """An error text as one bounded, printable line: a template's exception may carry newlines, control
    characters or a whole file."""
    return printable(" ".join(text.split()), limit=300)
