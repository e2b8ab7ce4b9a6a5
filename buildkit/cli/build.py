"""`buildkit build | publish | lock`: build, smoke-test and tag; publish what changed; pin bases and packages."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from buildkit.app import CHANNELS
from buildkit.cli.options import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    MATRIX_HELP,
    Commands,
    Invocation,
    add_build_options,
    add_matrix,
    add_registry_access,
    add_selection,
    build_settings,
    command,
    display,
    matrix_path,
    positive,
    selection,
)
from buildkit.errors import Problem, UserError
from buildkit.ui import views

if TYPE_CHECKING:
    from buildkit.app.targets import Choices


def add_build(commands: Commands) -> None:
    build = command(commands, "build", run_build, help="build, smoke-test, tag and report the selected targets on BuildKit")
    add_selection(build, source=True)
    add_build_options(build)
    build.add_argument("--report", type=Path, help="JSON report path (default: OUT/report.json; Markdown next to it)")
    build.add_argument("--registry-cache", action="store_true", help="read and write the registry build cache (REPOSITORY/buildcache), as publish does")
    build.add_argument(
        "--dry-run", action="store_true", help="say what would be built (targets, tags, platforms, fingerprints, cache), offline: no engine, no registry"
    )
    build.add_argument("--format", choices=views.DRY_RUN_FORMATS, help="with --dry-run: table (default) or json")


def add_lock(commands: Commands) -> None:
    lock = command(commands, "lock", run_lock, help="pin the matrix's base images (digests) and package ranges (versions) in matrix.lock")
    add_matrix(lock, help=f"{MATRIX_HELP}; matrix.lock goes beside it")
    lock.add_argument("--package-index", metavar="URL", help="simple index to resolve package ranges on (default: the one pip install uses here)")
    lock.add_argument("--insecure-registry", action="store_true", help="talk plain HTTP to the base images' registries")


def add_publish(commands: Commands) -> None:
    publish = command(commands, "publish", run_publish, help="nightly publishing: skip unchanged, build, test, push, move tags")
    add_selection(publish)
    add_build_options(publish)
    publish.add_argument("--registry", help="registry to publish to (default: the matrix's)")
    add_registry_access(publish)
    publish.add_argument("--channel", choices=CHANNELS, help="wheel channel for every stack (nightly: PyTorch's nightly wheels, --pre)")
    publish.add_argument("--nightly", action="store_true", help="add today's -nightly-YYYYMMDD tag and move the -nightly tags")
    publish.add_argument("--date", help="the nightly's date, YYYYMMDD (default: today, UTC)")
    publish.add_argument("--keep", type=positive, help="keep the newest N nightly date tags per target, delete older ones this tool created")
    publish.add_argument("--dry-run", action="store_true", help="say what would be built and skipped; build and push nothing")
    publish.add_argument("--no-registry-cache", dest="registry_cache", action="store_false", help="do not read or write the registry build cache")
    publish.add_argument(
        "--refresh",
        action="store_true",
        help="resolve base images and package ranges again first (buildkit lock): an updated base rebuilds "
        "exactly the images built on it (what the nightly runs)",
    )
    publish.add_argument("--package-index", metavar="URL", help="with --refresh: simple index for package ranges (default: the one pip install uses here)")
    publish.add_argument(
        "--require-published",
        action="store_true",
        help="build nothing: move tags only for images already published with this fingerprint (and, with "
        "the GPU gate, a passing GPU test); fail for any that is not (the nightly's tag job)",
    )
    publish.add_argument(
        "--gpu-gate",
        choices=("on", "off"),
        default="on",
        help="on (default): floating tags move only for images with a passing GPU test of their vendor, "
        "run here or attested and signed; off: without one (CPU-only publishing)",
    )
    publish.add_argument(
        "--sign",
        metavar="KEY",
        help="sign each pushed digest and attach its SBOM and GPU test, signed with this cosign key (file or KMS URI; password in $COSIGN_PASSWORD)",
    )
    publish.add_argument("--keyless", action="store_true", help="sign keyless (the CI job's OIDC identity, e.g. GitHub Actions)")
    publish.add_argument("--verify-key", metavar="PUB", help="public key whose GPU test attestations count (images not tested in this run)")
    publish.add_argument("--certificate-identity", help="keyless signer whose GPU test attestations count")
    publish.add_argument("--certificate-oidc-issuer", help="the OIDC issuer of --certificate-identity")
    publish.add_argument("--no-provenance", dest="provenance", action="store_false", help="push without BuildKit's SLSA provenance attestation")
    publish.add_argument("--report", type=Path, help="JSON report path (default: OUT/publish.json; Markdown next to it)")


def run_build(call: Invocation) -> int:
    args = call.args
    choices = selection(call, source=True, platforms=tuple(args.platform), compression=args.compression)
    if args.dry_run:
        return _dry_run(call, choices)
    if args.format:
        raise UserError(Problem("--format", "chooses the output of --dry-run; add --dry-run, or leave --format out"))
    from buildkit.app.build import build_selection
    from buildkit.ui.report import run_markdown, write_reports

    options, settings = build_settings(call, source_context=args.pytorch_src)
    shown = display(call.err)
    with shown:
        run, engine_description = build_selection(choices, options, settings, args.docker, shown)
    report = args.report or args.out / "report.json"
    markdown = write_reports(run, engine_description, report)
    views.say(call.out, run_markdown(run))
    views.say(call.err, f"report: {report} and {markdown}")
    if run.engine_lost:
        views.say(call.err, "error: the Docker engine stopped during the build; restart it and run the build again")
    if run.interrupted:
        views.say(call.err, "interrupted: running builds were stopped")
        return EXIT_INTERRUPTED
    return EXIT_FAILED if run.failed else EXIT_OK


def _dry_run(call: Invocation, choices: Choices) -> int:
    from buildkit.app.build import preview_build

    preview = preview_build(choices, call.args.registry_cache)
    if call.args.format == "json":
        views.write_json_array(sys.stdout, map(views.planned_build_json, preview.builds))
        return EXIT_OK
    call.out.print(views.planned_build_table(preview.builds))
    views.notes(call.err, preview.notes)
    views.say(call.err, "dry run: nothing was built, and no engine or registry was asked")
    return EXIT_OK


def run_lock(call: Invocation) -> int:
    from buildkit.app.lock import lock_matrix

    report = lock_matrix(matrix_path(call), call.args.package_index, call.args.insecure_registry)
    views.say(call.out, f"wrote {report.path}: {len(report.lock.bases)} base images, {len(report.lock.packages)} package ranges")
    for reference in report.changed_bases:
        views.say(call.out, f"  moved: {reference} -> {report.lock.bases[reference]}")
    for requirement in report.changed_packages:
        views.say(call.out, f"  moved: {requirement} -> {report.lock.packages[requirement]}")
    return EXIT_OK


def run_publish(call: Invocation) -> int:
    from buildkit.app.publish import PublishOptions, publish_selection
    from buildkit.app.verify import signer_of, trust_of
    from buildkit.ui.report import write_publish_reports

    args = call.args
    choices = selection(call, platforms=tuple(args.platform), compression=args.compression, registry=args.registry, channel=args.channel)
    options, settings = build_settings(call)
    publish_options = PublishOptions(
        nightly=args.nightly,
        date=args.date or "",
        keep=args.keep,
        dry_run=args.dry_run,
        require_published=args.require_published,
        refresh=args.refresh,
        package_index=args.package_index,
        provenance=args.provenance,
        gpu_gate=args.gpu_gate == "on",
        signer=signer_of(args.sign, args.keyless),
        trust=trust_of(args.verify_key, args.certificate_identity, args.certificate_oidc_issuer, required=False),
    )
    shown = display(call.err)
    with shown:
        run = publish_selection(choices, publish_options, options, settings, args.docker, shown, args.registry_auth_file, args.insecure_registry)
    report = args.report or args.out / "publish.json"
    markdown = write_publish_reports(run, report)
    views.say(call.out, markdown.read_text())
    views.say(call.err, f"report: {report} and {markdown}")
    return EXIT_FAILED if run.failed else EXIT_OK
