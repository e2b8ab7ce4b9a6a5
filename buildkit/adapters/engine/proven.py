"""Images this machine has already proven: their probe reports and byte counts, by content id.

A content id (engine.ImageFacts.content_id) digests an image's layers and run configuration without the
build's date and revision, so a rebuild whose build cache handed every layer back has the content id of the
image that was tested before (its image id is new: the date label changed): proving it again (a smoke test
with torch.compile, reading 6 GB back for its efficiency) would spend a minute or more to learn nothing. `build` and `publish` reuse what is recorded
here; `--retest` proves the image again. A report is kept, not a verdict: the judgment is pure and cheap,
so it is made again each time and follows buildkit's current rules. A report counts only for the same
probe (its source), GPU mode, platform and, where kernels ran, the same GPUs and driver.

The records live in $BUILDKIT_CACHE_DIR (default: $XDG_CACHE_HOME/buildkit, else ~/.cache/buildkit)/proven.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildkit.adapters.files.inputs import NotReadable, read_regular

if TYPE_CHECKING:
    from buildkit.core.host.facts import HostFacts

CACHE_ENV = "BUILDKIT_CACHE_DIR"
MAX_RECORD_BYTES = 16 * 1024 * 1024  # a probe report is kilobytes


def cache_dir() -> Path:
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "buildkit"


class ProvenImages:
    def __init__(self, folder: Path | None = None) -> None:
        self.folder = (folder or cache_dir()) / "proven"

    @staticmethod
    def probe_key(content_id: str, probe: str, mode: str, platform: str, host: HostFacts | None) -> str:
        """What a probe report depends on beyond the image: the probe, the GPU mode and platform, and the
        GPUs and drivers it ran on (None: it ran no kernels)."""
        gpus = "no kernels" if host is None else repr((host.gpus, host.nvidia_driver, host.amdgpu_driver))
        text = "\n".join((content_id, hashlib.sha256(probe.encode()).hexdigest(), mode, platform, gpus))
        return "probe-" + hashlib.sha256(text.encode()).hexdigest()

    @staticmethod
    def bytes_key(content_id: str) -> str:
        return "bytes-" + hashlib.sha256(content_id.encode()).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            value = json.loads(read_regular(self.folder / f"{key}.json", MAX_RECORD_BYTES))
        except (NotReadable, ValueError, RecursionError):
            return None  # never recorded, or a record we cannot read (a FIFO, garbage): prove the image again
        return value if isinstance(value, dict) else None

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Written to a temporary file and renamed: parallel builds never read half a record."""
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.folder, prefix=".tmp-")
            with os.fdopen(handle, "w", encoding="utf-8") as out:
                json.dump(value, out)
            os.replace(temporary, self.folder / f"{key}.json")
        except OSError:
            pass  # a cache that cannot be written costs the next build a retest, nothing more
