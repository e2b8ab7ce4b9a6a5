"""`buildkit report --html`: the nightly's site from the matrix and the documents of a run.

The documents (--from: build and publish reports, `buildkit verify --json`, SBOMs; --previous: the same of the
previous nightly) are read and checked before anything is written; buildkit.core.site makes the site of them
and buildkit.ui.site writes its pages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from buildkit.adapters.build_stamp import created_now
from buildkit.adapters.files.documents import read_documents
from buildkit.app.targets import Choices, select_targets
from buildkit.core.site.evidence import Evidence, gather, read_document
from buildkit.core.site.model import Site, build_site

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path


def evidence_of(paths: Sequence[Path], option: str) -> dict[str, Evidence]:
    """One record per image from every document the paths name, in the order given."""
    return gather(found for name, document in read_documents(paths, option) for found in read_document(name, document))


def site_of(choices: Choices, sources: Sequence[Path], previous: Sequence[Path] = ()) -> Site:
    selection = select_targets(choices)
    today, before = evidence_of(sources, "--from"), evidence_of(previous, "--previous")
    return build_site(selection.plan(), selection.matrix.compat, today, before, created_now())
