"""`buildkit compat check` output: Markdown for people (it reads in a terminal and renders as a GitHub job
summary), JSON for machines."""

from __future__ import annotations

from packaging.version import Version

from buildkit.app.compat_check import CheckOutcome
from buildkit.ui.views import escaped_lines


def compat_markdown(outcome: CheckOutcome) -> str:
    """The report, escaped for the terminal it is printed on (it quotes the index's pages)."""
    return escaped_lines(_markdown(outcome))


def _markdown(outcome: CheckOutcome) -> str:
    facts = outcome.facts
    lines = [f"## compat check: {facts.url}", "",
             f"{len(facts.found)} of {len(facts.probed)} variant folders have a torch page: {', '.join(facts.found)}.", ""]
    if not outcome.differences:
        return "\n".join(lines + [f"No differences: {outcome.data_path} agrees with the index.", ""])
    lines += ["| torch | on the index, not in the data | in the data, not on the index |", "|---|---|---|"]
    for minor in sorted({d.torch for d in outcome.differences}, key=Version):
        ours = [d for d in outcome.differences if d.torch == minor]
        lines.append(f"| {minor} | {_cell(d for d in ours if d.on_index)} | {_cell(d for d in ours if not d.on_index)} |")
    if outcome.unwritable:
        lines += ["", *(f"- not written: torch {d.torch}, {d.subject}: {d.note or 'change the data by hand'}" for d in outcome.unwritable)]
    if outcome.diff:
        verb = "Applied to" if outcome.written else "Proposed change to"
        hint = "" if outcome.written else " (apply it with `buildkit compat check --write`)"
        lines += ["", f"{verb} {outcome.data_path}{hint}:", "", "```diff", outcome.diff.rstrip("\n"), "```"]
    return "\n".join(lines + [""])


def _cell(differences) -> str:
    return ", ".join(d.subject for d in differences) or "-"


def compat_json(outcome: CheckOutcome) -> dict:
    facts = outcome.facts
    return {
        "index": facts.url,
        "data": str(outcome.data_path),
        "probed": list(facts.probed),
        "found": list(facts.found),
        "differences": [
            {"torch": d.torch, "subject": d.subject, "on": "index" if d.on_index else "data", "writable": d.writable, "note": d.note or None}
            for d in outcome.differences
        ],
        "diff": outcome.diff,
        "written": outcome.written,
        "agrees": outcome.agrees,
    }
