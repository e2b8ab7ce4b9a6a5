"""The `buildkit` command: parse arguments, make one call into buildkit.app, show the result through buildkit.ui.

No decisions live here: a command handler turns arguments into the app's option records, calls one use
case and prints what it returns. The vocabularies the options offer (vendors, channels, GPU modes, output
formats) are the app's and the ui's, never restated here.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

from buildkit import __version__
from buildkit.app import ALL_VENDORS, CHANNELS, COMPRESSIONS, GPU_MODES, SELECTOR_KEYS, VENDOR_CHOICES
from buildkit.app.render_tree import write_tree
from buildkit.app.targets import (
    Choices,
    SourceOptions,
    find_matrix,
    github_matrix,
    plan_json,
    select_targets,
    target_json,
    validate_selection,
)
from buildkit.errors import Problem, UserError
from buildkit.ui import views
from buildkit.ui.completion import SHELLS

# Commands that reach an engine, a registry or cosign import their use cases when they run: `plan` and
# `matrix validate`, which CI calls on every push, start without loading the docker SDK and requests.
if TYPE_CHECKING:
    from buildkit.app.build import BuildOptions, IndexSettings
    from buildkit.app.routing import HostChoice
    from buildkit.app.targets import PlannedImage

# Exit codes (the README's table): scripts and CI tell these apart.
EXIT_OK = 0
EXIT_FAILED = 1  # the work failed (a build, a smoke test, a check), or the environment did (no engine, no index)
# 2: bad input, one message per problem (UserError.exit_code, and argparse's for a usage error)
EXIT_DIFFERS = 3  # compat check: the data and the index differ (a proposed change, not an outage)
EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT
EXIT_TERMINATED = 143  # 128 + SIGTERM (a CI job cancelled, `timeout`, `docker stop`)
EXIT_READER_GONE = 141  # 128 + SIGPIPE, what a shell reports for a command its reader closed on

GPU_HELP = "auto: run kernels when the host has the image's GPU vendor (default); require: fail without one; skip: never"
MATRIX_HELP = "matrix file (default: $BUILDKIT_MATRIX, else ./matrix.toml, else the matrix shipped with buildkit)"

# --debug belongs to every command, so it is accepted before or after the subcommand; SUPPRESS keeps a
# subcommand's absent flag from overwriting one given before it.
_COMMON = argparse.ArgumentParser(add_help=False)
_COMMON.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show the traceback of an internal error")


class _Renamed(argparse.Action):
    """An option's old spelling: one usage error (exit 2) naming the new one, and hidden from --help."""

    def __init__(self, option_strings: list[str], dest: str, renamed_to: str, why: str, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS, **kwargs)
        self.renamed_to, self.why = renamed_to, why

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values, option_string: str | None = None) -> None:
        parser.error(f"{option_string} is now {self.renamed_to} ({self.why}); write {self.renamed_to} {values or 'ARCH'}")


def _command(commands: argparse._SubParsersAction, name: str, **kwargs) -> argparse.ArgumentParser:
    return commands.add_parser(name, parents=[_COMMON], **kwargs)


def _matrix_option(parser: argparse.ArgumentParser, help: str = MATRIX_HELP) -> None:
    parser.add_argument("--matrix", type=Path, help=help)


