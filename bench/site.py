"""The nightly's page at scale: `buildkit report --html` for the default matrix (132 targets; goals: under 500 KB in
all, generated in under 2 s) and for 10,000 targets (it still generates, no page over 2 MB).

Run: python -m bench.site [--repeat 3]

Each figure is one `buildkit report --html` process (its start included, as a user waits for it), best of --repeat
runs, writing into a folder of its own, and the bytes of the site it wrote (every file: pages, stylesheet, script),
as files and as a static host that compresses them (GitHub Pages does) sends them (gzip level 6, file by file).
The default matrix's site is made from:
- the matrix alone (no document);
- the nightly's reports: a publish report of every target (digest, size, floating tags) and, per image,
  `buildkit verify --json` (signature, provenance, SBOM and signed GPU test facts, its 6 registry layers), as the
  nightly's page job gathers them;
- those and every image's SBOM (PACKAGES_DEB Debian packages and PACKAGES_PYTHON Python distributions each).
The documents are TEST DOUBLES written by the commands' own writers (testkit.site_documents). The 10,000 targets
are bench.plan_render's matrix (50 releases of 200 targets, ten team flavors) with no document.
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
from buildkit.core.supply_chain.sbom import Package
from testkit import site_documents as documents

# Package counts of a runtime image: the test pair's CUDA image here (python:3.11-slim-bookworm stand-in with g++:
# `buildkit sbom --local`) lists 110 Debian packages; a CUDA 13.0 torch install about 35 distributions.
PACKAGES_DEB = 110
PACKAGES_PYTHON = 35


def _documents(folder: Path, with_sboms: bool) -> Path:
    items = select_targets(Choices()).plan()
    folder.mkdir(parents=True)
    (folder / "publish.json").write_text(json.dumps(documents.publish_report([item.target for item in items])))
    for item in items:
        (folder / f"{item.target.id}.verify.json").write_text(json.dumps(documents.verification(item)))
        if with_sboms:
            sbom = documents.sbom(item)
            sbom["components"] += [
                {"type": "library", "name": package.name, "version": package.version, "purl": package.purl, "bom-ref": package.purl}
                for package in (*(Package("deb", f"libbench{n}", "1.2.3-4", f"pkg:deb/debian/libbench{n}@1.2.3-4?arch=amd64")
                                  for n in range(PACKAGES_DEB - 4)),
                                *(Package("pypi", f"bench-dist-{n}", "1.2.3", f"pkg:pypi/bench-dist-{n}@1.2.3") for n in range(PACKAGES_PYTHON - 5)))
            ]
            (folder / f"{item.target.id}.sbom.json").write_text(json.dumps(sbom))
    return folder


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
    files = [path for path in folder.rglob("*") if path.is_file() and not path.name.startswith(".")]
    largest = max(files, key=lambda path: path.stat().st_size)
    return {"best_s": round(min(timings), 2), "runs_s": [round(t, 2) for t in timings], "files": len(files),
            "bytes": sum(path.stat().st_size for path in files),
            "gzip_bytes": sum(len(gzip.compress(path.read_bytes(), 6)) for path in files), "largest_page": str(largest.relative_to(folder)),
            "largest_bytes": largest.stat().st_size}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    steal = steal_seconds()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        reports = _documents(folder / "reports", with_sboms=False)
        sboms = _documents(folder / "sboms", with_sboms=True)
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
