"""What every command's handler is given, and the option groups several commands share: each group is added to
a parser by one function and read back, once, into the app's frozen option record by another, so a handler
reads exactly the options its parser has (no getattr with a fallback, no Namespace changed after parsing)."""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from buildkit.app import ALL_VENDORS, COMPRESSIONS, GPU_MODES, SELECTOR_KEYS, VENDOR_CHOICES
from buildkit.app.targets import Choices, SourceOptions, find_matrix
from buildkit.errors import Problem, UserError
from buildkit.ui import views

# Commands that reach an engine, a registry or cosign import their use cases when they run: `plan` and
# `matrix validate`, which CI calls on every push, start without loading the docker SDK and requests.
if TYPE_CHECKING:
    from rich.console import Console

    from buildkit.app.build import BuildOptions, IndexSettings
    from buildkit.app.routing import HostChoice
    from buildkit.ui.console import LiveDisplay, PlainDisplay

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


@dataclass(frozen=True)
class Invocation:
    """One run of a command: its parsed options, the container command after `--` (buildkit run, kube), where
    it prints (results on `out`, everything else on `err`), and the parser (completion is generated from it)."""

    args: argparse.Namespace
    rest: tuple[str, ...]
    out: Console
    err: Console
    parser: argparse.ArgumentParser


Handler = Callable[[Invocation], int]
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"  # what add_subparsers returns, each add_* fills

# --debug belongs to every command, so it is accepted before or after the subcommand; SUPPRESS keeps a
# subcommand's absent flag from overwriting one given before it.
COMMON = argparse.ArgumentParser(add_help=False)
COMMON.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help="show the traceback of an internal error")


class Renamed(argparse.Action):
    """An option's old spelling: one usage error (exit 2) naming the new one, and hidden from --help."""

    def __init__(self, option_strings: list[str], dest: str, renamed_to: str, why: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS, **kwargs)  # type: ignore[arg-type]  # add_argument's other keywords, passed on as given
        self.renamed_to, self.why = renamed_to, why

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object, option_string: str | None = None) -> None:
        parser.error(f"{option_string} is now {self.renamed_to} ({self.why}); write {self.renamed_to} {values or 'ARCH'}")


def command(commands: Commands, name: str, run: Handler | None, *, help: str, usage: str | None = None) -> argparse.ArgumentParser:
    """A (sub)command's parser; `run` is its handler (None for a group of subcommands)."""
    parser: argparse.ArgumentParser = commands.add_parser(name, parents=[COMMON], help=help, usage=usage)
    if run is not None:
        parser.set_defaults(run=run)
    return parser


def positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {value!r}")
    return number


def split_flags(flags: str, option: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(flags))
    except ValueError as error:
        raise UserError(Problem(option, f"cannot be split into flags ({error}): quote as a shell would")) from None


# --- the matrix and the selection ------------------------------------------------------------------------


def add_matrix(parser: argparse.ArgumentParser, help: str = MATRIX_HELP) -> None:
    parser.add_argument("--matrix", type=Path, help=help)


def matrix_path(call: Invocation) -> Path | None:
    """The matrix file by one rule (--matrix, $BUILDKIT_MATRIX, ./matrix.toml, the bundled one; None for the
    bundled one), said on stderr when it is the bundled one."""
    found = find_matrix(call.args.matrix)
    if found.note:
        views.say(call.err, f"note: {found.note}")
    return found.path


def add_selection(parser: argparse.ArgumentParser, source: bool = False) -> None:
    add_matrix(parser)
    if source:
        parser.add_argument(
            "--gpu-arch",
            action="append",
            default=[],
            metavar="GFX",
            help="narrow ROCm targets to these gfx archs (repeatable); the source flavor compiles only these",
        )
        parser.add_argument("--pytorch-src", type=Path, help="source flavor: compile this local PyTorch checkout (sent as the build context)")
        parser.add_argument("--max-jobs", type=positive, help="source flavor: compile jobs (default: one per 7 GB of the builder's memory)")
    parser.add_argument("--vendor", choices=VENDOR_CHOICES, default=ALL_VENDORS, help=f"{', '.join(VENDOR_CHOICES)} (default)")
    parser.add_argument(
        "--select",
        action="append",
        default=[],
        metavar="KEY=GLOB",
        help=f"keep targets whose KEY ({', '.join(SELECTOR_KEYS)}) matches GLOB; repeatable, all must match",
    )


def selection(
    call: Invocation,
    *,
    source: bool = False,
    platforms: tuple[str, ...] = (),
    compression: str | None = None,
    registry: str | None = None,
    channel: str | None = None,
) -> Choices:
    """The Choices of a parser made with add_selection(source=`source`), with what other options of the command
    choose (--platform, --compression, publish's --registry and --channel)."""
    args = call.args
    return Choices(
        matrix=matrix_path(call),
        vendor=args.vendor,
        selectors=tuple(args.select),
        source=SourceOptions(tuple(args.gpu_arch), args.pytorch_src, args.max_jobs or 0) if source else SourceOptions(),
        platforms=platforms,
        compression=compression,
        registry=registry,
        channel=channel,
    )


