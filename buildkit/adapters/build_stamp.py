"""Per-build facts from the world: the clock and the source revision (kept out of the pure core)."""

from __future__ import annotations

import subprocess
from datetime import datetime, timezone
from pathlib import Path


def created_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def today_utc() -> str:
    """YYYYMMDD, the date of a nightly."""
    return datetime.now(timezone.utc).strftime("%Y%m%d")


def matrix_revision(matrix: Path | None) -> str:
    """The source revision of a matrix file (of the working folder for the default matrix)."""
    return source_revision(matrix.resolve().parent if matrix else Path.cwd())


def source_revision(folder: Path) -> str:
    """The git commit of the folder holding the matrix, or "" outside a git checkout."""
    try:
        result = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""
