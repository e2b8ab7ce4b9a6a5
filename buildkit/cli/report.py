"""`buildkit report --html`: the nightly's static site from the matrix and the documents of a run."""

from __future__ import annotations

from pathlib import Path

from buildkit.cli.options import EXIT_OK, Commands, Invocation, add_selection, command, selection
from buildkit.ui import views


def add_report(commands: Commands) -> None:
    report = command(commands, "report", run_report, help="the nightly's static site: which image fits a GPU, the pair matrix, a page per row of it")
    add_selection(report)
    report.add_argument("--html", type=Path, required=True, metavar="OUT", help="the site's folder (index.html, a page per torch release, Python and flavor)")
    report.add_argument(
        "--from",
        dest="sources",
        action="append",
        type=Path,
        default=[],
        metavar="PATH",
        help="a build or publish report, `verify --json` output or an SBOM, or a folder of them (repeatable)",
    )
    report.add_argument(
        "--previous",
        action="append",
        type=Path,
        default=[],
        metavar="PATH",
        help="the same of the previous nightly: what changed, and what a node holding it pulls (repeatable)",
    )


def run_report(call: Invocation) -> int:
    from buildkit.app.site import site_of
    from buildkit.ui.site import write_site

    args = call.args
    site = site_of(selection(call), args.sources, args.previous)
    written = write_site(site, args.html)
    for note in site.notes:
        views.say(call.err, f"note: {note}")
    views.say(call.out, f"wrote {written.files} files ({views.human_size(written.bytes)}) into {args.html}/: open {args.html / 'index.html'}")
    return EXIT_OK
