"""Plan + render a synthetic matrix of 10,000 targets (goal: under 1 s on a 2-core machine).

Run: python -m bench.plan_render [--targets 10000] [--repeat 3]
The matrix is a team fork of the default: 50 custom torch releases (described through [compat]),
5 Pythons, 2 CUDA and 2 ROCm versions each, and 10 flavors from a team template folder. The figure is
the best of --repeat runs of load + validate + expand + render + fingerprint, in one process.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from pathlib import Path

from buildkit.app.targets import select_targets

PYTHONS = ["3.10", "3.11", "3.12", "3.13", "3.14"]
BACKENDS_PER_RELEASE = 4  # cuda 13.0, 13.2, rocm 7.2, 7.14
FLAVORS = 10


def write_matrix(folder: Path, releases: int) -> Path:
    templates = folder / "templates"
    templates.mkdir()
    flavors = [f"variant{index}" for index in range(FLAVORS)]
    for flavor in flavors:
        (templates / f"{flavor}.Dockerfile.j2").write_text(
            '{% extends "runtime.Dockerfile.j2" %}\n{% block extra %}\nENV VARIANT=' + flavor + "\n{% endblock %}\n"
        )
    lines = [
        'extends = "default"', 'template_dir = "templates"', 'include = [{ torch = "9.*" }]',
        f"flavors = {json.dumps(flavors)}", f"python = {json.dumps(PYTHONS)}", "",
    ]
    for index in range(releases):
        minor = f"9.{index}"
        lines += [
            f'[compat.torch."{minor}"]', f"python = {json.dumps(PYTHONS)}",
            'cuda = ["13.0", "13.2"]', 'rocm = ["7.2", "7.14"]', 'torchvision = "1.0"', "",
            "[[torch]]", f'version = "{minor}.0"', 'cuda = ["13.0", "13.2"]', 'rocm = ["7.2", "7.14"]', "",
        ]
    path = folder / "matrix.toml"
    path.write_text("\n".join(lines))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    releases = -(-args.targets // (len(PYTHONS) * BACKENDS_PER_RELEASE * FLAVORS))
    with tempfile.TemporaryDirectory() as tmp:
        path = write_matrix(Path(tmp), releases)
        default_only = select_targets(None)
        timings = []
        for _ in range(args.repeat):
            start = time.perf_counter()
            selection = select_targets(path)
            timings.append(time.perf_counter() - start)
    count = len(selection.rendered) - len(default_only.rendered)
    print(json.dumps({
        "benchmark": "plan+render",
        "targets": len(selection.rendered),
        "synthetic_targets": count,
        "best_s": round(min(timings), 3),
        "runs_s": [round(t, 3) for t in timings],
        "per_target_us": round(min(timings) / len(selection.rendered) * 1e6, 1),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
    }, indent=2))


if __name__ == "__main__":
    main()