def _selection_options(parser: argparse.ArgumentParser, source: bool = False) -> None:
    _matrix_option(parser)
    if source:
        parser.add_argument("--gpu-arch", action="append", default=[], metavar="GFX",
                            help="narrow ROCm targets to these gfx archs (repeatable); the source flavor compiles only these")
        parser.add_argument("--pytorch-src", type=Path, help="source flavor: compile this local PyTorch checkout (sent as the build context)")
        parser.add_argument("--max-jobs", type=_positive, help="source flavor: compile jobs (default: one per 7 GB of the builder's memory)")
    parser.add_argument("--vendor", choices=VENDOR_CHOICES, default=ALL_VENDORS, help=f"{', '.join(VENDOR_CHOICES)} (default)")
    parser.add_argument(
        "--select", action="append", default=[], metavar="KEY=GLOB",
        help=f"keep targets whose KEY ({', '.join(SELECTOR_KEYS)}) matches GLOB; repeatable, all must match",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="buildkit", description="Matched NVIDIA CUDA and AMD ROCm PyTorch images from one TOML matrix.")
    parser.add_argument("--version", action="version", version=f"buildkit {__version__}")
    parser.add_argument("--debug", action="store_true", help="show the traceback of an internal error")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    matrix = _command(commands, "matrix", help="work with matrix files")
    matrix_commands = matrix.add_subparsers(dest="matrix_command", required=True, metavar="SUBCOMMAND")
    validate = _command(matrix_commands, "validate",
                        help="check a matrix and render every template it uses: every problem, or a count of its targets")
    _matrix_option(validate)
    validate.add_argument("--format", choices=views.VALIDATE_FORMATS, default=views.VALIDATE_FORMATS[0],
                          help="text (default), or github: problems as ::error annotations on their file and line")
    show = _command(matrix_commands, "show", help="print the matrix as its `extends` chain resolves it, as TOML")
    _matrix_option(show)
    schema = _command(matrix_commands, "schema", help="print the JSON Schema of matrix files (for editors), or with --markdown the key reference")
    schema.add_argument("--markdown", action="store_true", help="the reference tables of docs/matrix-reference.md instead")

    plan = _command(commands, "plan", help="list the targets a matrix expands to")
    _selection_options(plan, source=True)
    plan.add_argument("--format", choices=views.PLAN_FORMATS, default=views.PLAN_FORMATS[0],
                      help="table (default), json, github (an Actions matrix), or ids (one target id per line)")
    plan.add_argument("--layers", action="store_true",
                      help="with --format json: each target's layers, keyed by what determines their files, and how many "
                           "other selected targets hold each (every target is planned before the first is printed)")

    render = _command(commands, "render", help="write one Dockerfile per target into a folder tree")
    _selection_options(render, source=True)
    render.add_argument("--out", type=Path, default=Path("dist"), help="output folder (default: dist)")

    build = _command(commands, "build", help="build, smoke-test, tag and report the selected targets on BuildKit")
    _selection_options(build, source=True)
    _build_options(build)
    build.add_argument("--report", type=Path, help="JSON report path (default: OUT/report.json; Markdown next to it)")
    build.add_argument("--registry-cache", action="store_true",
                       help="read and write the registry build cache (REPOSITORY/buildcache), as publish does")
    build.add_argument("--dry-run", action="store_true",
                       help="say what would be built (targets, tags, platforms, fingerprints, cache), offline: no engine, no registry")
    build.add_argument("--format", choices=views.DRY_RUN_FORMATS, help="with --dry-run: table (default) or json")

    lock = _command(commands, "lock", help="pin the matrix's base images (digests) and package ranges (versions) in matrix.lock")
    _matrix_option(lock, help=f"{MATRIX_HELP}; matrix.lock goes beside it")
    lock.add_argument("--package-index", metavar="URL",
                      help="simple index to resolve package ranges on (default: the one pip install uses here)")
    lock.add_argument("--insecure-registry", action="store_true", help="talk plain HTTP to the base images' registries")

    bake = _command(commands, "bake", help="export the selection as a docker-bake.json for `docker buildx bake` on any builder")
    _selection_options(bake, source=True)
    bake.add_argument("--out", type=Path, default=Path("bake"), help="output folder: docker-bake.json and the build contexts (default: bake)")
    bake.add_argument("--platform", action="append", default=[], metavar="OS/ARCH", help="platforms to build (repeatable; default linux/amd64)")
    bake.add_argument("--pip-conf", type=Path, help="pip.conf secret: its path becomes the default of ${BUILDKIT_PIP_CONF}")
    bake.add_argument("--ca-bundle", type=Path, help="CA bundle secret: its path becomes the default of ${BUILDKIT_CA_BUNDLE}")
    bake.add_argument("--network", help="network mode for RUN steps, e.g. host")
    bake.add_argument("--registry-cache", action="store_true", help="read and write the registry build cache, as publish does")

    publish = _command(commands, "publish", help="nightly publishing: skip unchanged, build, test, push, move tags")
    _selection_options(publish)
    _build_options(publish)
    publish.add_argument("--registry", help="registry to publish to (default: the matrix's)")
    publish.add_argument("--registry-auth-file", type=Path, help="credentials: a docker config.json or {\"username\", \"password\"}")
    publish.add_argument("--insecure-registry", action="store_true", help="talk plain HTTP to the registry (localhost is plain by default)")
    publish.add_argument("--channel", choices=CHANNELS, help="wheel channel for every stack (nightly: PyTorch's nightly wheels, --pre)")
    publish.add_argument("--nightly", action="store_true", help="add today's -nightly-YYYYMMDD tag and move the -nightly tags")
    publish.add_argument("--date", help="the nightly's date, YYYYMMDD (default: today, UTC)")
    publish.add_argument("--keep", type=_positive, help="keep the newest N nightly date tags per target, delete older ones this tool created")
    publish.add_argument("--dry-run", action="store_true", help="say what would be built and skipped; build and push nothing")
    publish.add_argument("--no-registry-cache", dest="registry_cache", action="store_false",
                         help="do not read or write the registry build cache")
    publish.add_argument("--refresh", action="store_true",
                         help="resolve base images and package ranges again first (buildkit lock): an updated base rebuilds "
                              "exactly the images built on it (what the nightly runs)")
    publish.add_argument("--package-index", metavar="URL",
                         help="with --refresh: simple index for package ranges (default: the one pip install uses here)")
    publish.add_argument("--require-published", action="store_true",
                         help="build nothing: move tags only for images already published with this fingerprint (and, with "
                              "the GPU gate, a passing GPU test); fail for any that is not (the nightly's tag job)")
    publish.add_argument("--gpu-gate", choices=("on", "off"), default="on",
                         help="on (default): floating tags move only for images with a passing GPU test of their vendor, "
                              "run here or attested and signed; off: without one (CPU-only publishing)")
    publish.add_argument("--sign", metavar="KEY", help="sign each pushed digest and attach its SBOM and GPU test, signed with "
                                                       "this cosign key (file or KMS URI; password in $COSIGN_PASSWORD)")
    publish.add_argument("--keyless", action="store_true", help="sign keyless (the CI job's OIDC identity, e.g. GitHub Actions)")
    publish.add_argument("--verify-key", metavar="PUB", help="public key whose GPU test attestations count (images not tested in this run)")
    publish.add_argument("--certificate-identity", help="keyless signer whose GPU test attestations count")
    publish.add_argument("--certificate-oidc-issuer", help="the OIDC issuer of --certificate-identity")
    publish.add_argument("--no-provenance", dest="provenance", action="store_false",
                         help="push without BuildKit's SLSA provenance attestation")
    publish.add_argument("--report", type=Path, help="JSON report path (default: OUT/publish.json; Markdown next to it)")

    test = _command(commands, "test", help="smoke-test images: backend build check and, with a GPU, real kernels")
    test.add_argument("images", nargs="*", metavar="IMAGE", help="image references (default: the selected targets' images)")
    _selection_options(test)
    test.add_argument("--gpu", choices=GPU_MODES, default=GPU_MODES[0], help=GPU_HELP)
    test.add_argument("--json", type=Path, help="write the verdicts and probe reports as JSON")
    test.add_argument("--timeout", type=_positive, default=600, help="seconds the probe may run per image (default 600)")

    parity = _command(commands, "parity", help="compare a pair's CUDA and ROCm twins: OS, Python, packages")
    parity.add_argument("subjects", nargs="+", metavar="PAIR | IMAGE IMAGE", help="a pair key from the matrix, or two images")
    _matrix_option(parity)
    parity.add_argument("--json", type=Path, help="write the differences as JSON")

    detect = _command(commands, "detect", help="this host's GPUs, what they need, and the image that fits")
    _host_options(detect)
    detect.add_argument("--json", action="store_true", help="print JSON instead of a table")

    run = _command(
        commands, "run", help="run the image that fits this host's GPU, with the right flags",
        usage="buildkit run [IMAGE] [options] [-- CMD...]",
    )
    run.add_argument("image", nargs="?", help="image to run (default: the matrix target that fits this host)")
    _host_options(run)
    run.add_argument("--print", action="store_true", help="show the docker run command instead of running it")

    hipify = _command(commands, "hipify", help="preflight a CUDA tree for ROCm: hipify it out of place, report what does not map")
    hipify.add_argument("path", type=Path, help="a CUDA source tree (a PyTorch checkout or your extension)")
    hipify.add_argument("--out", type=Path, help="output folder (default: PATH-hip next to PATH)")
    hipify.add_argument("--compile-check", action="store_true", help="compile the hipified sources with hipcc")
    hipify.add_argument("--offload-arch", help="GPU arch for --compile-check (default: the newest data-center arch the hipcc supports)")
    hipify.add_argument("--toolchain-image", metavar="IMAGE",
                        help="run --compile-check's hipcc in a container of this ROCm toolchain image, not on this machine")
    hipify.add_argument("--include-dir", action="append", default=[], metavar="DIR",
                        help="an include folder of the tree (relative to PATH) for --compile-check; repeatable")
    hipify.add_argument("-D", "--define", action="append", default=[], metavar="NAME[=VALUE]", dest="defines",
                        help="a macro the project's build defines (as setup.py's define_macros), for the findings and --compile-check; repeatable")
    hipify.add_argument("--hipcc-flags", default="", metavar="FLAGS",
                        help="more flags for --compile-check's hipcc, one string split as a shell would: --hipcc-flags='-O3 -DFOO'")
    hipify.add_argument("--cxx-flags", default="", metavar="FLAGS", help="more flags for --compile-check's C++ compiler (one string)")
    hipify.add_argument("--keep-objects", type=Path, metavar="DIR", help="keep --compile-check's objects (and dependency lists) in DIR")
    hipify.add_argument("--json", type=Path, help="write the report as JSON")

    doctor = _command(commands, "doctor", help="explain why GPU acceleration would or would not work here")
    doctor.add_argument("image", nargs="?", help="image to check against this host (labels from the engine or the matrix)")
    _host_options(doctor)
    doctor.add_argument("--json", action="store_true", help="print JSON instead of a table")

    kube = _command(commands, "kube", help="Kubernetes manifests for both twins of a pair: GPU resource, node affinity, non-root user",
                   usage="buildkit kube PAIR [options] [-- CMD...]")
    kube.add_argument("pair", metavar="PAIR", help="a pair key (see `buildkit plan`) or a tag of one of its images")
    _matrix_option(kube)
    kube.add_argument("--gpus", type=_positive, default=1, help="GPUs per pod (default 1)")
    kube.add_argument("--dra", action="store_true", help="claim GPUs through DRA ResourceClaimTemplates (Kubernetes 1.34+) "
                                                         "instead of the device plugins' resources")
    kube.add_argument("--name", default="pytorch", help="prefix of the objects' names (default: pytorch)")
    kube.add_argument("--by-tag", action="store_true", help="name images by tag; do not ask the registry for their digests")
    kube.add_argument("--registry-auth-file", type=Path, help="credentials: a docker config.json or {\"username\", \"password\"}")
    kube.add_argument("--insecure-registry", action="store_true", help="talk plain HTTP to the registry (localhost is plain by default)")
    kube.add_argument("--json", action="store_true", help="print a JSON List instead of YAML documents")

    compat = _command(commands, "compat", help="work with the compatibility data")
    compat_commands = compat.add_subparsers(dest="compat_command", required=True, metavar="SUBCOMMAND")
    compat_check = _command(
        compat_commands, "check",
        help=f"compare the compatibility data with what PyPI and the wheel indexes publish; exit {EXIT_DIFFERS} when they differ, "
             f"{EXIT_FAILED} when an index cannot be read",
    )
    compat_check.add_argument("--index", metavar="URL|none", help="PyTorch's wheel index (default: the data's [wheel_index] url); none leaves it out")
    compat_check.add_argument("--pypi", metavar="URL|none",
                              help="the package index for torch's, torchvision's and torchaudio's releases (default: the one pip uses); none leaves it out")
    compat_check.add_argument("--layout-index", action="append", default=[], metavar="LAYOUT=URL|none",
                              help="the index of a thin-ROCm layout with one of its own (default: the data's, for the layouts in use)")
    compat_check.add_argument("--deep", action="store_true",
                              help="also read the newest releases' GPU libraries for the archs their code carries (downloads them)")
    compat_check.add_argument("--data", type=Path, metavar="PATH", help="compatibility data file (default: the one shipped with buildkit)")
    compat_check.add_argument("--default-matrix", type=Path, metavar="PATH",
                              help="the matrix to keep in step (default: the shipped default matrix, when --data is the shipped data)")
    compat_check.add_argument("--write", action="store_true", help="apply the proposed change to the data file and the matrix (exit 0 once it agrees)")
    compat_check.add_argument("--json", action="store_true", help="print JSON instead of Markdown")

    verify = _command(commands, "verify", help="check a published image: signature, provenance, SBOM and a signed passing GPU test")
    verify.add_argument("image", help="REGISTRY/REPOSITORY:TAG or @sha256:DIGEST")
    _supply_chain_options(verify)
    verify.add_argument("--tested-arch", metavar="ARCH", help="also require that the GPU test ran on this arch (gfx942, sm_90 or 9.0)")
    verify.add_argument("--gpu-arch", action=_Renamed, renamed_to="--tested-arch", dest="renamed_gpu_arch",
                        why="build's --gpu-arch narrows what an image compiles for; verify's names the arch a GPU test ran on")
    verify.add_argument("--json", action="store_true", help="print JSON instead of lines")

    sbom = _command(commands, "sbom", help="print an image's CycloneDX SBOM: its registry attestation, or generated from a local image")
    sbom.add_argument("image", help="a registry reference (reads its attestation) or an image in the engine")
    _supply_chain_options(sbom)
    sbom.add_argument("--local", action="store_true", help="generate it from the image in the engine, even for a registry reference")
    sbom.add_argument("--out", type=Path, help="write it to this file instead of standard output")

    report = _command(commands, "report", help="the nightly's static site: which image fits a GPU, the pair matrix, a page per image")
    _selection_options(report)
    report.add_argument("--html", type=Path, required=True, metavar="OUT", help="the site's folder (index.html, one page per image)")
    report.add_argument("--from", dest="sources", action="append", type=Path, default=[], metavar="PATH",
                        help="a build or publish report, `verify --json` output or an SBOM, or a folder of them (repeatable)")
    report.add_argument("--previous", action="append", type=Path, default=[], metavar="PATH",
                        help="the same of the previous nightly: what changed, and what a node holding it pulls (repeatable)")

    completion = _command(commands, "completion", help="print a shell completion script: eval or source it from your shell's start-up file")
    completion.add_argument("shell", choices=SHELLS, help=", ".join(SHELLS))
    return parser


