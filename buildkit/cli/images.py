"""`buildkit test | parity | verify | sbom`: smoke-test images, compare twins, check a published image's supply
chain, print its SBOM."""

from __future__ import annotations

from pathlib import Path

from buildkit.app import GPU_MODES
from buildkit.app.targets import Choices
from buildkit.cli.options import (
    EXIT_FAILED,
    EXIT_OK,
    GPU_HELP,
    Commands,
    Invocation,
    Renamed,
    add_matrix,
    add_selection,
    add_supply_chain_options,
    command,
    matrix_path,
    positive,
    selection,
)
from buildkit.ui import views


def add_test(commands: Commands) -> None:
    test = command(commands, "test", run_test, help="smoke-test images: backend build check and, with a GPU, real kernels")
    test.add_argument("images", nargs="*", metavar="IMAGE", help="image references (default: the selected targets' images)")
    add_selection(test)
    test.add_argument("--gpu", choices=GPU_MODES, default=GPU_MODES[0], help=GPU_HELP)
    test.add_argument("--json", type=Path, help="write the verdicts and probe reports as JSON")
    test.add_argument("--timeout", type=positive, default=600, help="seconds the probe may run per image (default 600)")


def add_parity(commands: Commands) -> None:
    parity = command(commands, "parity", run_parity, help="compare a pair's CUDA and ROCm twins: OS, Python, packages")
    parity.add_argument("subjects", nargs="+", metavar="PAIR | IMAGE IMAGE", help="a pair key from the matrix, or two images")
    add_matrix(parity)
    parity.add_argument("--json", type=Path, help="write the differences as JSON")


def add_verify(commands: Commands) -> None:
    verify = command(commands, "verify", run_verify, help="check a published image: signature, provenance, SBOM and a signed passing GPU test")
    verify.add_argument("image", help="REGISTRY/REPOSITORY:TAG or @sha256:DIGEST")
    add_supply_chain_options(verify)
    verify.add_argument("--tested-arch", metavar="ARCH", help="also require that the GPU test ran on this arch (gfx942, sm_90 or 9.0)")
    verify.add_argument(
        "--gpu-arch",
        action=Renamed,
        renamed_to="--tested-arch",
        dest="renamed_gpu_arch",
        why="build's --gpu-arch narrows what an image compiles for; verify's names the arch a GPU test ran on",
    )
    verify.add_argument("--json", action="store_true", help="print JSON instead of lines")


def add_sbom(commands: Commands) -> None:
    sbom = command(commands, "sbom", run_sbom, help="print an image's CycloneDX SBOM: its registry attestation, or generated from a local image")
    sbom.add_argument("image", help="a registry reference (reads its attestation) or an image in the engine")
    add_supply_chain_options(sbom)
    sbom.add_argument("--local", action="store_true", help="generate it from the image in the engine, even for a registry reference")
    sbom.add_argument("--out", type=Path, help="write it to this file instead of standard output")


def run_test(call: Invocation) -> int:
    from buildkit.app.smoke import test_images
    from buildkit.ui.report import verdicts_json

    args = call.args
    verdicts = test_images(selection(call), list(args.images), args.gpu, args.timeout, lambda line: views.say(call.err, line))
    call.out.print(views.verdict_table(verdicts, args.gpu))
    if args.json:
        views.write_json(args.json, verdicts_json(verdicts), "--json")
    return EXIT_OK if all(v.passed for v in verdicts) else EXIT_FAILED


def run_parity(call: Invocation) -> int:
    from buildkit.app.smoke import parity

    result = parity(Choices(matrix=matrix_path(call)), list(call.args.subjects))
    if call.args.json:
        views.write_json(call.args.json, views.parity_json(result), "--json")
    for line in views.parity_lines(result):
        views.say(call.out, line)
    return EXIT_OK if result.parity.passed else EXIT_FAILED


def run_verify(call: Invocation) -> int:
    from buildkit.app.verify import RegistryAccess, trust_of, verify_image

    args = call.args
    trust = trust_of(args.key, args.certificate_identity, args.certificate_oidc_issuer, args.tlog)
    verification = verify_image(args.image, trust, args.tested_arch, RegistryAccess(args.registry_auth_file, args.insecure_registry))
    if args.json:
        views.print_json(views.verification_json(verification))
    else:
        for line in views.verification_lines(verification):
            views.say(call.out, line)
    return EXIT_OK if verification.passed else EXIT_FAILED


def run_sbom(call: Invocation) -> int:
    from buildkit.app.verify import RegistryAccess, image_sbom, trust_of

    args = call.args
    trust = trust_of(args.key, args.certificate_identity, args.certificate_oidc_issuer, args.tlog, required=False)
    result = image_sbom(args.image, trust, args.local, RegistryAccess(args.registry_auth_file, args.insecure_registry))
    if args.out:
        views.write_json(args.out, result.document, "--out")
    else:
        views.print_json(result.document)
    views.say(call.err, f"sbom: {result.source}")
    for note in result.notes:
        views.say(call.err, f"note: {note}")
    return EXIT_OK
