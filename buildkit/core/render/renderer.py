"""Rendering: a target and its templates -> build args, labels, the image fingerprint, and Dockerfile text.

Planning a target (its args, labels and fingerprint) does not render it: the fingerprint hashes what
determines the Dockerfile (the sources of every template the flavor's template reaches, and every value
of the target) instead of the text, so `plan` stays fast on large matrices and only `render`, `build` and
`publish` pay for Jinja. Templates come through a loader the caller supplies (the matrix's TemplateSet: team
folders first, then the built-in ones) and run in Jinja's immutable sandbox, since team templates arrive in
pull requests: they can read the target, not the interpreter or the host. StrictUndefined turns a misspelt
variable into an error instead of an empty string in a Dockerfile.

The sandbox does not bound what a template costs: `{{ "x"|center(10**9) }}`, an exponent tower, nested loops
or a macro that doubles a string run for minutes or take gigabytes through operations no sandbox hook sees.
So a render that reaches a template not shipped with buildkit goes to the `bounded` runner the caller
supplies (buildkit.adapters.template_worker: a process with a budget of time, memory and output), and only
renders of buildkit's own templates run here, where 10,000 targets must not pay a process round trip each.

Nor do 10,000 targets pay a Jinja render each: a template is rendered once per shape (buildkit.core.render.shapes),
with every value a hole and the values it looks into made real, and each target's text is written from the
shape whose guards its values meet, byte for byte what its own render would give. `matrix validate` checks
every target that way (check_all), so a template's fault is found by the render of its first shape.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import itertools
import operator
import re
import shlex
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar, Protocol

import jinja2
import jinja2.meta
import jinja2.sandbox
from jinja2.compiler import CodeGenerator, optimizeconst
from jinja2.environment import TemplateModule
from jinja2.runtime import Macro

from buildkit.core import labels
from buildkit.core.compat.facts import Compat
from buildkit.core.install_plan import InstallLayer, LayerCopy, Narrowing, TorchInstall, install_inputs, torch_install
from buildkit.core.matrix.resolve import User
from buildkit.core.matrix.templates import TemplateSet
from buildkit.core.render.guard import guard_config
from buildkit.core.render.shapes import (
    Fragment,
    Function,
    Hole,
    NotParametric,
    Recorder,
    ShapeBook,
    ShapeData,
    Symbolic,
    TextFilter,
    Unsupported,
)
from buildkit.core.targets.plan import Target, Twin
from buildkit.core.targets.source import GB_PER_JOB, SOURCE_FLAVOR
from buildkit.core.vendors import Vendor
from buildkit.errors import Problem, UserError, printable

FINGERPRINT_SCHEMA = 5
# The stage that ends where a pair's twins diverge (everything below the torch install).
SHARED_STAGE = "shared"
# The base with the venv and its installer, below SHARED_STAGE: torch's resolve and layer stages start from it,
# so they run while the image's OS packages install.
TOOLS_STAGE = "tools"
# The build context carries the image-side scripts (buildkit/image: the installer) in this folder, next to
# the Dockerfile; RUN steps bind-mount it, so no layer holds them. A source build sends a PyTorch checkout
# as its context, so there the folder travels as a named build context instead.
SUPPORT_DIR = "buildkit"
SUPPORT_CONTEXT = "buildkit-support"
SUPPORT_FILES = ("install.py", "gpu_guard.py")
INSTALL_PLAN = "torch-install.json"  # per target, next to the support files: what install.py resolves and installs
CHECK_BATCH = 1024  # plans a validation sends to be rendered on their own at a time (memory stays bounded)
_DRAFT = "0" * 64  # a draft plan's fingerprint: as long as a sha256 in hex


@dataclass(frozen=True)
class PlannedImage:
    """Everything about a target's image but its Dockerfile text."""

    target: Target
    template: str
    build_args: Mapping[str, str]
    labels: Mapping[str, str]  # without the build stamp (created, revision); the fingerprint label included
    fingerprint: str
    install: TorchInstall | None = None  # how torch is installed from its index (None: the source flavor builds it)


_PLANNED_GETTER = operator.attrgetter(*(field.name for field in dataclasses.fields(PlannedImage)))