def _supply_chain_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--key", help="cosign public key file or KMS URI whose signature counts")
    parser.add_argument("--certificate-identity", help="keyless: the identity the signing certificate must name (the CI workflow)")
    parser.add_argument("--certificate-oidc-issuer", help="keyless: its OIDC issuer, e.g. https://token.actions.githubusercontent.com")
    parser.add_argument("--tlog", action="store_true", help="with --key: also require a transparency log entry")
    parser.add_argument("--registry-auth-file", type=Path, help="credentials: a docker config.json or {\"username\", \"password\"}")
    parser.add_argument("--insecure-registry", action="store_true", help="talk plain HTTP to the registry (localhost is plain by default)")


def _host_options(parser: argparse.ArgumentParser) -> None:
    _selection_options(parser)
    parser.add_argument("--python", help="Python version of the image to pick (default: the newest)")
    parser.add_argument("--host-root", type=Path, default=Path("/"), help="read /sys, /proc, /dev, /etc/cdi below this folder (default /)")
    parser.add_argument("--engine", metavar="ENGINE", help="the host's container engine, for --host-root: docker:VERSION (docker:28.2), "
                                                            "podman or podman-rootless (default: ask the local engine; not asked for --host-root)")


def _host_choice(args: argparse.Namespace) -> HostChoice:
    from buildkit.app.routing import HostChoice

    return HostChoice(args.host_root, args.engine, args.python)


