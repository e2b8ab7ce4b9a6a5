"""From command-line choices to rendered targets: the one path plan, render, build and publish share."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from buildkit.core import grammar
from buildkit.errors import Problem, UserError

from buildkit.core.matrix import Matrix, parse_selectors
from buildkit.core.plan import Note, Target, expand, select
from buildkit.core.source import SOURCE_FLAVOR
from buildkit.core.render import Rendered, Renderer
from buildkit.adapters.matrix_files import load_matrix, template_loader


@dataclass(frozen=True)
class SourceOptions:
    """Command-line choices for compiled targets: narrowed ROCm archs, a local checkout, compile jobs."""

    gpu_archs: tuple[str, ...] = ()
    pytorch_src: Path | None = None
    max_jobs: int = 0


def _apply_source_options(targets: list[Target], options: SourceOptions, known: tuple[str, ...]) -> list[Target]:
    unknown = [arch for arch in options.gpu_archs if arch not in known]
    if unknown:
        raise UserError(Problem("--gpu-arch", f"unknown gfx target {', '.join(unknown)}; known: {', '.join(known)}"))
    if options.pytorch_src is not None and not (options.pytorch_src / "tools" / "amd_build" / "build_amd.py").is_file():
        raise UserError(Problem("--pytorch-src", f"{options.pytorch_src} is not a PyTorch checkout (no tools/amd_build/build_amd.py)"))
    changed = []
    for target in targets:
        if target.backend == "rocm" and options.gpu_archs:
            extra = [a for a in options.gpu_archs if a not in target.archs]
            if extra and target.flavor != SOURCE_FLAVOR:
                raise UserError(Problem("--gpu-arch", f"{', '.join(extra)} not in {target.id}'s wheel arch list; "
                                                      "only the source flavor compiles for new archs"))
            target = replace(target, archs=options.gpu_archs)
        if target.flavor == SOURCE_FLAVOR:
            target = replace(target, source_checkout=options.pytorch_src is not None, max_jobs=options.max_jobs)
        changed.append(target)
    return changed


@dataclass(frozen=True)
class Selection:
    matrix: Matrix
    rendered: tuple[Rendered, ...]
    notes: tuple[Note, ...]


def select_targets(
    matrix_path: Path | None,
    vendor: str = "all",
    selectors: list[str] | None = None,
    registry: str | None = None,
    channel: str | None = None,
    today: str = "",
    source: SourceOptions = SourceOptions(),
) -> Selection:
    """The selected targets, rendered; `registry` and `channel` override the matrix's (publish options)."""
    matrix = load_matrix(matrix_path)
    if registry is not None:
        if grammar.registry(registry):
            raise UserError(Problem("--registry", f"expected {grammar.registry(registry)}, got {registry!r}"))
        matrix = replace(matrix, registry=registry)
    if channel is not None:
        matrix = replace(matrix, stacks=tuple(replace(stack, channel=channel) for stack in matrix.stacks))
    rule = parse_selectors(selectors or [])
    plan = select(expand(matrix), vendor, rule)
    targets = [replace(t, channel_date=today) if t.channel == "nightly" else t for t in plan.targets]
    targets = _apply_source_options(targets, source, matrix.compat.known_archs["rocm"])
    renderer = Renderer(template_loader(matrix), matrix.source)
    return Selection(matrix, tuple(renderer.render(target) for target in targets), plan.notes)


def target_json(item: Rendered) -> dict:
    """The plan contract (DESIGN.md §4): what `plan --format json` prints for each target."""
    target = item.target
    return {
        "id": target.id,
        "vendor": target.vendor,
        "backend": target.backend,
        "backend_version": target.backend_version,
        "torch": target.torch,
        "python": target.python,
        "flavor": target.flavor,
        "tags": list(target.tags),
        "pair": target.pair,
        "fingerprint": item.fingerprint,
        "base_image": target.base_image,
        "index_url": target.index_url,
        "gpu_archs": list(target.archs),
        "companions": list(target.companions),
        "packages": list(target.packages),
        "channel": target.channel,
        "template": item.template,
        "build_args": dict(item.build_args),
        "labels": dict(item.labels),
        "unconfirmed": list(target.unconfirmed),
    }


def github_matrix(selection: Selection) -> dict:
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
            for item in selection.rendered
        ]
    }
