"""The smoke-test probe with --kernels on a GPU machine, without Docker, and the judge's verdict on it.

Run on a machine with a GPU and a CUDA (or ROCm) torch in its python3, from the repository root:

    python3 -m bench.gpu_probe --out DIR [--python PYTHON] [--timeout S]

Writes DIR/probe.json (the probe's report), DIR/probe.stderr, and DIR/verdict.json (every check with its
detail and time), prints the checks, and exits 0 when the verdict passed, 1 when it failed, 2 when no
report came back. The torch of that python3 is judged as an image of its own backend would be, with
--gpu require: no labels declare an arch list, so the arch check compares the devices only.

The judge needs `packaging` (buildkit.core imports it); where that python3 lacks it, the verdict is
skipped with a note, and `python3 -m bench.gpu_probe --judge DIR/probe.json` judges the report anywhere
buildkit is installed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

PROBE = Path(__file__).resolve().parents[1] / "buildkit" / "image" / "probe.py"
DEFAULT_TIMEOUT = 900  # two first compiles (CPU and GPU), the kernels and the libraries, on a cold machine


def run_probe(python: str, timeout: int, out: Path) -> tuple[dict | None, str]:
    started = time.perf_counter()
    try:
        result = subprocess.run([python, str(PROBE), "--kernels"], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as expired:
        stderr = expired.stderr or b""  # bytes, even with text=True
        (out / "probe.stderr").write_text(stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr)
        return None, f"the probe did not finish within {timeout} s"
    (out / "probe.stderr").write_text(result.stderr)
    print(f"probe: exit {result.returncode} after {time.perf_counter() - started:.1f} s", flush=True)
    # not buildkit.adapters.engine.probe_runner's parser: that module imports docker, and this runs where only torch is
    for line in reversed(result.stdout.strip().splitlines()):
        try:
            report = json.loads(line)
        except ValueError:
            continue
        if isinstance(report, dict) and "probe_version" in report:
            (out / "probe.json").write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
            return report, ""
    return None, f"the probe exited with {result.returncode} without a report"


def identity_for(report: dict | None):
    """What a buildkit image of this torch's backend would be (no declared arch list); a CPU-only torch, or
    no report, is judged as a CUDA image, so the verdict says it is a CPU build."""
    from buildkit.core import labels

    torch = (report or {}).get("torch") or {}
    backend, version = ("rocm", torch.get("hip")) if torch.get("hip") else ("cuda", torch.get("cuda"))
    minor = ".".join(str(version).split(".")[:2]) if version else "none"
    return labels.ImageIdentity.read({labels.BACKEND: backend, labels.BACKEND_VERSION: minor})


def judge_report(report: dict | None, failure: str, stderr: str, out: Path) -> int:
    try:
        from buildkit.core.release.judge import judge
    except ImportError as error:
        print(
            f"verdict skipped: the judge cannot be imported here ({error}); judge {out / 'probe.json'} elsewhere with `python3 -m bench.gpu_probe --judge FILE`"
        )
        return 0 if report is not None else 2
    verdict = judge("host python3", identity_for(report), report, "require", host_has_gpu=True, stderr_tail=stderr, probe_failure=failure)
    summary = {
        "passed": verdict.passed,
        "torch": verdict.torch,
        "kernels": verdict.kernels,
        "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail} for c in verdict.checks],
    }
    (out / "verdict.json").write_text(json.dumps(summary, indent=2) + "\n")
    for check in verdict.checks:
        print(f"{'ok  ' if check.passed else 'FAIL'} {check.name}: {check.detail}")
    print(f"verdict: {'passed' if verdict.passed else 'FAILED'} (torch {verdict.torch}, kernels {verdict.kernels})")
    return 0 if verdict.passed else (2 if report is None else 1)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m bench.gpu_probe", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("gpu-probe"), help="folder for probe.json, probe.stderr, verdict.json")
    parser.add_argument("--python", default=sys.executable, help="the Python whose torch is probed (default: this one)")
    parser.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT, help=f"seconds the probe may run (default {DEFAULT_TIMEOUT})")
    parser.add_argument("--judge", type=Path, metavar="PROBE_JSON", help="only judge a report written earlier")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.judge:
        return judge_report(json.loads(args.judge.read_text()), "", "", args.out)
    report, failure = run_probe(args.python, args.timeout, args.out)
    return judge_report(report, failure, (args.out / "probe.stderr").read_text()[-2000:], args.out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