class _Upcoming:
    """Planned images in order, from an iterable that may plan them as it goes; plan_ahead() plans a few more
    before they are asked for (while the bounded runner renders a shape). A planning error is raised when its
    image's turn comes, so the errors of a render come in target order as when everything was planned first."""

    STEP = 32  # images planned per step: a millisecond or so, a fraction of a shape's round trip

    def __init__(self, planned: Iterable[PlannedImage]):
        self._source = iter(planned)
        self._ahead: collections.deque[PlannedImage | BaseException] = collections.deque()
        self._done = False

    def __iter__(self) -> _Upcoming:
        return self

    def __next__(self) -> PlannedImage:
        item = self._ahead.popleft() if self._ahead else next(self._source)
        if isinstance(item, BaseException):
            raise item
        return item

    def plan_ahead(self) -> bool:
        """Up to STEP more images planned; False once the iterable has none left (or failed)."""
        if self._done:
            return False
        for _ in range(self.STEP):
            try:
                self._ahead.append(next(self._source))
            except StopIteration:
                self._done = True
                return False
            except Exception as error:  # raised in its turn by __next__
                self._ahead.append(error)
                self._done = True
                return False
        return True


def _planned_values(item: PlannedImage) -> tuple[Target, str, Mapping[str, str], Mapping[str, str], str, TorchInstall | None]:
    """A plan's fields in their order, read at C speed: the start of its Rendered's."""
    return _PLANNED_GETTER(item)


@dataclass(frozen=True)
class Rendered(PlannedImage):
    dockerfile: str = ""
    support: Mapping[str, bytes] = dataclasses.field(default_factory=dict)  # SUPPORT_DIR's files, by name (shared: read only)


def support_mount(target: Target, name: str = "") -> str:
    """The RUN mount that shows the support scripts (or only the file `name`) at /buildkit, from the build
    context or, for a source build of a checkout, from the named context. A step that mounts only the file
    it runs keeps its cache key independent of the other files (each target's install plan differs)."""
    return _support_mount(target.source_checkout, name)


@functools.lru_cache(64)  # a few files, for every target
def _support_mount(source_checkout: bool, name: str = "") -> str:
    source = f"{SUPPORT_DIR}/{name}" if name else SUPPORT_DIR
    target_path = f"/{SUPPORT_DIR}/{name}" if name else f"/{SUPPORT_DIR}"
    if source_checkout:
        return f"type=bind,from={SUPPORT_CONTEXT},source={name or '.'},target={target_path}"
    return f"type=bind,source={source},target={target_path}"


# What a template calls as support_file("install.py"): one plain function per kind of build context, not a closure
# made for every target (the shape's tree calls only the variables' own plain functions).
_SUPPORT_FILE = {checkout: (lambda name, checkout=checkout: _support_mount(checkout, name)) for checkout in (False, True)}


def assembled_on_base(planned: PlannedImage) -> bool:
    """Whether the image is assembled from scratch with the layers that are the same under every Python below its
    base's files (core/bases.py): torch goes in in layers, and buildkit knows what the base's configuration sets."""
    return planned.install is not None and bool(planned.install.below_base) and planned.target.base_environment is not None


def template_variables(planned: PlannedImage) -> dict[str, Any]:
    """What every template, built-in or a team's, can read (docs/templates-and-flavors.md's template reference lists each)."""
    target = planned.target
    return {
        "target": target,
        "build_args": planned.build_args,
        "template": planned.template,
        "shared_stage": SHARED_STAGE,
        "tools_stage": TOOLS_STAGE,
        "install": planned.install,
        "assembled": assembled_on_base(planned),
        "support": support_mount(target),
        "support_file": _SUPPORT_FILE[target.source_checkout],
        "gb_per_job": GB_PER_JOB,
        "gpu_guard": guard_config(target),  # the GPU guard's config (core/render/guard.py), one shell-quoted argument
        "labels": planned.labels,  # what describes the image, the fingerprint included; not the build stamp
    }


_CONTROL = re.compile("[\x00-\x1f]")


# What each variable is (template_variables): a type these fix is no guard of a shape (buildkit.core.render.shapes).
VARIABLE_TYPES = {"target": Target, "build_args": dict[str, str], "template": str, "shared_stage": str, "tools_stage": str,
                  "install": TorchInstall | None, "assembled": bool, "support": str, "gb_per_job": int, "gpu_guard": str, "labels": dict[str, str]}


def dockerfile_string(value: str) -> str:
    """`value` as one double-quoted Dockerfile word (a LABEL value): its backslashes, quotes and `$` escaped, so
    the builder neither ends the word nor expands a variable in it. Matrix values never hold a line break
    (validation refuses control characters); one here would start a new instruction, so it is refused."""
    if _CONTROL.search(value):
        raise ValueError(f"a control character in a Dockerfile string: {value!r}")
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def template_name(flavor: str) -> str:
    return f"{flavor}.Dockerfile.j2"


