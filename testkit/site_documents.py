"""TEST DOUBLES of a run's documents for `buildkit report --html`, made from planned targets without an engine:
build and publish reports, `buildkit verify --json` and CycloneDX SBOMs, each written by the function the real
command writes it with (ui.report.run_json, ui.report.publish_json, ui.views.verification_json,
adapters.sbom.cyclonedx), so the site reads exactly what those commands write. Only the facts are made up:
image sizes, layer digests and package versions follow what a real nightly's images show (twins share the OS
layer, the CUDA libraries are layers of their own for every Python, torch is a layer per Python). `nightly`
writes a whole night's folder of them, as bench.site measures the nightly's site and its size test reads it.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from buildkit.adapters.supply_chain.sbom import cyclonedx
from buildkit.app.build import BuildRun, BuildStatus, TargetResult
from buildkit.app.publish import PublishRun, TargetOutcome
from buildkit.app.verify import Fact, Verification
from buildkit.core.labels import CREATED, ImageIdentity
from buildkit.core.release.decisions import Outcome
from buildkit.core.release.judge import Check, Verdict
from buildkit.core.release.layer_sharing import BuiltLayer
from buildkit.core.supply_chain.sbom import Contents, Package
from buildkit.ui.report import publish_json, run_json
from buildkit.ui.views import verification_json

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence
    from pathlib import Path

    from buildkit.core.render.planned import PlannedImage
    from buildkit.core.targets.plan import Target

MB = 1_000_000
# Package counts of a nightly's runtime image: the test pair's CUDA image (python:3.11-slim-bookworm with g++:
# `buildkit sbom --local`) lists 110 Debian packages; a CUDA 13.0 torch install about 35 distributions.
NIGHTLY_DEB = 110
NIGHTLY_PYTHON = 35


def digest(*parts: str) -> str:
    return "sha256:" + hashlib.sha256("/".join(parts).encode()).hexdigest()


def image_layers(target: Target, day: str = "1") -> tuple[BuiltLayer, ...]:
    """The layers of a nightly's image, from the bottom: libraries the same for every Python, the OS layer the
    twins share, torch for its Python (`day` changes torch's layer, as a nightly rebuilding torch does)."""
    backend = f"{target.backend}{target.backend_version}{target.family}"
    libraries = (
        (("nvidia-cudnn-cu13", 970), ("nvidia-cublas-cu13", 600), ("nvidia-libraries", 880))
        if target.vendor == "nvidia"
        else (("rocm-sdk-core", 1900), ("rocm-sdk-libraries", 2600))
    )
    layers = [BuiltLayer(digest(backend, name), size * MB, name) for name, size in libraries]
    layers.append(BuiltLayer(digest("os", target.python, target.flavor), 603 * MB, "os"))
    layers.append(BuiltLayer(digest(backend, target.python, target.torch, "torch", day), 1250 * MB, "torch"))
    layers.append(BuiltLayer(digest(target.id, "image", day), 4 * MB, "RUN python -m buildkit_guard"))
    return tuple(layers)


def _smoke(target: Target, passed: bool, kernels: str) -> Verdict:
    return Verdict(
        target.tags[0],
        passed,
        (Check("backend", passed, "torch.version.hip" if target.vendor == "amd" else "torch.version.cuda"),),
        kernels,
        f"{target.torch}+{target.backend}",
    )


def build_report(targets: Iterable[Target], failed: Sequence[str] = (), day: str = "1") -> dict[str, Any]:
    """`buildkit build`'s report.json for the targets (those in `failed` failed their build), each built image
    with its layers and a smoke test without kernels (no GPU on the build host)."""
    results = []
    for target in targets:
        if target.id in failed:
            results.append(
                TargetResult(
                    target.id,
                    target.vendor,
                    target.pair,
                    [target.tags[0]],
                    status=BuildStatus.FAILED,
                    error=f"pip could not install torch=={target.torch}",
                    log_tail=["ERROR: no matching distribution"],
                )
            )
            continue
        layers = image_layers(target, day)
        vendor = "NVIDIA" if target.vendor == "nvidia" else "AMD"
        results.append(
            TargetResult(
                target.id,
                target.vendor,
                target.pair,
                list(target.tags),
                status=BuildStatus.BUILT,
                image_id=digest("id", target.id, day),
                size=sum(layer.size for layer in layers),
                seconds=100.0,
                layers=[layer.digest for layer in layers],
                history=[
                    (f"COPY --link /layers/{layer.name}/ / # buildkit: layer" if layer.name != "os" else "COPY --from=shared / /", layer.size)
                    for layer in layers
                ],
                smoke=_smoke(target, True, f"skipped (no {vendor} GPU on this host)"),
                digest=digest("manifest", target.id, day),
                compression="zstd",
            )
        )
    return run_json(BuildRun(results, []), "docker (test double)")


def publish_report(targets: Iterable[Target], failed: Sequence[str] = (), day: str = "1") -> dict[str, Any]:
    """`buildkit publish`'s publish.json: every target published (or failed), its floating tags moved."""
    outcomes = [
        TargetOutcome(
            target.id,
            target.pair,
            Outcome.FAILED if target.id in failed else Outcome.PUBLISHED,
            digest="" if target.id in failed else digest("manifest", target.id, day),
            size=None if target.id in failed else sum(layer.size for layer in image_layers(target, day)),
            tags=[] if target.id in failed else list(target.tags),
            error="smoke test failed" if target.id in failed else "",
        )
        for target in targets
    ]
    return publish_json(PublishRun(outcomes, {}))


def verification(item: PlannedImage, signed: bool = True, day: str = "1", created: str = "2026-12-05T03:40:00Z") -> dict[str, Any]:
    """`buildkit verify IMAGE --json` of a published image with a signed, passing GPU test of its vendor."""
    target = item.target
    identity = ImageIdentity.read(item.labels)
    gpu = ("H100 SXM5 80GB", "sm_90") if target.vendor == "nvidia" else ("AMD Instinct MI300X", "gfx942")
    predicate = {
        "verdict": {"passed": True},
        "devices": [{"name": gpu[0], "arch": gpu[1], "kernels": [{"name": "matmul", "passed": True}]}],
        "host": {"runner": "gpu-runner-1", "driver": "nvidia 580.95.05" if target.vendor == "nvidia" else "amdgpu 6.12.12"},
        "torch": {"version": f"{target.torch}+test", target.vendor_record.torch_version_field: target.backend_version},
        "tested_at": created,
    }
    facts = (
        Fact("signature", True, "verified with cosign.pub"),
        Fact("provenance", True, "built by BuildKit; fingerprint " + item.fingerprint[:12]),
        Fact("sbom", True, "CycloneDX 1.5, 140 components (100 deb, 40 pypi)"),
        Fact("gpu test", True, f"passed on an {target.vendor} GPU (1 run(s))"),
    )
    pinned = f"{target.image_name}@{digest('manifest', target.id, day)}"
    return verification_json(Verification(pinned, identity, facts, (predicate,), None, verified=signed, created=created, layers=image_layers(target, day)))


def packages(target: Target, day: str = "1") -> tuple[Package, ...]:
    """A runtime image's packages: Debian's of its base, and the Python distributions of its torch install."""
    debs = [
        Package("deb", name, version, f"pkg:deb/debian/{name}@{version}?arch=amd64")
        for name, version in (("libc6", "2.36-9+deb12u10"), ("libnuma1", "2.0.16-1"), ("g++-12", "12.2.0-14"), ("python3.12", "3.12.8-1"))
    ]
    vendor = ("nvidia-cudnn-cu13", "9.26.0.51") if target.vendor == "nvidia" else ("rocm-sdk-core", f"{target.backend_version}.0")
    torch = f"{target.torch}+{target.vendor_record.index_tag(target.backend_version)}"
    python = [("torch", torch), ("numpy", "2.3.5" if day == "1" else "2.4.0"), ("filelock", "3.20.0"), vendor, *([("pillow", "12.0.0")] if day == "1" else [])]
    return (*debs, *(Package("pypi", name, version, f"pkg:pypi/{name}@{version}") for name, version in python))


def sbom(item: PlannedImage, day: str = "1", created: str = "2026-12-05T03:40:00Z") -> dict[str, Any]:
    """`buildkit sbom IMAGE` of the image: its packages, its labels (the target's among them) as properties."""
    target = item.target
    contents = Contents("debian", "12", "Debian GNU/Linux 12 (bookworm)", target.python, packages(target, day))
    return cyclonedx(contents, target.image_name, digest("manifest", target.id, day), {**item.labels, CREATED: created})


def nightly(folder: Path, items: Sequence[PlannedImage], with_sboms: bool = True) -> Path:
    """The documents the nightly's page job gathers into `folder`: a publish report of every target, and per image
    its `verify --json` and (`with_sboms`) its SBOM, padded to a real image's package counts (NIGHTLY_DEB Debian
    packages, NIGHTLY_PYTHON Python distributions) with packages every image has alike."""
    folder.mkdir(parents=True)
    (folder / "publish.json").write_text(json.dumps(publish_report([item.target for item in items])))
    for item in items:
        (folder / f"{item.target.id}.verify.json").write_text(json.dumps(verification(item)))
        if with_sboms:
            document = sbom(item)
            padding = (
                *(Package("deb", f"libbench{n}", "1.2.3-4", f"pkg:deb/debian/libbench{n}@1.2.3-4?arch=amd64") for n in range(NIGHTLY_DEB - 4)),
                *(Package("pypi", f"bench-dist-{n}", "1.2.3", f"pkg:pypi/bench-dist-{n}@1.2.3") for n in range(NIGHTLY_PYTHON - 5)),
            )
            document["components"] += [
                {"type": "library", "name": package.name, "version": package.version, "purl": package.purl, "bom-ref": package.purl} for package in padding
            ]
            (folder / f"{item.target.id}.sbom.json").write_text(json.dumps(document))
    return folder
