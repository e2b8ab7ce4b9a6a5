"""A faulty team template against a good one: how long `matrix validate` and `render` take to answer (goal: the
error in under 1 s for a syntax error, a sandbox violation and a self-extending template, and within the CPU
budget plus 1 s for a resource bomb, on a team matrix whose every runtime target uses the template).

Run: python -m bench.template_faults [--repeat 3]

The matrix is the default one extended with a team template folder holding `runtime.Dockerfile.j2`: a copy of
the built-in runtime template with a team ENV line (good), or one of the faults below, so every runtime target
of the default matrix renders it. Each command runs as a user runs it, a process of its own, timed from start to
exit; the best of --repeat runs is reported with all of them.
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

from buildkit.adapters.files.bundled import builtin_templates_dir
from buildkit.adapters.template_worker import TIME_BUDGET

FAULTS = {
    "syntax error": '{% extends "_image.Dockerfile.j2" %}{% block base %}\nFROM {{ target.base_image }\n{% endblock %}',
    "sandbox violation": '{% extends "_image.Dockerfile.j2" %}{% block base %}\nFROM {{ target.__class__.__init__.__globals__ }}\n{% endblock %}',
    "self-extending": '{% extends "runtime.Dockerfile.j2" %}\n{% block extra %}RUN true{% endblock %}',
    "resource bomb": '{% extends "_image.Dockerfile.j2" %}{% block base %}\n'
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}\n{% endblock %}",
}


def run(folder: Path, *arguments: str) -> tuple[float, int, str]:
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "buildkit", *arguments], capture_output=True, text=True, cwd=folder)
    return time.perf_counter() - start, result.returncode, result.stderr.strip().splitlines()[-1] if result.stderr.strip() else result.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    good = (builtin_templates_dir() / "runtime.Dockerfile.j2").read_text().replace('{% extends "_image.Dockerfile.j2" %}', "", 1)
    cases = {"good": '{% extends "_image.Dockerfile.j2" %}' + good + "{% block extra %}\nENV TEAM=1\n{% endblock %}\n", **FAULTS}
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "t").mkdir()
        (folder / "m.toml").write_text('extends = "default"\ntemplate_dir = "t"\n')
        for name, template in cases.items():
            (folder / "t" / "runtime.Dockerfile.j2").write_text(template)
            for command in ("validate", "render"):
                arguments = ("matrix", "validate", "--matrix", "m.toml") if command == "validate" else ("render", "--matrix", "m.toml", "--out", "dist")
                runs = []
                for _ in range(args.repeat):
                    seconds, code, said = run(folder, *arguments)
                    subprocess.run(["rm", "-rf", str(folder / "dist")], check=True)
                    runs.append(round(seconds, 2))
                results[f"{name}: {command}"] = {"best_s": min(runs), "runs_s": runs, "exit": code, "says": said[:160]}
    print(
        json.dumps(
            {
                "benchmark": "team template faults",
                "cpu_budget_s": TIME_BUDGET,
                **results,
                "cpus": os.cpu_count(),
                "load_average": os.getloadavg(),
                "python": platform.python_version(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
