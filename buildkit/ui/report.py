"""Build reports: JSON for machines, a Markdown table for people (and $GITHUB_STEP_SUMMARY)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from buildkit.adapters.files.outputs import write_atomic
from buildkit.app.build import BuildRun, BuildStatus, TargetResult
from buildkit.core.release.decisions import Outcome
from buildkit.errors import redact_urls
from buildkit.ui.views import human_size

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

    from buildkit.app.publish import PublishRun
    from buildkit.core.release.judge import Verdict
    from buildkit.core.release.layer_sharing import NodeCost


def target_json(result: TargetResult, shares: Sequence[NodeCost] = ()) -> dict[str, Any]:
    return {
        "id": result.id,
        "vendor": result.vendor,
        "pair": result.pair,
        "status": result.status.value,
        "tags": result.tags if result.status is BuildStatus.BUILT else [],
        "image_id": result.image_id,
        "size": result.size,
        "layer_bytes": result.layer_bytes,
        "filesystem_bytes": result.filesystem_bytes,
        "efficiency": round(result.efficiency, 4) if result.efficiency else None,
        "seconds": result.seconds,
        "log": result.log,
        "error": result.error or None,
        "log_tail": result.log_tail,
        "digest": result.digest or None,
        "compression": result.compression or None,
        "layers": result.layers,
        "layer_sizes": [{"layer": name, "bytes": size} for name, size in result.layer_sizes],
        "largest_layers": [{"layer": name, "bytes": size} for name, size in largest_layers(result)],
        # what a node holding another image of this run pays to add this one, cheapest first (uncompressed bytes)
        "shares": [
            {
                "held": cost.held,
                "shared_layers": list(cost.shared),
                "shared_bytes": cost.shared_bytes,
                "fetched_bytes": cost.fetched_bytes,
                "unpacked_bytes": cost.unpacked_bytes,
            }
            for cost in shares
        ],
        "smoke": verdict_json(result.smoke) if result.smoke else None,
        "platforms": {platform: verdict_json(verdict) for platform, verdict in result.platform_smoke.items()},
    }


def largest_layers(result: TargetResult, count: int = 5) -> list[tuple[str, int]]:
    return sorted(result.layer_sizes, key=lambda layer: layer[1], reverse=True)[:count]


def verdict_json(verdict: Verdict) -> dict[str, Any]:
    return {
        "image": verdict.image,
        "passed": verdict.passed,
        "reused": verdict.reused,
        "torch": verdict.torch,
        "kernels": verdict.kernels,
        "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail} for c in verdict.checks],
        "probe": dict(verdict.report),
    }


def verdicts_json(verdicts: Sequence[Verdict]) -> list[dict[str, Any]]:
    """`buildkit test --json`: every image's verdict with its probe report."""
    return [verdict_json(verdict) for verdict in verdicts]


def run_json(run: BuildRun, engine_description: str) -> dict[str, Any]:
    return {
        "engine": engine_description,
        "interrupted": run.interrupted,
        "engine_lost": run.engine_lost,
        "totals": {status.value: sum(1 for r in run.results if r.status is status) for status in BuildStatus if status is not BuildStatus.PENDING},
        "targets": [target_json(result, run.shares.get(result.id, [])) for result in run.results],
        "pairs": [
            {
                "pair": p.pair,
                "members": list(p.members),
                "shared_layers": p.shared_layers,
                "shared_bytes": p.shared_bytes,
                "parity": None if p.parity is None else {"passed": p.parity.passed, "differences": list(p.parity.differences)},
            }
            for p in run.pairs
        ],
    }


