"""The Renderer: a target and its templates -> its planned image and its Dockerfile text.

The planned image holds its build args, labels and fingerprint; what the Renderer has read, parsed, planned and
rendered is kept for the targets after it.

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
import functools
import hashlib
import itertools
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import jinja2
import jinja2.meta

from buildkit.core import labels
from buildkit.core.install_plan import TorchInstall, install_inputs, torch_install
from buildkit.core.matrix.templates import TemplateSet
from buildkit.core.render.fingerprint import fingerprint, target_repr
from buildkit.core.render.planned import (
    INSTALL_PLAN,
    VARIABLE_TYPES,
    PlannedImage,
    Rendered,
    build_args,
    planned_values,
    template_name,
    template_variables,
)
from buildkit.core.render.sandbox import SHADOWING_HINT, TEXT_FILTERS, Sandbox, make_environment, template_problem
from buildkit.core.render.shapes import NotParametric, Path, Recorder, ShapeBook, ShapeData, Unsupported
from buildkit.core.targets.source import SOURCE_FLAVOR
from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from buildkit.core.compat.facts import Compat
    from buildkit.core.targets.plan import Target

CHECK_BATCH = 1024  # plans a validation sends to be rendered on their own at a time (memory stays bounded)
_DRAFT = "0" * 64  # a draft plan's fingerprint: as long as a sha256 in hex


class _Upcoming:
    """Planned images in order, from an iterable that may plan them as it goes; plan_ahead() plans a few more
    before they are asked for (while the bounded runner renders a shape). A planning error is raised when its
    image's turn comes, so the errors of a render come in target order as when everything was planned first."""

    STEP = 32  # images planned per step: a millisecond or so, a fraction of a shape's round trip

    def __init__(self, planned: Iterable[PlannedImage]) -> None:
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


