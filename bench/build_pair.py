"""Pair build timings on the real engine: cold, warm (nothing changed), and after a package change.

Run: python -m bench.build_pair   (needs dockerd, a BuildKit-capable docker CLI and the local base image
from .ci/base-image.sh). torch is a test double here, so the figures measure buildkit and BuildKit's
caching, not pip downloading gigabytes. One run measures all three, so the ratios compare like with like.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from pathlib import Path

from bench.common import EXTRA_PACKAGE, pair_index, timed_build
from testkit.builds import index_pip_conf, team_matrix
from testkit.runner import remove_images

STEP_RE = re.compile(r"^#(\d+) \[([^\]]*)\] (.*)$")


def step_report(log: Path) -> list[tuple[str, bool]]:
    """(instruction, rebuilt?) for each Dockerfile step in a BuildKit plain log."""
    steps: dict[str, str] = {}
    cached: set[str] = set()
    for line in log.read_text().splitlines():
        if (match := STEP_RE.match(line)) and match.group(2) != "internal":
            steps.setdefault(match.group(1), match.group(3).rsplit("&& ", 1)[-1][:80])  # the command, not the mounts
        elif line.endswith(" CACHED"):
            cached.add(line.split()[0].lstrip("#"))
    return [(text, number not in cached) for number, text in steps.items() if not text.startswith("FROM")]


def build(matrix: Path, pip_conf: Path, out: Path, *extra: str) -> tuple[float, dict]:
    return timed_build(matrix, pip_conf, out, "-j", "2", *extra)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        index = pair_index(folder / "wheels")
        repository = f"buildkit-bench-{int(time.time())}/pytorch"

        def matrix(packages: list[str]) -> Path:
            include = '[{ id = "2.14.1-*13.0-py3.11-runtime" }, { id = "2.14.1-rocm7.2-py3.11-runtime" }]'
            return team_matrix(folder, index.url, repository, include, f"packages = {json.dumps(packages)}\n")

        pip_conf = index_pip_conf(folder, index.url)
        cold, _ = build(matrix([]), pip_conf, folder / "cold", "--no-cache")
        warm, _ = build(matrix([]), pip_conf, folder / "warm")
        changed, report = build(matrix([EXTRA_PACKAGE]), pip_conf, folder / "changed")
        rebuilt = {t["id"]: [text for text, again in step_report(Path(t["log"])) if again] for t in report["targets"]}
        index.stop()
        print(
            json.dumps(
                {
                    "benchmark": "pair build (2 targets, -j 2, torch test doubles)",
                    "cold_s": round(cold, 2),
                    "warm_s": round(warm, 2),
                    "warm_over_cold": round(warm / cold, 3),
                    "package_change_s": round(changed, 2),
                    "rebuilt_steps_after_package_change": rebuilt,
                    "shared": report["pairs"],
                },
                indent=2,
            )
        )
        remove_images(repository)


if __name__ == "__main__":
    main()
