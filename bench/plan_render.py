"""Planning at scale: `matrix validate` (goal: 100,000 targets under 5 s) and `plan --format json` (under 10 s)
through the CLI, and plan + render in-process (10,000 targets under 1 s), each at 10,000 and 100,000 targets with
the peak memory of its process (growing linearly), validation errors at scale (reporting must be linear in
the number of problems), and the default matrix with 40,000 distinct exclude globs on target ids (under 10 s;
tests/unit/test_matrix_scale.py proves each rule's work is the same at any count, by counting calls).

Run: python -m bench.plan_render [--repeat 3]

The generated matrices (write_matrix) are team forks of the default matrix, laid out so anyone can rebuild them:
- `extends = "default"`, `template_dir = "templates"`, `include = [{ torch = "9.*" }]` (only the generated
  stacks, not the default's own), `rocm_families = []` (one ROCm image per version, with every arch);
- 10 team flavors variant0 … variant9, each `templates/variantN.Dockerfile.j2` extending the built-in runtime
  template with one ENV line of its own in block `extra` (so every render reaches a team template: the
  bounded worker, the sandbox, shapes);
- 5 Pythons (3.10 to 3.14);
- N/200 custom torch releases 9.0.0, 9.1.0, … declared through `[compat.torch."9.K"]` (those Pythons, CUDA
  13.0 and 13.2, ROCm 7.2 and 7.14, torchvision 1.0), each a `[[torch]]` stack of those four backends:
  200 targets per release, half NVIDIA and half AMD (10,000 targets: 50 releases, 5,000 nvidia + 5,000 amd).
CLI runs are one process each, their peak resident memory read from the process itself; at 100,000, validate
and plan json run twice, on every core and pinned to one (a large selection's work is split over the cores); the in-process figure
is the best of --repeat runs of `select_targets(...).render()` in one process (10,000) and one run in a process
of its own (100,000, which holds 100,000 Dockerfiles).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PYTHONS = ["3.10", "3.11", "3.12", "3.13", "3.14"]
BACKENDS_PER_RELEASE = 4  # cuda 13.0, 13.2, rocm 7.2, 7.14
FLAVORS = 10
PER_RELEASE = len(PYTHONS) * BACKENDS_PER_RELEASE * FLAVORS


def write_matrix(folder: Path, targets: int, bad_rules: int = 0) -> Path:
    """A matrix of `targets` targets (a multiple of PER_RELEASE); `bad_rules` adds that many include rules that match
    no target (one problem each; a list of thousands of invalid Pythons is refused whole by its bound of 16)."""
    folder.mkdir(parents=True, exist_ok=True)
    templates = folder / "templates"
    templates.mkdir(exist_ok=True)
    flavors = [f"variant{index}" for index in range(FLAVORS)]
    for flavor in flavors:
        (templates / f"{flavor}.Dockerfile.j2").write_text(
            '{% extends "runtime.Dockerfile.j2" %}\n{% block extra %}\nENV VARIANT=' + flavor + "\n{% endblock %}\n"
        )
    lines = [
        'extends = "default"',
        'template_dir = "templates"',
        "include = " + json.dumps([{"torch": "9.*"}, *({"id": f"nothing-{i}*"} for i in range(bad_rules))]).replace('": ', '" = '),
        "rocm_families = []",
        f"flavors = {json.dumps(flavors)}",
        f"python = {json.dumps(PYTHONS)}",
        "",
    ]
    for index in range(-(-targets // PER_RELEASE)):
        minor = f"9.{index}"
        lines += [
            f'[compat.torch."{minor}"]',
            f"python = {json.dumps(PYTHONS)}",
            'cuda = ["13.0", "13.2"]',
            'rocm = ["7.2", "7.14"]',
            'torchvision = "1.0"',
            "",
            "[[torch]]",
            f'version = "{minor}.0"',
            'cuda = ["13.0", "13.2"]',
            'rocm = ["7.2", "7.14"]',
            "",
        ]
    path = folder / "matrix.toml"
    path.write_text("\n".join(lines))
    return path


# A process of its own that runs the CLI, or renders in-process, and reports its peak memory.
_MEASURED = """\
import resource, sys
from pathlib import Path
if sys.argv[1] == "--render":
    from buildkit.app.targets import Choices, select_targets
    rendered = select_targets(Choices(matrix=Path(sys.argv[2]))).render()
    code, count = 0, len(rendered)
else:
    from buildkit.cli import main
    code, count = main(sys.argv[1:]), 0