def _parent(tree: jinja2.nodes.Template, filename: str) -> tuple[str, str, int] | None:
    """The template a parsed template extends unconditionally (its one `{% extends %}`, at the top level, naming a
    template in quotes), with its file and line; None for any other template."""
    extends = list(tree.find_all(jinja2.nodes.Extends))
    if len(extends) == 1 and extends[0] in tree.body and isinstance(extends[0].template, jinja2.nodes.Const):
        return str(extends[0].template.value), filename, extends[0].lineno
    return None


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
    def __init__(
        self,
        loader: jinja2.BaseLoader,
        source: str,
        support: Mapping[str, bytes],
        compat: Compat | None,
        bounded: BoundedRunner | None = None,
        marker: str = "",
    ) -> None:
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
        self._installs: dict[tuple[Hashable, ...], TorchInstall] = {}  # install_inputs -> the plan
        self._bounded: dict[str, bool] = {}  # template -> whether its renders go to the bounded runner
        self._reprs: dict[int, tuple[Any, str]] = {}  # id(a value targets share) -> (the value, its repr)
        self._real_so_far: frozenset[Path] = frozenset()  # the patterns shape renders have made real
        self._supports: dict[int, tuple[TorchInstall, Mapping[str, bytes]]] = {}  # id(install) -> its support files

    def _source(self, name: str, target: Target, referrer: str = "") -> tuple[str, str | None]:
        """A template's source and the file it came from (for messages)."""
        try:
            source, filename, _ = self.loader.get_source(self.environment, name)
            return source, filename
        except jinja2.TemplateNotFound:
            if referrer:
                raise UserError(Problem(referrer, f"template {name!r} is not in the template folders (target {target.id})")) from None
            raise UserError(
                Problem(
                    "templates",
                    f"no template {name} for flavor {target.flavor!r} (target {target.id}); "
                    "add it to your template_dir or use a built-in flavor (runtime, devel)",
                )
            ) from None

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
                        raise UserError(template_problem(current, error, target)) from None
                    except RecursionError:  # thousands of nested brackets: Jinja's parser recurses per level
                        raise UserError(Problem(filename or current, f"template nests too deeply to parse (target {target.id})")) from None
                    self._references[current] = (source, tuple(jinja2.meta.find_referenced_templates(parsed)))
                    self._parents[current] = _parent(parsed, filename or current)
                sources[current], references = self._references[current]
                for referenced in references:
                    if referenced is None:
                        raise UserError(
                            Problem(
                                current,
                                "a template may include or extend only templates named in quotes "
                                f"(a computed name cannot be fingerprinted) (target {target.id})",
                            )
                        )
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
                loop = " -> ".join([*chain[chain.index(parent[0]) :], parent[0]])
                raise UserError(
                    Problem(filename, f"template extends itself ({loop}), so it would recurse without end; {SHADOWING_HINT} (target {target.id})", line=line)
                )
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
        return target_repr(target, self._shared_repr)

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
            # a renderer plans only when given compat (the template worker's has none: it renders images already planned)
            found = self._installs[key] = torch_install(target, self.compat)  # type: ignore[arg-type]
        return found

    def _template(self, name: str, target: Target) -> jinja2.Template:
        if name not in self._templates:
            try:
                self._templates[name] = self.environment.get_template(name)
            except jinja2.TemplateNotFound as error:
                raise UserError(Problem("templates", f"template {error.name!r} not found (target {target.id})")) from None
            except jinja2.TemplateSyntaxError as error:
                raise UserError(template_problem(name, error, target)) from None
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
            runner = self.bounded
            assert runner is not None  # _is_bounded holds only where there is a bounded runner
            texts.update(zip(bounded, runner.render_all(self.loader, self.source, [items[index] for index in bounded])))
        # Rendered's fields are PlannedImage's, in order, then its own
        return tuple(
            Rendered(*planned_values(item), dockerfile=texts[index] if index in texts else self.text(item), support=self._support_of(item))
            for index, item in enumerate(items)
        )

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
        return PlannedImage(target, name, build_args(target), {**labels.image_labels(target, self.source), labels.FINGERPRINT: _DRAFT}, _DRAFT, install)

    def _render_alone(self, batch: list[PlannedImage]) -> None:
        runner = self.bounded if self._is_bounded(batch[0]) else None
        if runner is not None:
            runner.render_all(self.loader, self.source, batch)
        else:
            for planned in batch:
                self.text(planned)

    def _is_bounded(self, planned: PlannedImage) -> bool:
        found = self._bounded.get(planned.template)
        if found is None:
            found = self._bounded[planned.template] = self.bounded is not None and not self.builtin(planned)
        return found

    def _shaped(
        self, planned: PlannedImage, write: bool = True, plan: Callable[[], PlannedImage] | None = None, meanwhile: Meanwhile | None = None
    ) -> str | None:
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
            book = self._shapes[name] = ShapeBook(self.environment.getattr, TEXT_FILTERS, Sandbox.TRUSTED)
        found = book.find(variables)
        runner = self.bounded if self._is_bounded(planned) else None
        if found is None:
            if plan is not None:
                planned = plan()
                variables = template_variables(planned)
            data = runner.shape(self.loader, self.source, planned, meanwhile) if runner is not None else self.shape_data(planned)
            try:
                found = book.add(data, variables) if data is not None else None
            except Unsupported:
                found = None
            if found is None:
                self._one_by_one.add(name)
                return None
        shape, answers = found
        limit = runner.output_budget if runner is not None else None
        try:
            if not write:
                if limit is not None and not shape.fits(answers, limit):
                    raise OverflowError
                return "ok"
            return shape.fill(answers, limit)
        except OverflowError:
            # fits and fill overflow only against a limit: it is not None here
            raise UserError(self._over_output(planned, limit)) from None  # type: ignore[arg-type]
        except Exception:
            return None

    def _over_output(self, planned: PlannedImage, limit: int) -> Problem:
        filename = self._template(planned.template, planned.target).filename or planned.template
        return Problem(
            filename, f"the template writes more than {limit:,} characters, beyond its budget (a Dockerfile is kilobytes) (target {planned.target.id})"
        )

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
            self.environment.recording = recorder
            try:
                text = self._generate(
                    template, {name: recorder.view(value, (name,), VARIABLE_TYPES.get(name)) for name, value in variables.items()}, planned, limit
                )
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
                self.environment.recording = None
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
            raise UserError(template_problem(planned.template, error, target)) from None
