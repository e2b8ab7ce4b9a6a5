"""Which zstd level images are compressed with: time and size of each level on the layers that dominate a
real image, torch's own wheel and cuDNN's, unpacked as their layers hold them (a tar of the installed files).

    python -m bench.zstd_levels [LEVEL ...]

It uses this machine's real wheels (found through its pip configuration, as the tests do) and the `zstd` and
`gzip` command-line tools, one thread each, as BuildKit compresses one layer per goroutine. The figures go in
docs/benchmarks.md; buildkit's default level (buildkit/core/release/compression.py, ZSTD_LEVEL) follows them.
"""

from __future__ import annotations

import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path

from testkit.machine_wheels import local_wheels

WHEELS = ("torch-2.14.1-cp311", "nvidia_cudnn_cu13-")


def layer_tar(folder: Path) -> Path:
    """The installed files of the chosen wheels, as one uncompressed layer tar."""
    wheels = [w for w in local_wheels() if w.name.startswith(WHEELS)]
    if len(wheels) != len(WHEELS):
        sys.exit(f"this machine's pip configuration names no {' and '.join(WHEELS)} wheels")
    site = folder / "site"
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(site)
    path = folder / "layer.tar"
    with tarfile.open(path, "w") as tar:
        tar.add(site, arcname="opt/venv/lib/python3.11/site-packages")
    return path


def measure(command: list[str], source: Path) -> tuple[float, int]:
    started = time.perf_counter()
    with open(source, "rb") as data:
        result = subprocess.run(command, stdin=data, stdout=subprocess.PIPE, check=True)
    return time.perf_counter() - started, len(result.stdout)


def main(levels: list[int]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        source = layer_tar(Path(folder))
        size = source.stat().st_size
        print(f"layer: {size / 1e9:.2f} GB uncompressed ({', '.join(WHEELS)})")
        print("| compressor | seconds | compressed | ratio | MB/s |\n|---|---|---|---|---|")
        for name, command in [("gzip -6 (Docker's default)", ["gzip", "-6", "-c"])] + [
            (f"zstd -{level}", ["zstd", f"-{level}", "-T1", "-c", "-q"]) for level in levels
        ]:
            seconds, compressed = measure(command, source)
            print(f"| {name} | {seconds:.1f} | {compressed / 1e9:.3f} GB | {compressed / size:.3f} | {size / 1e6 / seconds:.0f} |")
        for name, command in (("gunzip", ["gzip", "-dc"]), ("unzstd (-3)", ["zstd", "-dc", "-q"])):
            packed = Path(folder) / ("layer.gz" if name == "gunzip" else "layer.zst")
            with open(source, "rb") as data, open(packed, "wb") as out:
                subprocess.run(["gzip", "-6", "-c"] if name == "gunzip" else ["zstd", "-3", "-T1", "-c", "-q"], stdin=data, stdout=out, check=True)
            seconds, _ = measure(command, packed)
            print(f"decompress {name}: {seconds:.1f} s")


if __name__ == "__main__":
    main([int(level) for level in sys.argv[1:]] or [1, 3, 6, 9])