def build_args(target: Target) -> dict[str, str]:
    """The values the vendor-specific part of a template takes as ARGs (shown by `render`, passed by `build`)."""
    if target.flavor == SOURCE_FLAVOR:
        vision = next((c.split("==")[1].split("+")[0] for c in target.companions if c.startswith("torchvision==")), "")
        return {
            "PYTORCH_REF": f"v{target.torch}",
            "TORCHVISION_REF": f"v{vision}" if vision else "",
            "PYTORCH_ROCM_ARCH": ";".join(target.archs),
            "MAX_JOBS": str(target.max_jobs) if target.max_jobs else "",
        }
    args = {"TORCH_INDEX_URL": target.index_url}  # the installer takes torch from here (a mirror may replace it)
    if target.channel == "nightly":
        # PIP_PRE lets pip take dev builds; the date makes each day's nightly a new fingerprint
        args.update({"PIP_PRE": "1", "NIGHTLY_DATE": target.channel_date})
    return args


def fingerprint(target: Target, templates: str, args: Mapping[str, str], image_labels: Mapping[str, str],
                target_text: str | None = None) -> str:
    """sha256 over everything that determines the image: the digest of the template sources the target's
    Dockerfile is rendered from, every field of the target (base image and its digest, packages, user, ...),
    the build args and the labels. The same inputs give the same hex on any machine.

    Each part is the repr of plain data (strings, numbers, tuples, frozen records, dicts), which escapes newlines,
    so the parts joined by newlines can be told apart and no two different inputs hash the same text. The build
    args and labels are dicts in the order their code writes them, the same on every machine (sorting them cost
    a plan more than hashing). `target_text`: repr(target), where the caller has it.
    """
    text = "\n".join((
        f"buildkit-fingerprint/{FINGERPRINT_SCHEMA}", templates, repr(target) if target_text is None else target_text,
        repr(dict(args)), repr(dict(image_labels)),
    ))
    return hashlib.sha256(text.encode()).hexdigest()


_TARGET_FIELDS = tuple(field.name for field in dataclasses.fields(Target))


def _repr_function() -> Callable[[Target, Callable[[Any], str]], str]:
    """repr(target) as the dataclass writes it, one f-string, with the tuples and records targets share (not their
    own tags and twins) read through `shared` (a cache of their reprs)."""
    own = {"tag_names", "twins"}
    parts = [f"{name}={{target.{name}!r}}" if name in own or dataclasses.fields(Target)[index].type in ("str", "int", "bool", "str | None")
             else f"{name}={{shared(target.{name})}}" for index, name in enumerate(_TARGET_FIELDS)]
    namespace: dict[str, Any] = {}
    exec(f'def target_repr(target, shared):\n    return f"Target({", ".join(parts)})"\n', namespace)
    return namespace["target_repr"]


_TARGET_REPR = _repr_function()
MAX_PRODUCT_ITEMS = 1_000_000  # characters or items one `*` may produce: a Dockerfile is a few KB
MAX_EXPONENT = 256
# The text filters a shape applies to a hole's value when it fills a target's text (buildkit.core.render.shapes), with how
# long they make a text of n characters at most: quote's worst is a ' as '"'"' (5), dockerfile_string escapes each
# character with one backslash at most, and both add two quotes.
# Filling applies them to thousands of targets' values, many the same (a vendor, a Python): their results are kept.
TEXT_FILTERS = {"shell_quote": TextFilter(functools.lru_cache(4096)(shlex.quote), 5, 2),
                "dockerfile_string": TextFilter(functools.lru_cache(4096)(dockerfile_string), 2, 2)}


def _public_attributes(record: type) -> set[str]:
    """What a template may read of a record straight: its fields and its public properties (plain data computed
    from them)."""
    computed = (name for klass in record.__mro__ for name, value in vars(klass).items()
                if isinstance(value, (property, cached_property)) and not name.startswith("_"))
    return {*(field.name for field in dataclasses.fields(record)), *computed}


class _CodeGenerator(CodeGenerator):
    """Jinja's code, with `{{ }}` output and `~` going through the environment's print and join hooks, so a shape
    render (buildkit.core.render.shapes) can print a hole without it ever becoming a string the template can read."""

    def _output_child_pre(self, node, frame, finalize):
        self.write("environment.print_value(")

    def _output_child_post(self, node, frame, finalize):
        self.write(")")

    @optimizeconst
    def visit_Concat(self, node, frame):
        self.write("environment.join_values((")
        for argument in node.nodes:
            self.visit(argument, frame)
            self.write(", ")
        self.write("))")


