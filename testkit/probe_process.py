"""The real smoke probe run as buildkit runs it in an image: a fresh Python process printing one JSON line.

In-process calls share torch's state with every earlier test (a warm inductor, setuptools' distutils shim
already decided), so a test of what an image's first run does needs a process of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from buildkit.image import probe


def run_probe(env: dict[str, str] | None = None, *arguments: str) -> dict[str, Any]:
    result = subprocess.run([sys.executable, probe.__file__, *arguments], check=False, capture_output=True, text=True, timeout=400, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    report: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])  # the probe's JSON line
    return report
