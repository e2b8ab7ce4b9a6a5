"""`buildkit compat check` output: Markdown for people, JSON for machines.

The Markdown reads in a terminal and renders as a GitHub job summary; the nightly's pull request is made from the
JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from packaging.version import Version

from buildkit.core.compat.facts import COMPANION_PACKAGES
from buildkit.ui.views import escaped_lines

if TYPE_CHECKING:
    from collections.abc import Iterable

    from buildkit.app.compat_check import CheckOutcome


def compat_markdown(outcome: CheckOutcome) -> str:
    """The report, escaped for the terminal it is printed on (it quotes the indexes' pages)."""
    return escaped_lines(_markdown(outcome))


def _markdown(outcome: CheckOutcome) -> str:
    facts = outcome.facts
    lines = [f"## compat check: {', '.join(outcome.read)}", ""]
    if facts.index is not None and facts.index.read_pytorch:
        lines += [f"{len(facts.index.found)} of {len(facts.index.probed)} variant folders have a torch page: {', '.join(facts.index.found)}.", ""]
    if facts.pypi is not None:
        lines += ["| torch release | published | Python | PyPI's build | pins | companions |", "|---|---|---|---|---|---|"]
        for row in _releases(outcome)[-6:]:
            lines.append(
                f"| {row['torch']} | {row['date'] or '-'} | {row['requires_python'] or '-'} | {row['pypi'] or '-'} | "
                f"{', '.join(row['pins']) or '-'} | {', '.join(f'{k} {v}' for k, v in row['companions'].items()) or '-'} |"
            )
        lines.append("")
        for name, versions in (outcome.unpaired or {}).items():
            if versions:
                lines.append(f"- {name} {', '.join(versions)}: published on a day without a torch release its requirement admits; paired with none")
        lines.append("")
    for finding in facts.code:
        partial = f" (a few kernels also for {' '.join(finding.partial)})" if finding.partial else ""
        lines.append(f"- {finding.wheel}: {finding.backend} {finding.version} code for {' '.join(finding.archs)}{partial}")
    if facts.code:
        lines.append("")
    if outcome.amd:
        lines += ["AMD's gfx targets (rocm-bootstrap, which buildkit reads them from) against the data's [gfx] table:", ""]
        lines += [
            f"- {d.subject}: {'rocm-bootstrap knows it, the data does not' if d.in_rocm_bootstrap else 'in the data only'}; {d.note}" for d in outcome.amd
        ]
        lines.append("")
    if outcome.pending:
        lines += ["Only an index this check did not read can settle:", ""]
        lines += [f"- torch {p.torch}, {p.subject}: {p.why}" for p in outcome.pending]
        lines.append("")
    if not outcome.differences:
        return "\n".join([*lines, f"No differences: {outcome.data_path} agrees with the indexes.", ""])
    lines += ["| torch | on the indexes, not in the data | in the data, not on the index |", "|---|---|---|"]
    for minor in sorted({d.torch for d in outcome.differences}, key=Version):
        ours = [d for d in outcome.differences if d.torch == minor]
        lines.append(f"| {minor} | {_cell(d for d in ours if d.on_index)} | {_cell(d for d in ours if not d.on_index)} |")
    if outcome.unwritable:
        lines += ["", *(f"- not written: torch {d.torch}, {d.subject}: {d.note or 'change the data by hand'}" for d in outcome.unwritable)]
    if outcome.diff:
        verb = "Applied" if outcome.written else "Proposed change"
        hint = "" if outcome.written else " (apply it with `buildkit compat check --write`)"
        lines += ["", f"{verb}{hint}:", "", "```diff", outcome.diff.rstrip("\n"), "```"]
    return "\n".join([*lines, ""])


class _Shown(Protocol):
    """What a table cell shows of a difference (core/upstream/check.py's Difference: that room is its use case's alone)."""

    @property
    def subject(self) -> str: ...
    @property
    def note(self) -> str: ...
    @property
    def writable(self) -> bool: ...


def _cell(differences: Iterable[_Shown]) -> str:
    return ", ".join(d.subject + (f" ({d.note})" if d.note and d.writable else "") for d in differences) or "-"


def _releases(outcome: CheckOutcome) -> list[dict[str, Any]]:
    """Each torch release read on PyPI, with what its artifacts say."""
    pypi = outcome.facts.pypi
    if pypi is None:
        return []
    pairings = pypi.pairings()
    rows = []
    for version in sorted(pypi.torch, key=Version):
        published = pypi.published(version, pairings)
        rows.append(
            {
                "torch": version,
                "date": published.date,
                "requires_python": published.requires_python,
                "pythons": list(pypi.pythons(version)),
                "pypi": published.pypi,
                "wheel": pypi.torch[version].wheel,
                "pins": [pin for pins in published.pins.values() for pin in pins],
                "companions": {name: published.companions[name] for name in COMPANION_PACKAGES if name in published.companions},
            }
        )
    return rows


def compat_json(outcome: CheckOutcome) -> dict[str, Any]:
    facts = outcome.facts
    index = facts.index
    return {
        "read": list(outcome.read),
        "index": index.url if index else None,
        "data": str(outcome.data_path),
        "matrix": str(outcome.matrix_path) if outcome.matrix_path else None,
        "probed": list(index.probed) if index else [],
        "found": list(index.found) if index else [],
        "releases": _releases(outcome),
        "unpaired": {name: list(versions) for name, versions in (outcome.unpaired or {}).items()},
        "code": [
            {"release": f.release, "backend": f.backend, "backend_version": f.version, "wheel": f.wheel, "archs": list(f.archs), "partial": list(f.partial)}
            for f in facts.code
        ],
        "differences": [
            {"torch": d.torch, "subject": d.subject, "on": "index" if d.on_index else "data", "writable": d.writable, "note": d.note or None}
            for d in outcome.differences
        ],
        "amd": [{"subject": d.subject, "on": "rocm-bootstrap" if d.in_rocm_bootstrap else "data", "note": d.note} for d in outcome.amd],
        "pending": [{"torch": p.torch, "subject": p.subject, "why": p.why} for p in outcome.pending],
        "diff": outcome.diff,
        "written": outcome.written,
        "agrees": outcome.agrees,
    }
