"""AMD's target table as a newer rocm-bootstrap would have it: one more target, for tests that show buildkit
reads the package (not a copy) each time it loads its data. A TEST DOUBLE of a future release: the table is
changed with pytest's monkeypatch, so the real one is back after the test."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from rocm_bootstrap import targets

if TYPE_CHECKING:
    import pytest

NEW_TARGET = "gfx1252"


def with_new_amd_target(monkeypatch: pytest.MonkeyPatch) -> targets.GfxTarget:
    """rocm-bootstrap's public table (ALL_TARGETS and the sub-family and family holding it) with gfx1252, a third
    GFX12.5 target, as a newer rocm-bootstrap would add it."""
    new = targets.GfxTarget(name=NEW_TARGET, major=12, minor=5, stepping=2, xnack=targets.XnackMode.DEFAULT_ON)
    grown = {bundle.key: replace(bundle, members=(*bundle.members, new)) for bundle in (targets.BUNDLE_GFX12_5, targets.BUNDLE_GFX12)}
    monkeypatch.setattr(targets, "ALL_TARGETS", (*targets.ALL_TARGETS, new))
    monkeypatch.setattr(targets, "ALL_SUB_FAMILIES", tuple(grown.get(b.key, b) for b in targets.ALL_SUB_FAMILIES))
    monkeypatch.setattr(targets, "ALL_FAMILIES", tuple(grown.get(b.key, b) for b in targets.ALL_FAMILIES))
    return new
