"""One token per test session: every image repository a session's tests build into carries it, so its clean-up
removes its own images and never another session's sharing the engine."""

from __future__ import annotations

import uuid

SESSION = uuid.uuid4().hex[:8]


def session_repository(kind: str) -> str:
    """A repository of this session's: buildkit-test-<session>-<kind>-<unique>/pytorch."""
    return f"buildkit-test-{SESSION}-{kind}-{uuid.uuid4().hex[:6]}/pytorch"
