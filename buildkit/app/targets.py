"""From command-line choices to the selected targets: the one path every command shares.

Selecting expands and filters the matrix; planning adds each image's build args, labels and fingerprint;
rendering adds its Dockerfile. Each command takes only the step it needs: `validate`, `detect`, `run`,
`doctor`, `test` and `parity` select; `plan` plans; only `render`, `build` and `publish` render.
"""

from __future__ import annotations

import gc
import os
import secrets
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from buildkit.adapters.files.bundled import default_matrix_path, image_support_files
from buildkit.adapters.files.inputs import describe_path
from buildkit.adapters.files.matrix import load_matrix
from buildkit.adapters.forked import Forked, can_fork, contiguous_parts, split_map, usable_cores
from buildkit.adapters.template_worker import TemplateWorker
from buildkit.core import grammar
from buildkit.core.matrix.fields import Rule, emptied_by
from buildkit.core.matrix.resolve import CommandLine, Matrix, parse_selectors
from buildkit.core.release.layer_sharing import LayerKeys, holders
from buildkit.core.render.planned import PlannedImage, Rendered, template_name
from buildkit.core.render.renderer import Renderer
from buildkit.core.targets.plan import ALL_VENDORS, Note, Plan, Target, choose_platforms, expand, narrow_for_source, select
from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Sequence

__all__ = [
    "LOCAL_MATRIX",
    "MATRIX_ENV",
    "MOST_PARTS",
    "PARALLEL_FROM",
    "Choices",
    "MatrixFile",
    "PlannedImage",
    "Selection",
    "SourceOptions",
    "find_matrix",
    "github_matrix",
    "plan_json",
    "records_that_last",
    "select_targets",
    "target_json",
    "validate_selection",
]

MATRIX_ENV = "BUILDKIT_MATRIX"
LOCAL_MATRIX = "matrix.toml"


@dataclass(frozen=True)
class MatrixFile:
    """The matrix file a command reads. A team's folder must never silently get the bundled matrix (its plan,
    builds and publishes would be another team's), so using the bundled one comes with a note."""

    path: Path | None  # None: the matrix bundled with buildkit

    @property
    def note(self) -> str:
        """What stderr says when the bundled matrix is used, so a user who expected their own sees why."""
        if self.path is not None:
            return ""
        return f"using the matrix bundled with buildkit ({default_matrix_path()}): no --matrix, no ${MATRIX_ENV} and no {LOCAL_MATRIX} in this folder"


def find_matrix(option: Path | None) -> MatrixFile:
    """--matrix, else $BUILDKIT_MATRIX, else ./matrix.toml, else the bundled default."""
    if option is not None:
        return MatrixFile(option)
    named = os.environ.get(MATRIX_ENV, "")
    if named:
        path = Path(named)
        what = describe_path(path)
        if what:
            raise UserError(Problem(f"${MATRIX_ENV}", f"names {named!r}: {what}; point it at a matrix file or unset it"))
        return MatrixFile(path)
    local = Path.cwd() / LOCAL_MATRIX
    if local.is_file():
        return MatrixFile(local)
    return MatrixFile(None)


@dataclass(frozen=True)
class SourceOptions:
    """Command-line choices for compiled targets: narrowed ROCm archs, a local checkout, compile jobs."""

    gpu_archs: tuple[str, ...] = ()
    pytorch_src: Path | None = None
    max_jobs: int = 0


@dataclass(frozen=True)
class Choices:
    """What the command line selects, resolved once."""

    matrix: Path | None = None
    vendor: str = ALL_VENDORS
    selectors: tuple[str, ...] = ()
    registry: str | None = None  # publish: overrides the matrix's registry
    channel: str | None = None  # publish: overrides every stack's wheel channel
    today: str = ""  # the nightly channel's date (YYYYMMDD)
    source: SourceOptions = SourceOptions()
    platforms: tuple[str, ...] = ()  # --platform; () builds linux/amd64
    compression: str | None = None  # --compression: overrides the matrix's


PARALLEL_FROM = 20_000  # targets from which validate and plan work on every core: below, a fork costs what it saves
MOST_PARTS = 8  # each validate part may start a template worker, and copies some of the parent's pages
Answer = TypeVar("Answer")


def _part_count(targets: int, parallel_from: int) -> int:
    """Into how many parts to split the work on these targets: one per core this process may use, for a large
    selection."""
    return min(usable_cores(), MOST_PARTS) if targets >= parallel_from else 1


