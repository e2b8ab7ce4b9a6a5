"""A no-op nightly over the whole default matrix: every target is already published, so publishing is
pure decision-making (goal: under 2 s, zero builds).

Run: python -m bench.noop_nightly   (needs Debian's docker-registry).
The registry is seeded with one tiny image per target (a config carrying that target's labels and
fingerprint, one empty layer) pushed straight through the registry API.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from buildkit.adapters.registry.client import DOCKER_MANIFEST
from buildkit.app.targets import Choices, select_targets
from testkit.registry import RegistryProcess, Seeder
from testkit.runner import run_buildkit


def seed(address: str, registry_override: str) -> int:
    seeder = Seeder(address)
    planned = select_targets(Choices(registry=registry_override)).plan()
    layer = io.BytesIO()
    with gzip.GzipFile(fileobj=layer, mode="wb", mtime=0) as archive, tarfile.open(fileobj=archive, mode="w"):
        pass
    for item in planned:
        target = item.target
        config = json.dumps(
            {"architecture": "amd64", "os": "linux", "config": {"Labels": dict(item.labels)}, "rootfs": {"type": "layers", "diff_ids": []}}
        ).encode()
        config_digest = seeder.blob(target.repository, config)
        layer_digest = seeder.blob(target.repository, layer.getvalue())
        manifest = {
            "schemaVersion": 2,
            "mediaType": DOCKER_MANIFEST,
            "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": len(config), "digest": config_digest},
            "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": len(layer.getvalue()), "digest": layer_digest}],
        }
        for name in target.tag_names:
            seeder.manifest(target.repository, name, DOCKER_MANIFEST, manifest)
    return len(planned)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()  # --help
    with tempfile.TemporaryDirectory() as tmp:
        registry = RegistryProcess(Path(tmp) / "registry").start()
        try:
            targets = seed(registry.address, registry.address)
            runs = {}
            for name, extra in (("dry_run", ["--dry-run"]), ("nightly", ["--nightly", "--gpu", "skip"])):
                started = time.perf_counter()
                result = run_buildkit("publish", "--registry", registry.address, "--out", Path(tmp) / name, *extra)
                elapsed = time.perf_counter() - started
                report = json.loads((Path(tmp) / name / "publish.json").read_text())
                if result.returncode != 0:
                    sys.exit(result.stderr[-2000:])
                runs[name] = {
                    "wall_s": round(elapsed, 2),
                    "in_publish_s": report["seconds"],
                    "registry_requests": report["registry_requests"],
                    "totals": report["totals"],
                }
        finally:
            registry.stop()
    print(json.dumps({"benchmark": "no-op nightly, default matrix", "targets": targets, **runs}, indent=2))


if __name__ == "__main__":
    main()