def _build_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-j", "--jobs", type=_positive, default=1, help="targets built at once (default 1)")
    parser.add_argument("--no-cache", action="store_true", help="build every step again")
    parser.add_argument("--fail-fast", action="store_true", help="stop all builds at the first failure")
    parser.add_argument("--out", type=Path, default=Path("buildkit-out"), help="logs, build contexts, reports (default: buildkit-out)")
    parser.add_argument("--docker", help="docker CLI to build with (default: $BUILDKIT_DOCKER, else docker on PATH); it needs the buildx plugin")
    parser.add_argument("--builder", help="buildx builder (docker-container, kubernetes, remote driver) or docker context "
                                          "to build on (default: the current one)")
    parser.add_argument("--platform", action="append", default=[], metavar="OS/ARCH",
                        help="build for this platform (repeatable; linux/amd64, linux/arm64): an image index per target, "
                             "for the platforms its wheels exist for (default: linux/amd64)")
    parser.add_argument("--network", help="network mode for RUN steps, e.g. host (needed where pip reaches the network only from the host)")
    parser.add_argument("--pip-conf", type=Path, help="pip.conf for a private index, passed as a BuildKit secret")
    parser.add_argument("--index-url", help="pip index URL (credentials allowed), passed as a BuildKit secret")
    parser.add_argument("--extra-index-url", action="append", default=[], help="extra pip index URL (credentials allowed); repeatable")
    parser.add_argument("--ca-bundle", type=Path, help="CA bundle pip should trust, passed as a BuildKit secret")
    parser.add_argument("--retest", action="store_true",
                        help="smoke-test (and measure) every image again, even one this machine proved before with the same id")
    parser.add_argument("--compression", choices=COMPRESSIONS,
                        help="image layers: zstd (default; pulled by Docker 23 and newer) or gzip, for older engines")
    parser.add_argument("--efficiency", action="store_true",
                        help="also measure each image's layers against its filesystem (reads the image back: about a "
                             "minute for 6 GB here)")
    parser.add_argument("--gpu", choices=GPU_MODES, default=GPU_MODES[0], help=GPU_HELP)


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {value!r}")
    return number


