"""Planning at scale: plan + render of 10,000 targets in-process (goal: under 1 s), `matrix validate`
(under 5 s) and `plan --format json` (under 10 s) of 100,000 targets through the CLI with their peak
memory (growing linearly: 50,000 and 100,000 are measured in the same run), and validation errors at
scale (reporting must be linear in the number of problems).

Run: python -m bench.plan_render [--repeat 3]
The matrices are team forks of the default: custom torch releases (described through [compat]), 5
Pythons, 2 CUDA and 2 ROCm versions each, and 10 flavors from a team template folder.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from buildkit.app.targets import Choices, select_targets

PYTHONS = ["3.10", "3.11", "3.12", "3.13", "3.14"]
BACKENDS_PER_RELEASE = 4  # cuda 13.0, 13.2, rocm 7.2, 7.14
FLAVORS = 10
PER_RELEASE = len(PYTHONS) * BACKENDS_PER_RELEASE * FLAVORS


def write_matrix(folder: Path, targets: int, bad_pythons: int = 0) -> Path:
    """A matrix of about `targets` targets; `bad_pythons` adds that many invalid values (one problem each)."""
    folder.mkdir(parents=True, exist_ok=True)
    templates = folder / "templates"
    templates.mkdir(exist_ok=True)
    flavors = [f"variant{index}" for index in range(FLAVORS)]
    for flavor in flavors:
        (templates / f"{flavor}.Dockerfile.j2").write_text(
            '{% extends "runtime.Dockerfile.j2" %}\n{% block extra %}\nENV VARIANT=' + flavor + "\n{% endblock %}\n"
        )
    lines = [
        'extends = "default"', 'template_dir = "templates"', 'include = [{ torch = "9.*" }]',
        f"flavors = {json.dumps(flavors)}", f"python = {json.dumps(PYTHONS + ['x' * (i + 1) for i in range(bad_pythons)])}", "",
    ]
    for index in range(-(-targets // PER_RELEASE)):
        minor = f"9.{index}"
        lines += [
            f'[compat.torch."{minor}"]', f"python = {json.dumps(PYTHONS)}",
            'cuda = ["13.0", "13.2"]', 'rocm = ["7.2", "7.14"]', 'torchvision = "1.0"', "",
            "[[torch]]", f'version = "{minor}.0"', 'cuda = ["13.0", "13.2"]', 'rocm = ["7.2", "7.14"]', "",
        ]
    path = folder / "matrix.toml"
    path.write_text("\n".join(lines))
    return path


def in_process(path: Path, repeat: int) -> dict:
    timings = []
    for _ in range(repeat):
        start = time.perf_counter()
        rendered = select_targets(Choices(matrix=path)).render()
        timings.append(time.perf_counter() - start)
    return {"targets": len(rendered), "best_s": round(min(timings), 3), "runs_s": [round(t, 3) for t in timings],
            "per_target_us": round(min(timings) / len(rendered) * 1e6, 1)}


# The CLI in a process of its own that reports its own peak memory when it ends.
_MEASURED = ("import resource, sys\nfrom buildkit.cli import main\ncode = main(sys.argv[1:])\n"
             "sys.stderr.write(f'\\npeak_rss_kb={resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}\\n')\nsys.exit(code)\n")


def cli(output: Path, *arguments: str) -> dict:
    """Wall time and peak memory of one `buildkit` process; its standard output goes to a file."""
    start = time.perf_counter()
    with open(output, "w") as sink:
        result = subprocess.run([sys.executable, "-c", _MEASURED, *arguments], stdout=sink, stderr=subprocess.PIPE, text=True)
    seconds = time.perf_counter() - start
    peak = next(int(line.split("=")[1]) for line in result.stderr.splitlines() if line.startswith("peak_rss_kb="))
    return {"exit": result.returncode, "wall_s": round(seconds, 2), "peak_rss_mb": round(peak / 1024),
            "stdout_mb": round(output.stat().st_size / 2**20, 1), "problems": result.stderr.count("error: ")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        ten = write_matrix(folder / "10k", 10_000)
        fifty = write_matrix(folder / "50k", 50_000)
        hundred = write_matrix(folder / "100k", 100_000)
        errors = {n: write_matrix(folder / f"errors{n}", 1_000, bad_pythons=n) for n in (1_000, 4_000)}
        out = folder / "stdout"
        results = {
            "plan+render 10,000 in-process": in_process(ten, args.repeat),
            "validate 50,000": cli(out, "matrix", "validate", "--matrix", str(fifty)),
            "validate 100,000": cli(out, "matrix", "validate", "--matrix", str(hundred)),
            "plan json 50,000": cli(out, "plan", "--format", "json", "--matrix", str(fifty)),
            "plan json 100,000": cli(out, "plan", "--format", "json", "--matrix", str(hundred)),
            "validate with 1,000 problems": cli(out, "matrix", "validate", "--matrix", str(errors[1_000])),
            "validate with 4,000 problems": cli(out, "matrix", "validate", "--matrix", str(errors[4_000])),
        }
    print(json.dumps({"benchmark": "planning at scale", **results, "cpus": os.cpu_count(),
                      "python": platform.python_version()}, indent=2))


if __name__ == "__main__":
    main()