class _Sandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """Jinja's immutable sandbox, with a direct path for reading the public fields and properties of the records a
    template is given (a Target, its User and twins, an install plan, a vendor): plain, frozen data, so checking
    each read costs a sandbox what it saves nothing. `*` and `**` are bounded: `{{ "x" * 10**10 }}` or
    `{{ 9 ** 9 ** 9 }}` in a team template is a template error, not a process that eats the machine's memory or
    never ends (the sandbox already bounds range()).

    While `recording` is set, the render is a shape render: the hooks below give holes their meaning."""

    _TRUSTED: ClassVar[dict[type, set[str]]] = {
        record: _public_attributes(record) for record in (Target, User, Twin, TorchInstall, InstallLayer, LayerCopy, Narrowing, Vendor)}
    intercepted_binops = frozenset({"*", "**"})
    code_generator_class = _CodeGenerator
    recording: Recorder | None = None

    def print_value(self, value):
        if self.recording is not None and type(value) in (Hole, Fragment):
            return self.recording.print(value)
        return str(value)  # any other stand-in refuses

    def join_values(self, values):
        text = "".join(map(self.print_value, values))
        return text if self.recording is None else self.recording.captured(text)

    def concat(self, pieces):  # Jinja's own joins of captured output: macro results, set blocks, super()
        text = "".join(pieces)
        return text if self.recording is None else self.recording.captured(text)

    def getattr(self, obj, attribute):
        if self.recording is not None and isinstance(obj, Symbolic):
            return obj.attribute(self, attribute)
        if attribute in self._TRUSTED.get(type(obj), ()) or (type(obj) is TemplateModule and not attribute.startswith("_")):
            return getattr(obj, attribute)  # a record's data, or a macro an imported template exports
        return super().getattr(obj, attribute)

    def getitem(self, obj, argument):
        if self.recording is not None:
            self.recording.refuse_symbolic([argument])
            if isinstance(obj, Symbolic):
                return obj.item(self, argument)
        return super().getitem(obj, argument)

    def call(__self, __context, __obj, *args, **kwargs):
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

    def call_binop(self, context, operator, left, right):
        if self.recording is not None:
            self.recording.refuse_symbolic((left, right))
        if operator == "**" and isinstance(right, int) and not isinstance(left, float) and abs(right) > MAX_EXPONENT:
            raise jinja2.sandbox.SecurityError(f"exponent {right} is larger than {MAX_EXPONENT}")
        if operator == "*":
            for sequence, count in ((left, right), (right, left)):
                if isinstance(sequence, (str, list, tuple)) and isinstance(count, int) and len(sequence) * count > MAX_PRODUCT_ITEMS:
                    raise jinja2.sandbox.SecurityError(f"the product would hold more than {MAX_PRODUCT_ITEMS:,} items")
        return super().call_binop(context, operator, left, right)


def _hooked(environment: _Sandbox, name: str, function, test: bool):
    """A filter or test that, during a shape render, goes through the recorder (which decides what it may do with
    holes); otherwise it is the function itself, one attribute check later."""

    @functools.wraps(function)  # keeps Jinja's pass_context marks
    def hooked(*args, **kwargs):
        recording = environment.recording
        if recording is None:
            return function(*args, **kwargs)
        return (recording.test if test else recording.filter)(name, function, args, kwargs)

    return hooked