def _split(flags: str, option: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(flags))
    except ValueError as error:
        raise UserError(Problem(option, f"cannot be split into flags ({error}): quote as a shell would")) from None


def _choices(args: argparse.Namespace, **overrides) -> Choices:
    source = SourceOptions(tuple(getattr(args, "gpu_arch", ())), getattr(args, "pytorch_src", None), getattr(args, "max_jobs", None) or 0)
    return Choices(
        matrix=args.matrix, vendor=getattr(args, "vendor", ALL_VENDORS), selectors=tuple(getattr(args, "select", ())),
        source=source, platforms=tuple(getattr(args, "platform", ())), compression=getattr(args, "compression", None), **overrides,
    )


def _build_settings(args: argparse.Namespace) -> tuple[BuildOptions, IndexSettings]:
    from buildkit.app.build import BuildOptions, IndexSettings

    options = BuildOptions(
        out=args.out, jobs=args.jobs, no_cache=args.no_cache, fail_fast=args.fail_fast, network=args.network,
        efficiency=args.efficiency, retest=args.retest, gpu=args.gpu, source_context=getattr(args, "pytorch_src", None),
        builder=args.builder, registry_cache=args.registry_cache,
    )
    return options, IndexSettings(args.pip_conf, args.index_url, tuple(args.extra_index_url), args.ca_bundle)


