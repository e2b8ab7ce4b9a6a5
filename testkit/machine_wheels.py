"""The wheels this machine already has, found through its pip configuration (never hard-coded paths).

pip's `extra-index-url` entries that are file:// simple indexes and its `find-links` folders are read;
tests serve what they hold on 127.0.0.1 so builds install real torch without the internet.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

_HREF_RE = re.compile(r'href="([^"#]+)')


def _pip_config() -> dict[str, str]:
    result = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    values = {}
    for line in result.stdout.splitlines():
        key, _, value = line.partition("=")
        values[key.split(".", 1)[-1].strip()] = value.strip().strip("'\"")
    return values


def local_wheels() -> list[Path]:
    config = _pip_config()
    wheels: dict[str, Path] = {}
    for url in config.get("extra-index-url", "").split() + config.get("index-url", "").split():
        parts = urlsplit(url)
        if parts.scheme != "file":
            continue
        root = Path(unquote(parts.path))
        for page in root.glob("*/index.html"):
            for href in _HREF_RE.findall(page.read_text(errors="replace")):
                path = (page.parent / unquote(href)).resolve()
                if path.suffix == ".whl" and path.exists():
                    wheels.setdefault(path.name, path)
    for folder in config.get("find-links", "").split():
        for path in Path(folder).glob("*.whl"):
            wheels.setdefault(path.name, path)
    return sorted(wheels.values())