@dataclass(frozen=True)
class Selection:
    matrix: Matrix
    targets: tuple[Target, ...]
    notes: tuple[Note, ...]
    renderer: Renderer

    def plan(self) -> tuple[PlannedImage, ...]:
        return tuple(self.iter_plan())

    def iter_plan(self) -> Iterator[PlannedImage]:
        """The plan one target at a time, for output that need not hold it all (plan --format json)."""
        with records_that_last():
            yield from map(self.renderer.plan, self.targets)

    def map_plan(self, each: Callable[[PlannedImage], Answer], parallel_from: int = PARALLEL_FROM) -> Iterator[Answer]:
        """`each` of every target's plan, in order, one target at a time; for a large selection, the parts after
        the first are planned in forked children meanwhile (each on a core), so `each`'s answers must pickle (a
        JSON object's text)."""
        parts = contiguous_parts(self.targets, _part_count(len(self.targets), parallel_from))
        if len(parts) == 1 or not can_fork():
            yield from map(each, self.iter_plan())
            return

        def work(part: Sequence[Target]) -> list[Answer]:
            with records_that_last():
                return [each(self.renderer.plan(target)) for target in part]

        helpers = [Forked(work, part) for part in parts[1:]]
        try:
            with records_that_last():
                yield from map(each, map(self.renderer.plan, parts[0]))
            for helper in helpers:
                yield from helper.answer()
        finally:
            for helper in helpers:
                helper.stop()

    def render(self) -> tuple[Rendered, ...]:
        self.renderer.prepare()  # the team templates' worker starts while the targets are planned
        with records_that_last():  # planned as they are rendered: those ahead while the worker renders a shape
            return self.renderer.render_all(map(self.renderer.plan, self.targets))


@contextmanager
def records_that_last() -> Iterator[None]:
    """Expanding, planning and rendering thousands of targets allocates records that live until the command ends
    and hold no reference cycles; the cyclic collector's passes over them, more frequent as they grow, cost more
    than the work (selecting 100,000 targets: 3.2 s with them, 1.9 s without). So the collector waits until the
    step is done, and then leaves what survived it alone (gc.freeze)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.freeze()


def select_targets(choices: Choices = Choices(), rendering: bool = False) -> Selection:
    """The targets the choices select: at least one, else a UserError saying which choice left none. `rendering`:
    the caller renders them (validate), so a worker for the team's templates starts now, while they are expanded."""
    with records_that_last():
        return _select_targets(choices, rendering)


def _select_targets(choices: Choices, rendering: bool) -> Selection:
    matrix = load_matrix(choices.matrix, command_line=CommandLine(registry=choices.registry, compression=choices.compression, channel=choices.channel))
    # the marker that shape renders print holes with is drawn at random, so no template or matrix value can hold it
    renderer = Renderer(matrix.templates, matrix.source, image_support_files(), matrix.compat, TemplateWorker(), marker="\ue000" + secrets.token_hex(16))
    if rendering:
        renderer.prepare()
    source = choices.source
    if source.pytorch_src is not None and not (source.pytorch_src / "tools" / "amd_build" / "build_amd.py").is_file():
        raise UserError(Problem("--pytorch-src", f"{source.pytorch_src} is not a PyTorch checkout (no tools/amd_build/build_amd.py)"))
    described = expand(matrix)
    plan = select(described, choices.vendor, parse_selectors(list(choices.selectors)))
    if not plan.targets:
        raise UserError(_emptied(matrix, described, choices))
    targets = tuple(replace(t, channel_date=choices.today) if t.channel == "nightly" else t for t in plan.targets)
    targets, narrowed_out = narrow_for_source(targets, matrix.compat, source.gpu_archs, source.pytorch_src is not None, source.max_jobs)
    bad = [platform for platform in choices.platforms if grammar.platform(platform)]
    if bad:
        raise UserError(Problem("--platform", f"expected {grammar.platform(bad[0])}, got {bad[0]!r}"))
    targets, left_out = choose_platforms(targets, choices.platforms)
    if not targets and choices.platforms:
        raise UserError(
            Problem(
                "--platform",
                f"{', '.join(choices.platforms)} leaves no target: the selected targets' wheels exist for other platforms (ROCm wheels are linux/amd64 only)",
            )
        )
    if not targets:
        raise UserError(
            Problem("--gpu-arch", f"{', '.join(source.gpu_archs)} leaves no target: no selected family image carries it (see the notes of `buildkit plan`)")
        )
    return Selection(matrix, targets, (*plan.notes, *narrowed_out, *left_out), renderer)


def validate_selection(choices: Choices) -> Selection:
    """`matrix validate`: the selection, with every target's render checked, so a template error (a team
    template's syntax, an undefined value, a sandbox refusal, a render over budget) fails validation as it would
    fail `render`. A template's shapes stand for its targets (buildkit.core.render.shapes), so each is rendered a few
    times, not once per target. A template's first error stops its checks: each is reported once, with how
    many targets use the template."""
    selection = select_targets(choices, rendering=True)
    with records_that_last():
        _check_renders(selection)
    return selection


def _check_renders(selection: Selection) -> None:
    failed = _failed_renders(selection, PARALLEL_FROM)
    if failed:
        using = Counter(template_name(target.flavor) for target in selection.targets)
        # one problem per place in a template, however many flavors' templates reach it
        stopped: dict[tuple[str, int | None], tuple[Problem, int]] = {}
        for name, error in failed.items():
            for problem in error.problems:
                first, count = stopped.get((problem.where, problem.line), (problem, 0))
                stopped[(problem.where, problem.line)] = (first, count + using[name])
        raise UserError([_naming_targets(problem, count) for problem, count in stopped.values()])


