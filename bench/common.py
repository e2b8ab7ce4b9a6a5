"""What the build benchmarks share: one timed `buildkit build` through a local wheel index, and the test
pair's index (torch doubles of 2.14.1 plus a small package whose addition is the "package change")."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from testkit.builds import pair_doubles
from testkit.runner import run_buildkit
from testkit.wheel_index import WheelIndex
from testkit.wheels import build_wheel

EXTRA_PACKAGE = "bench-extra==1.0"


def timed_build(matrix: Path, pip_conf: Path, out: Path, *extra: str, env: dict | None = None, timeout: int = 1800) -> tuple[float, dict]:
    """Seconds and report.json of one build on the host network with the index's pip.conf; a failed build
    ends the benchmark with its stderr."""
    started = time.perf_counter()
    result = run_buildkit("build", "--matrix", matrix, "--network", "host", "--pip-conf", pip_conf, "--out", out, *extra, env=env, timeout=timeout)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        # each failed target's own reason when the build got as far as its report, else what it printed last
        report = out / "report.json"
        failed = (
            ["\n".join([f"{t['id']}: {t['error']}", *t["log_tail"]]) for t in json.loads(report.read_text())["targets"] if t["status"] != "built"]
            if report.exists()
            else []
        )
        sys.exit("build failed:\n" + ("\n".join(failed) or result.stderr[-3000:]))
    return seconds, json.loads((out / "report.json").read_text())


def thin_rocm_stack(torch: str, families: tuple[str, ...], max_layer_size: str = "") -> str:
    """A [[torch]] entry of ROCm 7.14's thin wheels only, one image per family (none: device-all)."""
    budget = f'max_layer_size = "{max_layer_size}"\n' if max_layer_size else ""
    return f'\n[[torch]]\nversion = "{torch}"\ncuda = []\nrocm = ["7.14"]\nrocm_families = {json.dumps(list(families))}\n{budget}'


def pair_index(wheels: Path) -> WheelIndex:
    """The 2.14.1 pair's torch and torchvision doubles, and bench-extra 1.0 on the default index; started."""
    extra = build_wheel(wheels / "extra", "bench-extra", "1.0", {"bench_extra/__init__.py": ""})
    return WheelIndex({**pair_doubles(wheels, {"2.14.1": "0.29.1"}), "simple": [extra]}).start()