def _display(err: Console):
    from buildkit.ui.console import LiveDisplay, PlainDisplay

    return LiveDisplay(err) if err.is_terminal else PlainDisplay(err)


def cmd_matrix_validate(args: argparse.Namespace, out: Console, err: Console) -> int:
    try:
        selection = validate_selection(_choices(args))
    except UserError as error:
        if args.format != "github":
            raise
        for line in views.github_annotations(error.problems):
            sys.stdout.write(line + "\n")
        return error.exit_code
    views.notes(err, selection.notes)
    views.say(out, views.validation_summary(selection.targets))
    return EXIT_OK


def cmd_matrix_schema(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.ui.matrix_schema import reference_markdown, schema_text

    sys.stdout.write(reference_markdown() if args.markdown else schema_text())
    return EXIT_OK


def cmd_matrix_show(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app.matrix_show import resolve

    sys.stdout.write(views.matrix_toml(resolve(args.matrix)))
    return EXIT_OK


def _plan_line(planned: PlannedImage) -> str:
    return views.json_line(target_json(planned))


def cmd_plan(args: argparse.Namespace, out: Console, err: Console) -> int:
    if args.layers and args.format != "json":
        raise UserError(Problem("--layers", "adds the layers to --format json's objects; add --format json, or leave --layers out"))
    selection = select_targets(_choices(args))
    if args.format == "json":
        if args.layers:  # each target's layers are named against the whole plan's
            views.write_json_array(sys.stdout, plan_json(selection.iter_plan()))
        else:
            views.write_json_lines(sys.stdout, selection.map_plan(_plan_line))
        return EXIT_OK
    if args.format == "ids":
        sys.stdout.writelines(f"{target.id}\n" for target in selection.targets)
        return EXIT_OK
    planned = selection.plan()
    if args.format == "github":
        views.print_json(github_matrix(planned), compact=True)
    else:
        out.print(views.plan_table(planned))
        views.notes(err, selection.notes)
    return EXIT_OK


def cmd_render(args: argparse.Namespace, out: Console, err: Console) -> int:
    selection = select_targets(_choices(args))
    tree = write_tree(selection.render(), args.out)
    views.notes(err, selection.notes)
    views.say(out, f"rendered {len(tree.folders)} Dockerfiles into {args.out}/ (index: {args.out / 'plan.json'})")
    if tree.removed:
        views.say(out, f"removed {len(tree.removed)} files of an earlier render that the plan no longer lists")
    return EXIT_OK


def cmd_build(args: argparse.Namespace, out: Console, err: Console) -> int:
    if args.dry_run:
        return _build_dry_run(args, out, err)
    if args.format:
        raise UserError(Problem("--format", "chooses the output of --dry-run; add --dry-run, or leave --format out"))
    from buildkit.app.build import build_selection
    from buildkit.ui.report import run_markdown, write_reports

    options, settings = _build_settings(args)
    display = _display(err)
    with display:
        run, engine_description = build_selection(_choices(args), options, settings, args.docker, display)
    report = args.report or args.out / "report.json"
    markdown = write_reports(run, engine_description, report)
    views.say(out, run_markdown(run))
    views.say(err, f"report: {report} and {markdown}")
    if run.engine_lost:
        views.say(err, "error: the Docker engine stopped during the build; restart it and run the build again")
    if run.interrupted:
        views.say(err, "interrupted: running builds were stopped")
        return EXIT_INTERRUPTED
    return EXIT_FAILED if run.failed else EXIT_OK


def _build_dry_run(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app.build import preview_build

    preview = preview_build(_choices(args), args.registry_cache)
    if args.format == "json":
        views.write_json_array(sys.stdout, map(views.planned_build_json, preview.builds))
        return EXIT_OK
    out.print(views.planned_build_table(preview.builds))
    views.notes(err, preview.notes)
    views.say(err, "dry run: nothing was built, and no engine or registry was asked")
    return EXIT_OK


def cmd_lock(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app.lock import lock_matrix

    report = lock_matrix(args.matrix, args.package_index, args.insecure_registry)
    views.say(out, f"wrote {report.path}: {len(report.lock.bases)} base images, {len(report.lock.packages)} package ranges")
    for reference in report.changed_bases:
        views.say(out, f"  moved: {reference} -> {report.lock.bases[reference]}")
    for requirement in report.changed_packages:
        views.say(out, f"  moved: {requirement} -> {report.lock.packages[requirement]}")
    return EXIT_OK


def cmd_bake(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app.bake import export_bake

    export = export_bake(_choices(args), args.out, args.pip_conf, args.ca_bundle, args.network, args.registry_cache)
    views.say(out, f"wrote {export.file} with {len(export.targets)} targets; groups: {', '.join(export.groups)}")
    build = views.command_line("docker", "buildx", "bake", "-f", str(export.file))
    views.say(out, f"build with: {build} [GROUP] --load   (or --push, on any builder, from any folder)")
    return EXIT_OK


def cmd_publish(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app.publish import PublishOptions, publish_selection
    from buildkit.app.verify import signer_of, trust_of
    from buildkit.ui.report import write_publish_reports

    options, settings = _build_settings(args)
    publish_options = PublishOptions(
        nightly=args.nightly, date=args.date or "", keep=args.keep, dry_run=args.dry_run, require_published=args.require_published,
        refresh=args.refresh, package_index=args.package_index, provenance=args.provenance,
        gpu_gate=args.gpu_gate == "on", signer=signer_of(args.sign, args.keyless),
        trust=trust_of(args.verify_key, args.certificate_identity, args.certificate_oidc_issuer, required=False),
    )
    display = _display(err)
    with display:
        run = publish_selection(
            _choices(args, registry=args.registry, channel=args.channel), publish_options, options, settings, args.docker,
            display, args.registry_auth_file, args.insecure_registry,
        )
    report = args.report or args.out / "publish.json"
    markdown = write_publish_reports(run, report)
    views.say(out, markdown.read_text())
    views.say(err, f"report: {report} and {markdown}")
    return EXIT_FAILED if run.failed else EXIT_OK


def cmd_hipify(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app.hipify_preflight import PreflightOptions, preflight

    report = preflight(PreflightOptions(args.path, args.out, args.compile_check, args.offload_arch, args.json,
                                        args.toolchain_image, tuple(args.include_dir), tuple(args.defines), _split(args.hipcc_flags, "--hipcc-flags"),
                                        _split(args.cxx_flags, "--cxx-flags"), args.keep_objects))
    for line in views.hipify_lines(report):
        views.say(out, line)
    return EXIT_OK if report.passed else EXIT_FAILED


def cmd_test(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app.smoke import test_images
    from buildkit.ui.report import verdicts_json

    verdicts = test_images(_choices(args), list(args.images), args.gpu, args.timeout, lambda line: views.say(err, line))
    out.print(views.verdict_table(verdicts, args.gpu))
    if args.json:
        views.write_json(args.json, verdicts_json(verdicts), "--json")
    return EXIT_OK if all(v.passed for v in verdicts) else EXIT_FAILED


def cmd_parity(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app.smoke import parity

    result = parity(_choices(args), list(args.subjects))
    if args.json:
        views.write_json(args.json, views.parity_json(result), "--json")
    for line in views.parity_lines(result):
        views.say(out, line)
    return EXIT_OK if result.parity.passed else EXIT_FAILED


def cmd_detect(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app import routing

    detection = routing.detect(_choices(args), _host_choice(args))
    if args.json:
        views.print_json(views.detection_json(detection))
    else:
        views.show_detection(out, detection)
    return EXIT_OK


def cmd_run(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app import routing

    command = routing.run_command(_choices(args), args.image, _host_choice(args), args.container_command)
    for finding in command.warnings:
        views.say(err, f"warning: {finding.title} (fix: {finding.fix})")
    if args.print:
        sys.stdout.write(views.command_line(*command.argv) + "\n")
        return EXIT_OK
    return subprocess.call(command.argv)


def cmd_doctor(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app import routing

    report = routing.doctor(_choices(args), args.image, _host_choice(args))
    if report.host.engine is None:
        views.say(err, "note: the container engine was not asked (not reachable, or --host-root describes another host; "
                       "--engine names it), so its NVIDIA runtime and CDI support were not checked")
    if args.json:
        views.print_json(views.doctor_json(report))
    else:
        views.show_doctor(out, report)
    return EXIT_FAILED if report.blocking else EXIT_OK


def cmd_kube(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app.kube import KubeOptions, Lookup, kube

    options = KubeOptions(args.name, args.gpus, args.dra, tuple(args.container_command))
    result = kube(_choices(args), args.pair, options, Lookup(args.by_tag, args.registry_auth_file, args.insecure_registry))
    sys.stdout.write(views.kube_json(result.manifests) if args.json else views.kube_yaml(result.manifests))
    for note in result.manifests.notes:
        views.say(err, f"note: {note}")
    return EXIT_OK


def cmd_compat_check(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app.compat_check import check_compat
    from buildkit.ui.compat import compat_json, compat_markdown

    layouts = {}
    for value in args.layout_index:
        name, separator, url = value.partition("=")
        if not separator or not name or not url:
            raise UserError(Problem("--layout-index", f"{value!r}: expected LAYOUT=URL or LAYOUT=none, e.g. amd-multi-arch=none"))
        layouts[name] = url
    outcome = check_compat(args.index, args.data, args.write, pypi_url=args.pypi, layout_indexes=layouts, deep=args.deep,
                           matrix_path=args.default_matrix)
    if args.json:
        views.print_json(compat_json(outcome))
    else:
        sys.stdout.write(compat_markdown(outcome))
    return EXIT_OK if outcome.agrees else EXIT_DIFFERS


def cmd_verify(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app.verify import RegistryAccess, trust_of, verify_image

    trust = trust_of(args.key, args.certificate_identity, args.certificate_oidc_issuer, args.tlog)
    verification = verify_image(args.image, trust, args.tested_arch, RegistryAccess(args.registry_auth_file, args.insecure_registry))
    if args.json:
        views.print_json(views.verification_json(verification))
    else:
        for line in views.verification_lines(verification):
            views.say(out, line)
    return EXIT_OK if verification.passed else EXIT_FAILED


def cmd_sbom(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app.verify import RegistryAccess, image_sbom, trust_of

    trust = trust_of(args.key, args.certificate_identity, args.certificate_oidc_issuer, args.tlog, required=False)
    result = image_sbom(args.image, trust, args.local, RegistryAccess(args.registry_auth_file, args.insecure_registry))
    if args.out:
        views.write_json(args.out, result.document, "--out")
    else:
        views.print_json(result.document)
    views.say(err, f"sbom: {result.source}")
    for note in result.notes:
        views.say(err, f"note: {note}")
    return EXIT_OK


def cmd_report(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app.site import site_of
    from buildkit.ui.site import write_site

    site = site_of(_choices(args), args.sources, args.previous)
    written = write_site(site, args.html)
    for note in site.notes:
        views.say(err, f"note: {note}")
    views.say(out, f"wrote {written.files} files ({views.human_size(written.bytes)}) into {args.html}/: open {args.html / 'index.html'}")
    return EXIT_OK


def cmd_completion(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.ui.completion import completion_script

    sys.stdout.write(completion_script(build_parser(), args.shell))
    return EXIT_OK


COMMANDS = {
    ("matrix", "validate"): cmd_matrix_validate,
    ("matrix", "show"): cmd_matrix_show,
    ("matrix", "schema"): cmd_matrix_schema,
    ("plan", None): cmd_plan,
    ("render", None): cmd_render,
    ("build", None): cmd_build,
    ("lock", None): cmd_lock,
    ("bake", None): cmd_bake,
    ("publish", None): cmd_publish,
    ("test", None): cmd_test,
    ("parity", None): cmd_parity,
    ("detect", None): cmd_detect,
    ("run", None): cmd_run,
    ("doctor", None): cmd_doctor,
    ("kube", None): cmd_kube,
    ("hipify", None): cmd_hipify,
    ("compat", "check"): cmd_compat_check,
    ("verify", None): cmd_verify,
    ("sbom", None): cmd_sbom,
    ("report", None): cmd_report,
    ("completion", None): cmd_completion,
}


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the main thread is, as Ctrl-C is: every writer removes its temporary files on the
    way out and running builds are stopped, instead of the process vanishing mid-write."""


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # everything after `--` is the container's command (buildkit run), never buildkit's options
    container_command = argv[argv.index("--") + 1:] if "--" in argv else []
    args = build_parser().parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    args.container_command = container_command
    # Piped output is read by people too: give tables room instead of rich's 80-column default.
    width = None if sys.stdout.isatty() else 160
    out = Console(width=width, soft_wrap=True)
    err = Console(stderr=True, soft_wrap=True)
    handler = COMMANDS[(args.command, getattr(args, f"{args.command}_command", None))]
    if threading.current_thread() is threading.main_thread():  # tests call main() from threads too
        signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        if hasattr(args, "matrix"):  # every command that reads a matrix has --matrix: the file comes from one rule
            found = find_matrix(args.matrix)
            args.matrix = found.path
            if found.note:
                views.say(err, f"note: {found.note}")
        return handler(args, out, err)
    except UserError as error:
        for problem in error.problems:
            views.say(err, f"error: {problem}")
        return error.exit_code
    except KeyboardInterrupt as interrupt:
        views.say(err, "terminated" if isinstance(interrupt, Terminated) else "interrupted")
        return EXIT_TERMINATED if isinstance(interrupt, Terminated) else EXIT_INTERRUPTED
    except BrokenPipeError:
        # the reader went away (`buildkit plan --format json | head`): not an error of ours to report; point
        # stdout at /dev/null so the interpreter's final flush does not raise again on the way out
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_READER_GONE
    except Exception as error:  # a bug, not a user error: one line unless --debug asks for the traceback
        if args.debug:
            raise
        views.say(err, f"internal error (a bug in buildkit, please report it): {type(error).__name__}: {error}; "
                       "run again with --debug for the traceback")
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