peak = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))  # kB; reset at exec, unlike ru_maxrss
sys.stderr.write(f"\\nmeasured={count} {peak}\\n")
sys.exit(code)
"""


def write_rules_matrix(folder: Path, rules: int) -> Path:
    """The default matrix with `rules` distinct exclude globs on target ids that match nothing (each glob is
    tried on every target id: the costliest shape of rule)."""
    folder.mkdir(parents=True, exist_ok=True)
    globs = ",\n".join(f'  {{ id = "*-py3.1{index % 10}-x{index}*" }}' for index in range(rules))
    path = folder / "matrix.toml"
    path.write_text(f'extends = "default"\nexclude = [\n{globs}\n]\n')
    return path


def measured(output: Path, *arguments: str, one_core: bool = False) -> dict:
    """Wall time (the process's start included, as a user waits for it) and peak memory of one process; its
    stdout goes to a file. `one_core`: the process may run on one CPU only, so validate and plan do not split
    their work over the cores (the parent's peak memory is measured; a forked child's pages are mostly the
    parent's, shared)."""
    start, used = time.perf_counter(), _children_cpu()
    pinned = (lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})) if one_core else None
    with open(output, "w") as sink:
        result = subprocess.run([sys.executable, "-c", _MEASURED, *arguments], stdout=sink, stderr=subprocess.PIPE, text=True, preexec_fn=pinned)
    seconds, cpu = time.perf_counter() - start, _children_cpu() - used
    line = next(line for line in result.stderr.splitlines() if line.startswith("measured="))
    count, peak = line.removeprefix("measured=").split()
    figures = {"exit": result.returncode, "wall_s": round(seconds, 2), "cpu_s": round(cpu, 2), "peak_rss_mb": round(int(peak) / 1024)}
    if int(count):
        figures["targets"] = int(count)
    else:
        figures |= {"stdout_mb": round(output.stat().st_size / 2**20, 1), "problems": result.stderr.count("error: ")}
    return figures


def _children_cpu() -> float:
    """CPU seconds (user and system) of this process's ended children and their own ended children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def in_process(path: Path, repeat: int) -> dict:
    """Best of `repeat` wall times, and the CPU time of this process in that run (the template worker's own is not
    in it): on a virtual machine whose CPU is shared, wall time includes what the host's other guests took
    (steal), CPU time does not."""
    from buildkit.app.targets import Choices, select_targets

    timings = []
    for _ in range(repeat):
        start, cpu = time.perf_counter(), time.process_time()
        rendered = select_targets(Choices(matrix=path)).render()
        timings.append((time.perf_counter() - start, time.process_time() - cpu))
    best, best_cpu = min(timings)
    return {
        "targets": len(rendered),
        "best_s": round(best, 3),
        "cpu_s": round(best_cpu, 3),
        "runs_s": [round(wall, 3) for wall, _ in timings],
        "per_target_us": round(best / len(rendered) * 1e6, 1),
    }


def reference_loop() -> float:
    """Seconds of a fixed pure-Python loop (dict stores of new strings), best of three: how fast this host runs
    the interpreter now, so figures from hosts of other speeds, or a busy moment, can be told apart."""

    def once() -> float:
        start, table = time.perf_counter(), {}
        for number in range(2_000_000):
            table[number % 1000] = str(number)
        return time.perf_counter() - start

    return round(min(once() for _ in range(3)), 3)


def steal_seconds() -> float | None:
    """CPU seconds the hypervisor gave the host's other guests instead of this machine, over all its CPUs since boot
    (/proc/stat's steal column; None where there is none): what makes a shared virtual machine's wall times noisy."""
    try:
        with open("/proc/stat") as stat:
            fields = stat.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        ten = write_matrix(folder / "10k", 10_000)
        hundred = write_matrix(folder / "100k", 100_000)
        errors = {n: write_matrix(folder / f"errors{n}", 1_000, bad_rules=n) for n in (1_000, 4_000)}
        rules = write_rules_matrix(folder / "rules", 40_000)
        out = folder / "stdout"
        stolen = steal_seconds()
        results = {
            "reference loop s (before)": reference_loop(),
            "plan+render 10,000 in-process": in_process(ten, args.repeat),
            "plan+render 10,000 (process)": measured(out, "--render", str(ten)),
            "plan+render 100,000 (process)": measured(out, "--render", str(hundred)),
            "validate 10,000": measured(out, "matrix", "validate", "--matrix", str(ten)),
            "validate 100,000": measured(out, "matrix", "validate", "--matrix", str(hundred)),
            "validate 100,000 (one core)": measured(out, "matrix", "validate", "--matrix", str(hundred), one_core=True),
            "plan json 10,000": measured(out, "plan", "--format", "json", "--matrix", str(ten)),
            "plan json 100,000": measured(out, "plan", "--format", "json", "--matrix", str(hundred)),
            "plan json 100,000 (one core)": measured(out, "plan", "--format", "json", "--matrix", str(hundred), one_core=True),
            "validate with 1,000 problems": measured(out, "matrix", "validate", "--matrix", str(errors[1_000])),
            "validate with 4,000 problems": measured(out, "matrix", "validate", "--matrix", str(errors[4_000])),
            "validate with 40,000 exclude globs": measured(out, "matrix", "validate", "--matrix", str(rules)),
            "reference loop s (after)": reference_loop(),
        }
        after = steal_seconds()
        results["steal s (during the run, all CPUs)"] = None if stolen is None or after is None else round(after - stolen, 1)
    print(
        json.dumps(
            {"benchmark": "planning at scale", **results, "cpus": os.cpu_count(), "load_average": os.getloadavg(), "python": platform.python_version()},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