# --- builds ----------------------------------------------------------------------------------------------


def add_build_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-j", "--jobs", type=positive, default=1, help="targets built at once (default 1)")
    parser.add_argument("--no-cache", action="store_true", help="build every step again")
    parser.add_argument("--fail-fast", action="store_true", help="stop all builds at the first failure")
    parser.add_argument("--out", type=Path, default=Path("buildkit-out"), help="logs, build contexts, reports (default: buildkit-out)")
    parser.add_argument("--docker", help="docker CLI to build with (default: $BUILDKIT_DOCKER, else docker on PATH); it needs the buildx plugin")
    parser.add_argument(
        "--builder", help="buildx builder (docker-container, kubernetes, remote driver) or docker context to build on (default: the current one)"
    )
    parser.add_argument(
        "--platform",
        action="append",
        default=[],
        metavar="OS/ARCH",
        help="build for this platform (repeatable; linux/amd64, linux/arm64): an image index per target, "
        "for the platforms its wheels exist for (default: linux/amd64)",
    )
    parser.add_argument("--network", help="network mode for RUN steps, e.g. host (needed where pip reaches the network only from the host)")
    parser.add_argument("--pip-conf", type=Path, help="pip.conf for a private index, passed as a BuildKit secret")
    parser.add_argument("--index-url", help="pip index URL (credentials allowed), passed as a BuildKit secret")
    parser.add_argument("--extra-index-url", action="append", default=[], help="extra pip index URL (credentials allowed); repeatable")
    parser.add_argument("--ca-bundle", type=Path, help="CA bundle pip should trust, passed as a BuildKit secret")
    parser.add_argument(
        "--retest", action="store_true", help="smoke-test (and measure) every image again, even one this machine proved before with the same id"
    )
    parser.add_argument("--compression", choices=COMPRESSIONS, help="image layers: zstd (default; pulled by Docker 23 and newer) or gzip, for older engines")
    parser.add_argument(
        "--efficiency", action="store_true", help="also measure each image's layers against its filesystem (reads the image back: about a minute for 6 GB here)"
    )
    parser.add_argument("--gpu", choices=GPU_MODES, default=GPU_MODES[0], help=GPU_HELP)


def build_settings(call: Invocation, source_context: Path | None = None) -> tuple[BuildOptions, IndexSettings]:
    """The BuildOptions and IndexSettings of a parser made with add_build_options; `source_context`: the source
    flavor's checkout (build's --pytorch-src)."""
    from buildkit.app.build import BuildOptions, IndexSettings

    args = call.args
    options = BuildOptions(
        out=args.out,
        jobs=args.jobs,
        no_cache=args.no_cache,
        fail_fast=args.fail_fast,
        network=args.network,
        efficiency=args.efficiency,
        retest=args.retest,
        gpu=args.gpu,
        source_context=source_context,
        builder=args.builder,
        registry_cache=args.registry_cache,
    )
    return options, IndexSettings(args.pip_conf, args.index_url, tuple(args.extra_index_url), args.ca_bundle)


def display(err: Console) -> LiveDisplay | PlainDisplay:  # imported when a build runs
    from buildkit.ui.console import LiveDisplay, PlainDisplay

    return LiveDisplay(err) if err.is_terminal else PlainDisplay(err)


# --- hosts and registries --------------------------------------------------------------------------------


def add_host_options(parser: argparse.ArgumentParser) -> None:
    add_selection(parser)
    parser.add_argument("--python", help="Python version of the image to pick (default: the newest)")
    parser.add_argument("--host-root", type=Path, default=Path("/"), help="read /sys, /proc, /dev, /etc/cdi below this folder (default /)")
    parser.add_argument(
        "--engine",
        metavar="ENGINE",
        help="the host's container engine, for --host-root: docker:VERSION (docker:28.2), "
        "podman or podman-rootless (default: ask the local engine; not asked for --host-root)",
    )


def host_choice(call: Invocation) -> HostChoice:
    from buildkit.app.routing import HostChoice

    return HostChoice(call.args.host_root, call.args.engine, call.args.python)


def add_supply_chain_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--key", help="cosign public key file or KMS URI whose signature counts")
    parser.add_argument("--certificate-identity", help="keyless: the identity the signing certificate must name (the CI workflow)")
    parser.add_argument("--certificate-oidc-issuer", help="keyless: its OIDC issuer, e.g. https://token.actions.githubusercontent.com")
    parser.add_argument("--tlog", action="store_true", help="with --key: also require a transparency log entry")
    add_registry_access(parser)


def add_registry_access(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--registry-auth-file", type=Path, help='credentials: a docker config.json or {"username", "password"}')
    parser.add_argument("--insecure-registry", action="store_true", help="talk plain HTTP to the registry (localhost is plain by default)")