def _failed_renders(selection: Selection, parallel_from: int) -> dict[str, UserError]:
    """Per template, its first error in target order: the targets in contiguous parts, one per core for a large
    selection, each part's errors after those of the parts before it (a template's first error is the one
    the targets checked in order would meet first)."""
    renderer = selection.renderer

    def check(part: Sequence[Target]) -> dict[str, list[Problem]]:
        return {name: error.problems for name, error in renderer.check_all(part).items()}  # Problems pickle; errors may not

    def own_worker() -> None:
        if isinstance(renderer.bounded, TemplateWorker):
            renderer.bounded.forsake()

    parts = _part_count(len(selection.targets), parallel_from)
    failed: dict[str, UserError] = {}
    for answer in split_map(check, selection.targets, parts, in_child=own_worker):
        for name, problems in answer.items():
            failed.setdefault(name, UserError(problems))
    return failed


def _naming_targets(problem: Problem, count: int) -> Problem:
    """A template's problem, naming the target it was found in and how many others it stops: validation checks
    no further target of a template once it has failed."""
    if count < 2:
        return problem
    head, found, target = problem.message.rpartition(" (target ")
    if found and target.endswith(")"):
        return replace(problem, message=f"{head} (target {target[:-1]} and the {count - 1} other targets that use this template)")
    return replace(problem, message=f"{problem.message} ({count} targets use this template)")


def _emptied(matrix: Matrix, described: Plan, choices: Choices) -> Problem:
    """Why no target is left: the matrix describes none, or which choice of the command line removed the last
    of its targets (they apply in order: each --select, then --vendor)."""
    if not described.targets:
        why = f": {described.notes[0]}" if described.notes else ": its [[torch]] entries name no CUDA or ROCm version"
        return Problem(matrix.files[-1], f"describes no target{why}")
    selectors = parse_selectors(list(choices.selectors))
    rule = Rule((*selectors.criteria, *((("vendor", choices.vendor),) if choices.vendor != "all" else ())))
    facts = [target.facts for target in described.targets]
    index = emptied_by(rule, facts)
    assert index is not None  # select() left nothing of these
    earlier = Rule(rule.criteria[:index])
    left = sum(1 for target in facts if earlier.matches(target))
    among = f"of the {left} that {earlier} selects" if index else f"of the matrix's {left}"
    if index == len(selectors.criteria):
        return Problem("--vendor", f"{choices.vendor}: no {choices.vendor} target {among}; see `buildkit plan`")
    key, pattern = rule.criteria[index]
    return Problem("--select", f"{key}={pattern} leaves no target {among}; see `buildkit plan` for the targets and their facts")


def target_json(item: PlannedImage) -> dict[str, object]:
    """The plan contract: what `plan --format json` prints for each target."""
    target = item.target
    return {
        "id": target.id,
        "vendor": target.vendor,
        "backend": target.backend,
        "backend_version": target.backend_version,
        "torch": target.torch,
        "python": target.python,
        "flavor": target.flavor,
        "family": target.family,
        "bundle": target.bundle,
        "tags": list(target.tags),
        "pair": target.pair,
        "fingerprint": item.fingerprint,
        "base_image": target.base_image,
        "index_url": target.index_url,
        "gpu_archs": list(target.archs),
        "device_packages": list(target.device_packages),
        "companion_device_packages": target.companion_device_packages,
        "wheel_variant": list(target.wheel_variant),
        "max_layer_size": target.max_layer_size,
        "companions": list(target.companions),
        "packages": list(target.packages),
        "channel": target.channel,
        "template": item.template,
        "build_args": dict(item.build_args),
        "labels": dict(item.labels),
        "unconfirmed": list(target.unconfirmed),
    }


def plan_json(planned: Iterable[PlannedImage]) -> Iterator[dict[str, object]]:
    """`plan --format json --layers`: each target's contract object with its layers from the bottom, each keyed by what
    determines its files (core/release/layer_sharing.py): images whose layers have the same key share that blob, and
    `shared_by` counts the other selected images that hold it (the build report adds the bytes a node pays)."""
    items = tuple(planned)
    keys = LayerKeys()
    layers = [keys.of(item) for item in items]
    held = holders(layers)
    for item, own in zip(items, layers):
        yield {
            **target_json(item),
            "layers": [{"name": layer.name, "key": layer.key, "python_neutral": layer.python_neutral, "shared_by": held[layer.key] - 1} for layer in own],
        }


def github_matrix(planned: tuple[PlannedImage, ...]) -> dict[str, object]:
    """`{"include": [...]}` for `strategy.matrix: ${{ fromJSON(...) }}`: one job per target."""
    return {
        "include": [
            {
                "id": item.target.id,
                "vendor": item.target.vendor,
                "backend": item.target.backend,
                "backend_version": item.target.backend_version,
                "torch": item.target.torch,
                "python": item.target.python,
                "flavor": item.target.flavor,
                "pair": item.target.pair or "",
                "tag": item.target.tags[0],
                "fingerprint": item.fingerprint,
            }
            for item in planned
        ]
    }