def run_markdown(run: BuildRun) -> str:
    lines = [
        "| target | status | smoke test | size | compression | efficiency | time | tags / error |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in run.results:
        detail = "<br>".join(f"`{t}`" for t in r.tags) if r.status is BuildStatus.BUILT else (r.error or r.status.value)
        efficiency = f"{r.efficiency:.3f}" if r.efficiency else "-"
        seconds = f"{r.seconds:.1f} s" if r.seconds is not None else "-"
        smoke = (
            "-"
            if r.smoke is None
            else ("passed" if r.smoke.passed else "failed") + f", kernels {r.smoke.kernels}" + (" (this image's earlier report)" if r.smoke.reused else "")
        )
        lines.append(f"| `{r.id}` | {r.status.value} | {smoke} | {human_size(r.size)} | {r.compression or '-'} | {efficiency} | {seconds} | {detail} |")
    built = [r for r in run.results if r.layer_sizes]
    if built:
        lines += ["", "| target | largest layers (uncompressed) |", "|---|---|"]
        lines += [f"| `{r.id}` | " + ", ".join(f"{name} {human_size(size)}" for name, size in largest_layers(r, 3)) + " |" for r in built]
    nearest = {name: costs[0] for name, costs in run.shares.items() if costs}
    if nearest:
        lines += ["", "| target | a node holding | shares with it | fetches | unpacks |", "|---|---|---|---|---|"]
        lines += [
            f"| `{name}` | `{cost.held}` | {len(cost.shared)} layers, {human_size(cost.shared_bytes)} | {human_size(cost.fetched_bytes)} | "
            f"{human_size(cost.unpacked_bytes)} |"
            for name, cost in nearest.items()
        ]
    if run.pairs:
        lines += ["", "| pair | twins | shared layers | shared bytes | parity |", "|---|---|---|---|---|"]
        for p in run.pairs:
            parity = "-" if p.parity is None else ("same" if p.parity.passed else "<br>".join(p.parity.differences))
            lines.append(f"| `{p.pair}` | {' / '.join(p.members)} | {p.shared_layers} | {human_size(p.shared_bytes)} | {parity} |")
    for r in run.results:
        if r.status is BuildStatus.FAILED and r.log_tail:
            lines += ["", f"<details><summary>{r.id}: last lines of {r.log}</summary>", "", "```", *r.log_tail, "```", "</details>"]
    if run.interrupted:
        lines += ["", "Interrupted: targets not finished are listed as cancelled or not-started."]
    return "\n".join(lines) + "\n"


def write_reports(run: BuildRun, engine_description: str, json_path: Path) -> Path:
    """Writes the JSON report and a Markdown twin next to it (same name, .md)."""
    return _write_pair(json_path, run_json(run, engine_description), run_markdown(run))


def _write_pair(json_path: Path, document: Mapping[str, Any], markdown_text: str) -> Path:
    """The JSON report and its Markdown twin, each written whole and never through a link, URLs redacted."""
    json_path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(json_path, (redact_urls(json.dumps(document, indent=2)) + "\n").encode("utf-8"), "--report")
    markdown = json_path.with_suffix(".md")
    write_atomic(markdown, redact_urls(markdown_text).encode("utf-8"), "--report")
    return markdown


def publish_json(run: PublishRun) -> dict[str, Any]:
    return {
        "totals": {status.value: sum(1 for t in run.targets if t.status is status) for status in Outcome},
        "targets": [
            {
                "id": t.id,
                "pair": t.pair,
                "status": t.status.value,
                "digest": t.digest or None,
                "size": t.size,
                "seconds": t.seconds,
                "tags": t.tags,
                "error": t.error or None,
            }
            for t in run.targets
        ],
        "pairs": run.pairs,
        "floating_tags_held": run.held,
        "gpu_gate": "on" if run.gpu_gate else "off (floating tags moved without a GPU test)",
        "deleted": run.deleted,
        "registry_requests": run.requests,
        "seconds": round(run.seconds, 3),
    }


def publish_markdown(run: PublishRun) -> str:
    lines = ["| target | status | digest | size | time | tags / error |", "|---|---|---|---|---|---|"]
    for t in run.targets:
        detail = "<br>".join(f"`{tag}`" for tag in t.tags) if t.tags else (t.error or "-")
        seconds = f"{t.seconds:.1f} s" if t.seconds is not None else "-"
        lines.append(f"| `{t.id}` | {t.status.value} | `{t.digest[:19] or '-'}` | {human_size(t.size)} | {seconds} | {detail} |")
    if run.pairs:
        lines += ["", "| pair | floating tags |", "|---|---|"] + [f"| `{p}` | {what} |" for p, what in sorted(run.pairs.items())]
    if run.held:
        lines += ["", "Own floating tags held (`-nightly`):", *[f"- `{target}`: {why}" for target, why in sorted(run.held.items())]]
    if not run.gpu_gate:
        lines += ["", "GPU gate off (--gpu-gate off): floating tags moved without a GPU test of the images."]
    if run.deleted:
        lines += ["", "Deleted nightly tags:", *[f"- `{tag}`" for tag in run.deleted]]
    totals = publish_json(run)["totals"]
    lines += ["", "Totals: " + ", ".join(f"{n} {status}" for status, n in totals.items() if n) + f"; {run.requests} registry requests in {run.seconds:.2f} s"]
    return "\n".join(lines) + "\n"


def write_publish_reports(run: PublishRun, json_path: Path) -> Path:
    return _write_pair(json_path, publish_json(run), publish_markdown(run))