def make_environment(loader: jinja2.BaseLoader) -> jinja2.Environment:
    environment = _Sandbox(
        loader=loader,
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # Dockerfiles, not HTML; every value is grammar-checked before it gets here
        keep_trailing_newline=True,
        auto_reload=False,  # one run renders many targets from templates that do not change under it
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters.update({"shell_quote": shlex.quote, "dockerfile_string": dockerfile_string})
    environment.filters = {name: _hooked(environment, name, function, False) for name, function in environment.filters.items()}
    environment.tests = {name: _hooked(environment, name, function, True) for name, function in environment.tests.items()}
    return environment


def _template_problem(name: str, error: BaseException, target: Target) -> Problem:
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
    elif isinstance(error, jinja2.sandbox.SecurityError):
        message = f"template tried something the sandbox forbids: {error}"
    elif isinstance(error, RecursionError):
        # most often a team file named like a built-in template that extends that name: it extends itself
        message = f"template recurses without end (does it include itself? {_SHADOWING_HINT})"
    else:
        message = f"template failed: {type(error).__name__}: {error}"
    return Problem(where, f"{_one_line(message)} (target {target.id})", line=line)


_SHADOWING_HINT = ("a team template of a built-in name shadows it: give yours a flavor's name, <flavor>.Dockerfile.j2, "
                   "to extend the built-in one")


def _parent(tree: jinja2.nodes.Template, filename: str) -> tuple[str, str, int] | None:
    """The template a parsed template extends unconditionally (its one `{% extends %}`, at the top level, naming a
    template in quotes), with its file and line; None for any other template."""
    extends = list(tree.find_all(jinja2.nodes.Extends))
    if len(extends) == 1 and extends[0] in tree.body and isinstance(extends[0].template, jinja2.nodes.Const):
        return str(extends[0].template.value), filename, extends[0].lineno
    return None


def _one_line(text: str) -> str:
    """An error text as one bounded, printable line: a template's exception may carry newlines, control
    characters or a whole file."""
    return printable(" ".join(text.split()), limit=300)


Meanwhile = Callable[[], bool]  # a step of the caller's own work, done while it waits; False once none is left


class BoundedRunner(Protocol):
    """Renders planned images from a loader's templates, each under a budget (see the module docstring). Going over
    the budget, or any template error, is a UserError naming the template."""

    output_budget: int  # characters a Dockerfile may have

    def render_all(self, loader: jinja2.BaseLoader, source: str, planned: Sequence[PlannedImage]) -> list[str]:
        """Their Dockerfile texts, in order."""
        ...

    def shape(self, loader: jinja2.BaseLoader, source: str, planned: PlannedImage, meanwhile: Meanwhile | None = None) -> ShapeData | None:
        """The shape of this target's render (Renderer.shape_data), None where it has none; `meanwhile` is called
        while it waits (a step of the caller's work each time, False once there is none left)."""
        ...

    def start(self, loader: jinja2.BaseLoader, source: str) -> None:
        """Get ready to render these templates (a worker starting), without waiting."""
        ...


class Renderer:
    def __init__(self, loader: jinja2.BaseLoader, source: str, support: Mapping[str, bytes], compat: Compat | None,
                 bounded: BoundedRunner | None = None, marker: str = ""):
        """`support`: the image-side scripts every build context carries (SUPPORT_FILES, by name); `compat`: the
        facts install plans come from (None: a renderer of images already planned, the template worker); `bounded`:
        where renders of templates that are not buildkit's own go; None renders every template here (for
        callers that trust all of theirs); `marker`: a random token that shape renders print holes with (see
        buildkit.core.render.shapes; "": no shapes, every target is rendered on its own)."""
        self.environment = make_environment(loader)
        self.loader = loader
        self.source = source
        self.compat = compat
        self.bounded = bounded
        self.marker = marker
        self.support = dict(support)
        listing = "".join(f"{name}:{hashlib.sha256(data).hexdigest()}\n" for name, data in sorted(self.support.items()))
        self._support_digest = hashlib.sha256(listing.encode()).hexdigest()  # part of every fingerprint
        self._templates: dict[str, jinja2.Template] = {}
        self._digests: dict[str, str] = {}
        self._reached: dict[str, frozenset[str]] = {}  # name -> the templates it extends, includes or imports, itself too
        self._references: dict[str, tuple[str, tuple[str | None, ...]]] = {}  # name -> (source, templates it names)
        self._parents: dict[str, tuple[str, str, int] | None] = {}  # name -> (the template it extends, its file, line)
        self._shapes: dict[str, ShapeBook] = {}  # template -> the shapes its renders had so far
        self._one_by_one: set[str] = set()  # templates that have no shape: each target is rendered on its own
        self._installs: dict[tuple, TorchInstall] = {}  # install_inputs -> the plan
        self._bounded: dict[str, bool] = {}  # template -> whether its renders go to the bounded runner
        self._reprs: dict[int, tuple[Any, str]] = {}  # id(a value targets share) -> (the value, its repr)
        self._real_so_far: frozenset = frozenset()  # the patterns shape renders have made real
        self._supports: dict[int, tuple[TorchInstall, Mapping[str, bytes]]] = {}  # id(install) -> its support files

    def _source(self, name: str, target: Target, referrer: str = "") -> tuple[str, str | None]:
        """A template's source and the file it came from (for messages)."""
        try:
            source, filename, _ = self.loader.get_source(self.environment, name)
            return source, filename
        except jinja2.TemplateNotFound:
            if referrer:
                raise UserError(Problem(referrer, f"template {name!r} is not in the template folders (target {target.id})")) from None
            raise UserError(Problem(
                "templates", f"no template {name} for flavor {target.flavor!r} (target {target.id}); "
                "add it to your template_dir or use a built-in flavor (runtime, devel)",
            )) from None

    def templates_digest(self, name: str, target: Target) -> str:
        """sha256 of the sources of `name` and every template it extends, includes or imports."""
        if name not in self._digests:
            sources: dict[str, str] = {}
            pending = [(name, "")]
            while pending:
                current, referrer = pending.pop()
                if current in sources:
                    continue
                if current not in self._references:
                    source, filename = self._source(current, target, referrer)
                    try:
                        parsed = self.environment.parse(source, current, filename)
                    except jinja2.TemplateSyntaxError as error:
                        raise UserError(_template_problem(current, error, target)) from None
                    except RecursionError:  # thousands of nested brackets: Jinja's parser recurses per level
                        raise UserError(Problem(filename or current, f"template nests too deeply to parse (target {target.id})")) from None
                    self._references[current] = (source, tuple(jinja2.meta.find_referenced_templates(parsed)))
                    self._parents[current] = _parent(parsed, filename or current)
                sources[current], references = self._references[current]
                for referenced in references:
                    if referenced is None:
                        raise UserError(Problem(current, "a template may include or extend only templates named in quotes "
                                                         f"(a computed name cannot be fingerprinted) (target {target.id})"))
                    pending.append((referenced, current))
            self._refuse_extends_cycle(name, target)
            text = "".join(f"{key}:{len(value)}:{value}\n" for key, value in sorted(sources.items()))
            self._digests[name] = hashlib.sha256(text.encode()).hexdigest()
            self._reached[name] = frozenset(sources)
        return self._digests[name]

    def _refuse_extends_cycle(self, name: str, target: Target) -> None:
        """A template whose extends chain comes back to itself recurses without end when rendered: said from the
        parsed chain, before any render (a render reaches it only after the worker has started)."""
        chain = [name]
        while (parent := self._parents.get(chain[-1])) is not None:
            if parent[0] in chain:
                _, filename, line = self._parents[chain[chain.index(parent[0])]] or parent
                loop = " -> ".join([*chain[chain.index(parent[0]):], parent[0]])
                raise UserError(Problem(filename, f"template extends itself ({loop}), so it would recurse without end; "
                                                  f"{_SHADOWING_HINT} (target {target.id})", line=line))
            chain.append(parent[0])

    def plan(self, target: Target) -> PlannedImage:
        name = template_name(target.flavor)
        args = build_args(target)
        image_labels = labels.image_labels(target, self.source)
        # how torch is installed from its index; the source flavor installs the wheels it built
        assert self.compat is not None, "planning needs the compatibility data"
        install = None if target.flavor == SOURCE_FLAVOR else self._install(target)
        inputs = f"{self.templates_digest(name, target)} {self._support_digest} {install.digest if install else ''}"
        digest = fingerprint(target, inputs, args, image_labels, self._target_repr(target))
        return PlannedImage(target, name, args, {**image_labels, labels.FINGERPRINT: digest}, digest, install)

    def _target_repr(self, target: Target) -> str:
        """repr(target), with the reprs of the tuples and records it shares with the targets of its stack (their
        packages, device code, user…) made once: they are most of its text."""
        return _TARGET_REPR(target, self._shared_repr)

    def _shared_repr(self, value: Any) -> str:
        found = self._reprs.get(id(value))
        if found is None or found[0] is not value:
            if len(self._reprs) >= 4096:
                self._reprs.clear()
            found = self._reprs[id(value)] = (value, repr(value))
        return found[1]

    def _install(self, target: Target) -> TorchInstall:
        """The target's install plan: one object for all the targets that install torch alike."""
        key = install_inputs(target)
        found = self._installs.get(key)
        if found is None:
            found = self._installs[key] = torch_install(target, self.compat)  # type: ignore[arg-type]
        return found

    def _template(self, name: str, target: Target) -> jinja2.Template:
        if name not in self._templates:
            try:
                self._templates[name] = self.environment.get_template(name)
            except jinja2.TemplateNotFound as error:
                raise UserError(Problem("templates", f"template {error.name!r} not found (target {target.id})")) from None
            except jinja2.TemplateSyntaxError as error:
                raise UserError(_template_problem(name, error, target)) from None
        return self._templates[name]

    def builtin(self, planned: PlannedImage) -> bool:
        """Whether every template the image's template reaches is buildkit's own (a team's file of the same
        name, searched first, makes it the team's)."""
        self.templates_digest(planned.template, planned.target)
        return isinstance(self.loader, TemplateSet) and self.loader.builtin(self._reached[planned.template])

    def render(self, planned: PlannedImage) -> Rendered:
        return self.render_all((planned,))[0]

    def render_all(self, planned: Iterable[PlannedImage]) -> tuple[Rendered, ...]:
        """Rendered images in order. Each is written from its template's shape for its values; those without one
        are rendered on their own, the ones that reach a team's template by the bounded runner, all at once.
        `planned` may be lazy (a map of plan() over targets): the images after the one whose shape the bounded
        runner renders are planned while it does."""
        upcoming = _Upcoming(planned)
        items: list[PlannedImage] = []
        texts: dict[int, str] = {}
        for index, item in enumerate(upcoming):
            items.append(item)
            text = self._shaped(item, meanwhile=upcoming.plan_ahead)
            if text is not None:
                texts[index] = text
        bounded = [index for index, item in enumerate(items) if index not in texts and self._is_bounded(item)]
        if bounded:
            texts.update(zip(bounded, self.bounded.render_all(self.loader, self.source,  # type: ignore[union-attr]
                                                              [items[index] for index in bounded])))
        # Rendered's fields are PlannedImage's, in order, then its own
        return tuple(Rendered(*_planned_values(item), dockerfile=texts[index] if index in texts else self.text(item),
                              support=self._support_of(item))
                     for index, item in enumerate(items))

    def prepare(self) -> None:
        """Before rendering: the bounded runner gets ready while the caller plans, where a team template is in use."""
        if self.bounded is not None and isinstance(self.loader, TemplateSet) and not self.loader.builtin(self.loader.files):
            self.bounded.start(self.loader, self.source)

    def check_all(self, targets: Iterable[Target]) -> dict[str, UserError]:
        """`matrix validate`'s check of every target's render: per template, the first error its renders raise (a
        template that failed is not checked further). Each target is checked as a draft of its plan: everything
        but the fingerprint (the digest costs most of a plan; templates see it only as a 64-character label, so
        a shape's guards and sizes hold for the draft as for the plan). A shape is rendered from a target's full
        plan, and a template without shapes renders the full plans of its targets, a batch at a time."""
        failed: dict[str, UserError] = {}
        waiting: dict[str, list[PlannedImage]] = {}  # template -> full plans to render on their own
        for target in targets:
            name = template_name(target.flavor)
            if name in failed:
                continue
            try:
                draft = self._draft(target)
                if not self._shaped(draft, write=False, plan=functools.partial(self.plan, target)):
                    waiting.setdefault(name, []).append(self.plan(target))
                    if len(waiting[name]) >= CHECK_BATCH:
                        self._render_alone(waiting.pop(name))
            except UserError as error:
                failed[name] = error
        for name, batch in waiting.items():
            if name not in failed:
                try:
                    self._render_alone(batch)
                except UserError as error:
                    failed[name] = error
        return failed

    def _draft(self, target: Target) -> PlannedImage:
        """The target's plan but for its fingerprint, a placeholder of the same length."""
        name = template_name(target.flavor)
        self.templates_digest(name, target)  # a template that cannot be found or parsed fails here, as in plan()
        install = None if target.flavor == SOURCE_FLAVOR else self._install(target)
        return PlannedImage(target, name, build_args(target), {**labels.image_labels(target, self.source), labels.FINGERPRINT: _DRAFT},
                            _DRAFT, install)

    def _render_alone(self, batch: list[PlannedImage]) -> None:
        if self._is_bounded(batch[0]):
            self.bounded.render_all(self.loader, self.source, batch)  # type: ignore[union-attr]
        else:
            for planned in batch:
                self.text(planned)

    def _is_bounded(self, planned: PlannedImage) -> bool:
        found = self._bounded.get(planned.template)
        if found is None:
            found = self._bounded[planned.template] = self.bounded is not None and not self.builtin(planned)
        return found

    def _shaped(self, planned: PlannedImage, write: bool = True, plan: Callable[[], PlannedImage] | None = None,
                meanwhile: Meanwhile | None = None) -> str | None:
        """The image's text from its template's shape for its values (a shape rendered from it, or from `plan()`
        where it is a draft, when none of the template's shapes so far stands for it); with `write` False, "ok"
        once its size is checked. None where the template has no shape, or the shape cannot write these values:
        the image is then rendered on its own, which says what fails."""
        name = planned.template
        if not self.marker or name in self._one_by_one:
            return None
        variables = template_variables(planned)
        book = self._shapes.get(name)
        if book is None:
            book = self._shapes[name] = ShapeBook(self.environment.getattr, TEXT_FILTERS, _Sandbox._TRUSTED)
        found = book.find(variables)
        bounded = self._is_bounded(planned)
        if found is None:
            if plan is not None:
                planned = plan()
                variables = template_variables(planned)
            data = self.bounded.shape(self.loader, self.source, planned, meanwhile) if bounded else self.shape_data(planned)  # type: ignore[union-attr]
            try:
                found = book.add(data, variables) if data is not None else None
            except Unsupported:
                found = None
            if found is None:
                self._one_by_one.add(name)
                return None
        shape, answers = found
        limit = self.bounded.output_budget if bounded else None  # type: ignore[union-attr]
        try:
            if not write:
                if limit is not None and not shape.fits(answers, limit):
                    raise OverflowError
                return "ok"
            return shape.fill(answers, limit)
        except OverflowError:
            raise UserError(self._over_output(planned, limit)) from None  # type: ignore[arg-type]
        except Exception:
            return None

    def _over_output(self, planned: PlannedImage, limit: int) -> Problem:
        filename = self._template(planned.template, planned.target).filename or planned.template
        return Problem(filename, f"the template writes more than {limit:,} characters, beyond its budget (a Dockerfile "
                                 f"is kilobytes) (target {planned.target.id})")

    def shape_data(self, planned: PlannedImage, limit: int | None = None) -> ShapeData | None:
        """The shape of this image's render: its template rendered with every value a hole, each value it looks
        into made real and the render run again, until one completes (buildkit.core.render.shapes). None where none does
        (the template failed, or did what holes cannot stand for): rendering the image on its own tells which."""
        template = self._template(planned.template, planned.target)
        variables = template_variables(planned)
        # what earlier shapes found real is likely read by this one too (flavors share their parts): starting from
        # it saves renders, and a value made real where a hole would do costs sharing, never correctness
        real = self._real_so_far
        while True:
            recorder = Recorder(real, self.marker, TEXT_FILTERS)  # its filters: the names that derive a hole
            self.environment.recording = recorder  # type: ignore[attr-defined]
            try:
                text = self._generate(template, {name: recorder.view(value, (name,), VARIABLE_TYPES.get(name)) for name, value in variables.items()},
                                      planned, limit)
            except NotParametric as refused:
                if refused.patterns <= real:
                    return None  # nothing left to make real
                real |= refused.patterns
                continue
            except MemoryError:
                raise
            except Exception:
                return None
            finally:
                self.environment.recording = None  # type: ignore[attr-defined]
            self._real_so_far = real
            return recorder.shape(text)

    def _generate(self, template: jinja2.Template, context: Mapping[str, Any], planned: PlannedImage, limit: int | None) -> str:
        """The template's text; with `limit`, stopped as soon as it has written more than `limit` characters (a loop
        writing gigabytes is stopped at the limit, not after)."""
        if limit is None:
            return "".join(template.generate(**context))
        # joined a few hundred pieces at a time: counting each of a Dockerfile's thousand pieces costs a third of a render
        pieces, chunks, written = template.generate(**context), [], 0
        while block := list(itertools.islice(pieces, 256)):
            chunks.append("".join(block))
            written += len(chunks[-1])
            if written > limit:
                raise UserError(self._over_output(planned, limit))
        return "".join(chunks)

    def _support_of(self, planned: PlannedImage) -> Mapping[str, bytes]:
        """The build context's support files: the scripts, and the target's install plan (one mapping for all the
        targets that install torch alike)."""
        install = planned.install
        if install is None:
            return self.support
        found = self._supports.get(id(install))
        if found is None or found[0] is not install:
            found = self._supports[id(install)] = (install, {**self.support, INSTALL_PLAN: install.to_json().encode()})
        return found[1]

    def text(self, planned: PlannedImage, limit: int | None = None) -> str:
        """The Dockerfile text, rendered here, on its own (no shape). With `limit`, rendering stops as soon as the
        template has written more than `limit` characters."""
        target = planned.target
        template = self._template(planned.template, target)
        try:
            return self._generate(template, template_variables(planned), planned, limit)
        except (UserError, MemoryError):
            raise
        except Exception as error:  # a team template can fail in any way its code allows; say where
            raise UserError(_template_problem(planned.template, error, target)) from None
