"""From command-line choices to rendered targets: the one path plan, render, build and publish share."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from buildkit.core import grammar
from buildkit.errors import Problem, UserError

from buildkit.core.matrix import Matrix, parse_selectors
from buildkit.core.plan import Note, expand, select
from buildkit.core.render import Rendered, Renderer
from buildkit.loader import load_matrix, template_loader


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
