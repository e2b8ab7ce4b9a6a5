"""The nightly's page at scale: `buildkit report --html` for the default matrix (132 targets; goals: under 500 KB in
all, generated in under 2 s) and for 10,000 targets (it still generates, no page over 2 MB).

Run: python -m bench.site [--repeat 3]

Each figure is one `buildkit report --html` process (its start included, as a user waits for it), best of --repeat
runs, writing into a folder of its own, and the bytes of the site it wrote (every file: pages, stylesheet, script
and the manifest `.buildkit-site.json`, as the nightly uploads the folder), as files and as a static host that
compresses them (GitHub Pages does) sends them (gzip level 6, file by file).
The default matrix's site is made from:
- the matrix alone (no document);
- the nightly's reports: a publish report of every target (digest, size, floating tags) and, per image,
  `buildkit verify --json` (signature, provenance, SBOM and signed GPU test facts, its 6 registry layers), as the
  nightly's page job gathers them;
- those and every image's SBOM (NIGHTLY_DEB Debian packages and NIGHTLY_PYTHON Python distributions each): the
  site the nightly publishes.
The documents are TEST DOUBLES written by the commands' own writers (testkit.site_documents.nightly, which the
unit test of the site's size reads too). The 10,000 targets are bench.plan_render's matrix (50 releases of 200
targets, ten team flavors) with no document. Each site's bytes are also given by kind of page: the index, the
rows' pages (images/), the matrix's pages (matrix/), and the package lists and Kubernetes placements images
refer to.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.plan_render import reference_loop, steal_seconds, write_matrix
from buildkit.app.targets import Choices, select_targets
from testkit import site_documents as documents


def _kind(path: Path) -> str:
    """index.html, images/, matrix/, packages/, kubernetes.html, site.css, chooser.js"""
    return f"{path.parts[0]}/" if len(path.parts) > 1 else path.name


def _site(out: Path, *arguments: str, repeat: int) -> dict:
    """Best wall time of `buildkit report --html OUT ARGUMENTS` over `repeat` fresh folders, and the site's sizes."""
    timings = []
    for run in range(repeat):
        folder = out / f"run{run}"
        start = time.perf_counter()
        result = subprocess.run([sys.executable, "-m", "buildkit", "report", "--html", str(folder), *arguments], capture_output=True, text=True)
        timings.append(time.perf_counter() - start)
        if result.returncode:
            sys.exit(result.stderr)
    files = [path for path in folder.rglob("*") if path.is_file()]  # as the nightly uploads the folder: its manifest too
    largest = max((path for path in files if path.suffix == ".html"), key=lambda path: path.stat().st_size)
    kinds: dict[str, int] = {}
    for path in files:
        kinds[_kind(path.relative_to(folder))] = kinds.get(_kind(path.relative_to(folder)), 0) + path.stat().st_size
    return {
        "best_s": round(min(timings), 2),
        "runs_s": [round(t, 2) for t in timings],
        "files": len(files),
        "bytes": sum(path.stat().st_size for path in files),
        "gzip_bytes": sum(len(gzip.compress(path.read_bytes(), 6)) for path in files),
        "largest_page": str(largest.relative_to(folder)),
        "largest_bytes": largest.stat().st_size,
        "bytes_by_kind": dict(sorted(kinds.items(), key=lambda kind: -kind[1])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    steal = steal_seconds()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        items = select_targets(Choices()).plan()
        reports = documents.nightly(folder / "reports", items, with_sboms=False)
        sboms = documents.nightly(folder / "sboms", items)
        ten = write_matrix(folder / "10k", 10_000)
        figures = {
            "reference_loop_s": reference_loop(),
            "default matrix, no document": _site(folder / "a", "--matrix", str(Path("matrix.toml").resolve()), repeat=args.repeat),
            "default matrix, the nightly's reports": _site(folder / "b", "--from", str(reports), repeat=args.repeat),
            "default matrix, reports and SBOMs": _site(folder / "c", "--from", str(sboms), repeat=args.repeat),
            "10,000 targets, no document": _site(folder / "d", "--matrix", str(ten), repeat=1),
        }
    if steal is not None:
        figures["steal_s"] = round((steal_seconds() or 0) - steal, 1)
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
