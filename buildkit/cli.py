"""The `buildkit` command: parse arguments, call the library, print. No logic of its own."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from buildkit import __version__
from buildkit.errors import UserError

VENDOR_CHOICES = ("nvidia", "amd", "all")
FORMATS = ("table", "json", "github")


class _Parser(argparse.ArgumentParser):
    """argparse with exit code 2 and one clear line for usage errors (its default already exits 2)."""


def _selection_options(parser: argparse.ArgumentParser, source: bool = False) -> None:
    parser.add_argument("--matrix", type=Path, help="matrix file (default: the matrix shipped with buildkit)")
    if source:
        parser.add_argument("--gpu-arch", action="append", default=[], metavar="GFX",
                            help="narrow ROCm targets to these gfx archs (repeatable); the source flavor compiles only these")
        parser.add_argument("--pytorch-src", type=Path, help="source flavor: compile this local PyTorch checkout (sent as the build context)")
        parser.add_argument("--max-jobs", type=_positive, help="source flavor: compile jobs (default: one per 7 GB of the builder's memory)")
    parser.add_argument("--vendor", choices=VENDOR_CHOICES, default="all", help="nvidia, amd or all (default)")
    parser.add_argument(
        "--select", action="append", default=[], metavar="KEY=GLOB",
        help="keep targets whose KEY (torch, python, backend, backend_version, flavor, vendor, id) matches GLOB; repeatable, all must match",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="buildkit", description="Matched NVIDIA CUDA and AMD ROCm PyTorch images from one TOML matrix.")
    parser.add_argument("--version", action="version", version=f"buildkit {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    matrix = commands.add_parser("matrix", help="work with matrix files")
    matrix_commands = matrix.add_subparsers(dest="matrix_command", required=True, metavar="SUBCOMMAND")
    validate = matrix_commands.add_parser("validate", help="check a matrix: every problem, or a count of its targets")
    validate.add_argument("--matrix", type=Path, help="matrix file (default: the matrix shipped with buildkit)")

    plan = commands.add_parser("plan", help="list the targets a matrix expands to")
    _selection_options(plan, source=True)
    plan.add_argument("--format", choices=FORMATS, default="table", help="table (default), json, or github (an Actions matrix)")

    render = commands.add_parser("render", help="write one Dockerfile per target into a folder tree")
    _selection_options(render, source=True)
    render.add_argument("--out", type=Path, default=Path("dist"), help="output folder (default: dist)")

    build = commands.add_parser("build", help="build, smoke-test, tag and report the selected targets on BuildKit")
    _selection_options(build, source=True)
    _build_options(build)
    build.add_argument("--report", type=Path, help="JSON report path (default: OUT/report.json; Markdown next to it)")

    publish = commands.add_parser("publish", help="nightly publishing: skip unchanged, build, test, push, move tags")
    _selection_options(publish)
    _build_options(publish)
    publish.add_argument("--registry", help="registry to publish to (default: the matrix's)")
    publish.add_argument("--registry-auth-file", type=Path, help="credentials: a docker config.json or {\"username\", \"password\"}")
    publish.add_argument("--insecure-registry", action="store_true", help="talk plain HTTP to the registry (localhost is plain by default)")
    publish.add_argument("--channel", choices=("release", "test", "nightly"), help="wheel channel for every stack (nightly: PyTorch's nightly wheels, --pre)")
    publish.add_argument("--nightly", action="store_true", help="add today's -nightly-YYYYMMDD tag and move the -nightly tags")
    publish.add_argument("--date", help="the nightly's date, YYYYMMDD (default: today, UTC)")
    publish.add_argument("--keep", type=_positive, help="keep the newest N nightly date tags per target, delete older ones this tool created")
    publish.add_argument("--dry-run", action="store_true", help="say what would be built and skipped; build and push nothing")
    publish.add_argument("--report", type=Path, help="JSON report path (default: OUT/publish.json; Markdown next to it)")

    test = commands.add_parser("test", help="smoke-test images: backend build check and, with a GPU, real kernels")
    test.add_argument("images", nargs="*", metavar="IMAGE", help="image references (default: the selected targets' images)")
    _selection_options(test)
    test.add_argument("--gpu", choices=GPU_MODES, default="auto", help=GPU_HELP)
    test.add_argument("--json", type=Path, help="write the verdicts and probe reports as JSON")
    test.add_argument("--timeout", type=_positive, default=300, help="seconds the probe may run per image (default 300)")

    parity = commands.add_parser("parity", help="compare a pair's CUDA and ROCm twins: OS, Python, packages")
    parity.add_argument("subjects", nargs="+", metavar="PAIR | IMAGE IMAGE", help="a pair key from the matrix, or two images")
    parity.add_argument("--matrix", type=Path, help="matrix file (default: the matrix shipped with buildkit)")
    parity.add_argument("--json", type=Path, help="write the differences as JSON")

    detect = commands.add_parser("detect", help="this host's GPUs, what they need, and the image that fits")
    _host_options(detect)
    detect.add_argument("--json", action="store_true", help="print JSON instead of a table")

    run = commands.add_parser(
        "run", help="run the image that fits this host's GPU, with the right flags",
        usage="buildkit run [IMAGE] [options] [-- CMD...]",
    )
    run.add_argument("image", nargs="?", help="image to run (default: the matrix target that fits this host)")
    _host_options(run)
    run.add_argument("--print", action="store_true", help="show the docker run command instead of running it")

    hipify = commands.add_parser("hipify", help="preflight a CUDA tree for ROCm: hipify it out of place, report what does not map")
    hipify.add_argument("path", type=Path, help="a CUDA source tree (a PyTorch checkout or your extension)")
    hipify.add_argument("--out", type=Path, help="output folder (default: PATH-hip next to PATH)")
    hipify.add_argument("--compile-check", action="store_true", help="compile the hipified sources with hipcc")
    hipify.add_argument("--offload-arch", default="gfx942", help="GPU arch for --compile-check (default gfx942)")
    hipify.add_argument("--json", type=Path, help="write the report as JSON")

    doctor = commands.add_parser("doctor", help="explain why GPU acceleration would or would not work here")
    doctor.add_argument("image", nargs="?", help="image to check against this host (labels from the engine or the matrix)")
    _host_options(doctor)
    doctor.add_argument("--json", action="store_true", help="print JSON instead of a table")

    compat = commands.add_parser("compat", help="work with the compatibility data")
    compat_commands = compat.add_subparsers(dest="compat_command", required=True, metavar="SUBCOMMAND")
    compat_check = compat_commands.add_parser(
        "check", help="compare the compatibility data with PyTorch's wheel index; exit 1 when they differ",
    )
    compat_check.add_argument("--index", metavar="URL", help="wheel index (default: the data's [wheel_index] url)")
    compat_check.add_argument("--data", type=Path, metavar="PATH", help="compatibility data file (default: the one shipped with buildkit)")
    compat_check.add_argument("--write", action="store_true", help="apply the proposed change to the data file (exit 0 once it agrees)")
    compat_check.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    return parser


def _host_options(parser: argparse.ArgumentParser) -> None:
    _selection_options(parser)
    parser.add_argument("--python", help="Python version of the image to pick (default: the newest)")
    parser.add_argument("--host-root", type=Path, default=Path("/"), help="read /sys, /proc, /dev below this folder (default /)")


GPU_MODES = ("auto", "require", "skip")
GPU_HELP = "auto: run kernels when the host has the image's GPU vendor (default); require: fail without one; skip: never"


def _build_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-j", "--jobs", type=_positive, default=1, help="targets built at once (default 1)")
    parser.add_argument("--no-cache", action="store_true", help="build every step again")
    parser.add_argument("--fail-fast", action="store_true", help="stop all builds at the first failure")
    parser.add_argument("--out", type=Path, default=Path("buildkit-out"), help="logs, build contexts, reports (default: buildkit-out)")
    parser.add_argument("--docker", help="docker CLI to build with (default: $BUILDKIT_DOCKER, else the first BuildKit-capable one on PATH)")
    parser.add_argument("--network", help="network mode for RUN steps, e.g. host (needed where pip reaches the network only from the host)")
    parser.add_argument("--pip-conf", type=Path, help="pip.conf for a private index, passed as a BuildKit secret")
    parser.add_argument("--index-url", help="pip index URL (credentials allowed), passed as a BuildKit secret")
    parser.add_argument("--extra-index-url", action="append", default=[], help="extra pip index URL (credentials allowed); repeatable")
    parser.add_argument("--ca-bundle", type=Path, help="CA bundle pip should trust, passed as a BuildKit secret")
    parser.add_argument("--no-efficiency", action="store_true", help="skip measuring image size against its filesystem")
    parser.add_argument("--gpu", choices=GPU_MODES, default="auto", help=GPU_HELP)


def _positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {value!r}")
    return number


def _source_options(args: argparse.Namespace):
    from buildkit.app.targets import SourceOptions

    return SourceOptions(tuple(args.gpu_arch), args.pytorch_src, args.max_jobs or 0)


def _print_notes(notes, console: Console) -> None:
    for note in notes:
        console.print(f"note: {note}", highlight=False, markup=False)


def cmd_matrix_validate(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app.targets import select_targets

    selection = select_targets(args.matrix)
    counts = {vendor: sum(1 for r in selection.rendered if r.target.vendor == vendor) for vendor in ("nvidia", "amd")}
    _print_notes(selection.notes, err)
    out.print(f"ok: {len(selection.rendered)} targets ({counts['nvidia']} nvidia, {counts['amd']} amd)", highlight=False)
    return 0


def cmd_plan(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app.targets import github_matrix, select_targets, target_json

    selection = select_targets(args.matrix, args.vendor, args.select, source=_source_options(args))
    if args.format == "json":
        print(json.dumps([target_json(item) for item in selection.rendered], indent=2))
    elif args.format == "github":
        print(json.dumps(github_matrix(selection), separators=(",", ":")))
    else:
        table = Table(title=f"{len(selection.rendered)} targets", title_justify="left")
        for column in ("id", "vendor", "tags", "pair", "fingerprint"):
            table.add_column(column, overflow="fold")
        for item in selection.rendered:
            target = item.target
            table.add_row(target.id, target.vendor, "\n".join(target.tag_names), target.pair or "-", item.fingerprint[:12])
        out.print(table)
        _print_notes(selection.notes, err)
    return 0


def cmd_render(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app.render_tree import write_tree
    from buildkit.app.targets import select_targets

    selection = select_targets(args.matrix, args.vendor, args.select, source=_source_options(args))
    written = write_tree(selection, args.out)
    _print_notes(selection.notes, err)
    out.print(f"rendered {len(written)} Dockerfiles into {args.out}/ (index: {args.out / 'plan.json'})", highlight=False)
    return 0


def _build_setup(args: argparse.Namespace, err: Console):
    """Options, index settings and the progress display that build and publish share."""
    from buildkit.app.build import BuildOptions
    from buildkit.adapters.secrets import IndexSettings
    from buildkit.ui.console import LiveDisplay, PlainDisplay
    from buildkit.adapters.build_stamp import created_now, source_revision

    matrix_folder = args.matrix.resolve().parent if args.matrix else Path.cwd()
    options = BuildOptions(
        out=args.out, jobs=args.jobs, no_cache=args.no_cache, fail_fast=args.fail_fast, network=args.network,
        efficiency=not args.no_efficiency, created=created_now(), revision=source_revision(matrix_folder), gpu=args.gpu,
        source_context=getattr(args, "pytorch_src", None),
    )
    settings = IndexSettings(args.pip_conf, args.index_url, tuple(args.extra_index_url), args.ca_bundle)
    display = LiveDisplay(err) if err.is_terminal else PlainDisplay(err)
    return options, settings, display


def cmd_build(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app.build import build_targets
    from buildkit.app.targets import select_targets
    from buildkit.ui.report import run_markdown, write_reports

    selection = select_targets(args.matrix, args.vendor, args.select, source=_source_options(args))
    if not selection.rendered:
        raise UserError("no target matches the selection; see `buildkit plan` with the same options")
    options, settings, display = _build_setup(args, err)
    _print_notes(selection.notes, err)
    with display:
        run, engine_description = build_targets(
            selection.rendered, options, settings, args.docker, display, selection.matrix.compat,
        )
    report = args.report or args.out / "report.json"
    markdown = write_reports(run, engine_description, report)
    out.print(run_markdown(run), highlight=False, markup=False)
    err.print(f"report: {report} and {markdown}", highlight=False)
    if run.engine_lost:
        err.print("error: the Docker engine stopped during the build; restart it and run the build again", highlight=False)
    if run.interrupted:
        err.print("interrupted: running builds were stopped", highlight=False)
        return 130
    return 1 if run.failed else 0


def cmd_publish(args: argparse.Namespace, out: Console, err: Console) -> int:
    from datetime import datetime, timezone

    from buildkit.adapters.registry import Registry, load_credentials
    from buildkit.app.targets import select_targets
    from buildkit.app.publish import PublishOptions, check_date_tags, publish, registry_of
    from buildkit.ui.report import write_publish_reports

    today = args.date or datetime.now(timezone.utc).strftime("%Y%m%d")
    if len(today) != 8 or not today.isdigit():
        raise UserError(f"--date: expected YYYYMMDD, got {today!r}")
    selection = select_targets(args.matrix, args.vendor, args.select, registry=args.registry, channel=args.channel, today=today)
    if not selection.rendered:
        raise UserError("no target matches the selection; see `buildkit plan` with the same options")
    if args.nightly:
        check_date_tags(selection.rendered, today)
    registry_host = registry_of(selection.rendered)
    credentials = load_credentials(registry_host, args.registry_auth_file)
    registry = Registry(registry_host, credentials, insecure=True if args.insecure_registry else None)
    options, settings, display = _build_setup(args, err)
    publish_options = PublishOptions(nightly=args.nightly, date=today, keep=args.keep, dry_run=args.dry_run)
    with display:
        run = publish(selection.rendered, publish_options, options, settings, args.docker, display,
                      selection.matrix.compat, registry, credentials)
    report = args.report or args.out / "publish.json"
    markdown = write_publish_reports(run, report)
    out.print(markdown.read_text(), highlight=False, markup=False)
    err.print(f"report: {report} and {markdown}", highlight=False)
    return 1 if run.failed else 0


def cmd_hipify(args: argparse.Namespace, out: Console, err: Console) -> int:
    from dataclasses import asdict

    from buildkit.adapters.hipify import compile_check, run_hipify
    from buildkit.core import grammar
    from buildkit.adapters.bundled import compat_data
    from buildkit.core.compat import compat_from_data

    known = compat_from_data(compat_data()).known_archs["rocm"]  # the [gfx] table of compat.toml
    if args.compile_check and args.offload_arch not in known:
        raise UserError(f"--offload-arch: unknown gfx target {args.offload_arch!r}; known: {', '.join(known)}")
    if not grammar.ROCM_ARCH_RE.match(args.offload_arch):
        raise UserError(f"--offload-arch: expected a gfx target such as gfx942, got {args.offload_arch!r}")
    target = args.out or args.path.resolve().parent / f"{args.path.resolve().name}-hip"
    report = run_hipify(args.path, target)
    if args.compile_check:
        report = compile_check(report, args.offload_arch)
    out.print(f"hipify: {len(report.converted)} files converted, {len(report.unchanged)} unchanged in {report.seconds:.2f} s -> {report.output}", highlight=False)
    for use in report.unmapped:
        out.print(f"  no HIP mapping: {use.file}:{use.line}: {use.identifier}", highlight=False, markup=False)
    if report.compile_skipped:
        out.print(f"compile check skipped: {report.compile_skipped}", highlight=False)
    for unit in report.compiled:
        note = {"ok": "compiles", "error": "DOES NOT COMPILE", "environment": "not checked"}[unit.status]
        detail = "" if unit.status == "ok" else f": {unit.summary}"
        out.print(f"  {unit.file} for {args.offload_arch}: {note}{detail}", highlight=False, markup=False)
    if args.json:
        args.json.write_text(json.dumps(asdict(report) | {"passed": report.passed}, indent=2) + "\n", encoding="utf-8")
    return 0 if report.passed else 1


def cmd_test(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.adapters import engine
    from buildkit.adapters.host import read_host
    from buildkit.app.targets import select_targets
    from buildkit.ui.report import verdict_json
    from buildkit.app.smoke import smoke_test

    selection = select_targets(args.matrix, args.vendor, args.select)
    images = list(args.images) or [item.target.tags[0] for item in selection.rendered]
    if not images:
        raise UserError("no image to test: name images, or select targets whose images were built")
    client = engine.connect()
    host = read_host(selection.matrix.compat)
    verdicts = []
    for image in images:
        err.print(f"testing {image}", highlight=False)
        verdicts.append(smoke_test(client, image, args.gpu, host, args.timeout))
    table = Table(title=f"smoke tests (--gpu {args.gpu})", title_justify="left")
    for column in ("image", "torch", "verdict", "kernels", "failures"):
        table.add_column(column, overflow="fold")
    for verdict in verdicts:
        table.add_row(
            verdict.image, verdict.torch or "-", "pass" if verdict.passed else "FAIL", verdict.kernels,
            "\n".join(verdict.failures) or "-",
        )
    out.print(table)
    if args.json:
        args.json.write_text(json.dumps([verdict_json(v) for v in verdicts], indent=2) + "\n", encoding="utf-8")
    return 0 if all(v.passed for v in verdicts) else 1


def cmd_parity(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.adapters import engine
    from buildkit.app.targets import select_targets
    from buildkit.app.smoke import probe_report
    from buildkit.core.parity import compare

    selection = select_targets(args.matrix)
    if len(args.subjects) == 1:
        twins = [item.target for item in selection.rendered if item.target.pair == args.subjects[0]]
        if len(twins) != 2:
            known = sorted({item.target.pair for item in selection.rendered if item.target.pair})
            raise UserError(f"{args.subjects[0]!r} is not a pair of this matrix; pairs: {', '.join(known[:8])}{' …' if len(known) > 8 else ''}")
        images = [twin.tags[0] for twin in sorted(twins, key=lambda t: t.backend)]
    elif len(args.subjects) == 2:
        images = list(args.subjects)
    else:
        raise UserError("parity compares one pair (PAIR) or two images (IMAGE IMAGE)")
    client = engine.connect()
    reports = [probe_report(client, image) for image in images]
    result = compare(images[0], reports[0], images[1], reports[1], selection.matrix.compat.vendor_packages)
    if args.json:
        args.json.write_text(json.dumps({"images": images, "passed": result.passed, "differences": list(result.differences)}, indent=2) + "\n")
    if result.passed:
        out.print(f"parity: {images[0]} and {images[1]} hold the same OS, Python and packages (vendor runtimes aside)", highlight=False)
        return 0
    out.print(f"parity: {len(result.differences)} difference(s) between {images[0]} and {images[1]}:", highlight=False)
    for difference in result.differences:
        out.print(f"  - {difference}", highlight=False, markup=False)
    return 1


def _gpu_json(host) -> dict:
    nodes = [n for n in (host.kfd, *host.render_nodes, *host.nvidia_nodes) if n is not None]
    return {
        "gpus": [{"vendor": g.vendor, "pci": g.pci, "device_id": g.device_id, "name": g.name, "arch": g.arch} for g in host.gpus],
        "drivers": {"nvidia": host.nvidia_driver or None, "amdgpu": host.amdgpu_driver or ("loaded" if host.amdgpu_loaded else None)},
        "device_nodes": [{"path": n.path, "group": n.group, "gid": n.gid, "accessible": n.accessible} for n in nodes],
    }


def cmd_detect(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app import routing
    from buildkit.core.host import primary_vendor, run_arguments
    from buildkit.app.targets import select_targets

    selection = select_targets(args.matrix, args.vendor, args.select)
    host = routing.host_facts(selection, args.host_root, None)
    picks = routing.choices(host, selection, args.python)
    vendor = primary_vendor(host)
    document = {
        **_gpu_json(host),
        "vendor": vendor,
        "targets": {
            v: {"id": c.target.id if c.target else None, "tag": c.target.tags[0] if c.target else None,
                "run_flags": run_arguments(v, host), "passed_over": list(c.reasons)}
            for v, c in picks.items()
        },
    }
    if args.json:
        print(json.dumps(document, indent=2))
        return 0
    if not host.gpus:
        out.print("no GPU on this host: images run on the CPU here (torch.cuda.is_available() is False)", highlight=False)
        return 0
    table = Table(title="GPUs", title_justify="left")
    for column in ("pci", "vendor", "model", "arch"):
        table.add_column(column)
    for gpu in host.gpus:
        table.add_row(gpu.pci, gpu.vendor, gpu.name, gpu.arch or "?")
    out.print(table)
    out.print(f"drivers: nvidia {host.nvidia_driver or '-'}, amdgpu {host.amdgpu_driver or ('loaded' if host.amdgpu_loaded else '-')}", highlight=False)
    for node in document["device_nodes"]:
        out.print(f"{node['path']}: group {node['group'] or node['gid']}, {'accessible' if node['accessible'] else 'NOT accessible'} to you", highlight=False)
    for v, choice in picks.items():
        mark = " (this host's vendor)" if v == vendor and len(picks) > 1 else ""
        if choice.target:
            out.print(f"{v}{mark}: {choice.target.tags[0]}\n  docker run {' '.join(run_arguments(v, host))} {choice.target.tags[0]}", highlight=False)
        else:
            out.print(f"{v}{mark}: no target fits: {'; '.join(choice.reasons)}", highlight=False)
    return 0


def cmd_run(args: argparse.Namespace, out: Console, err: Console) -> int:
    import os
    import shlex
    import subprocess

    from buildkit.app import routing
    from buildkit.core.compat import VENDOR_OF
    from buildkit.core.host import VENDOR_NAME, run_arguments
    from buildkit.core.plan import LABEL_PREFIX
    from buildkit.app.targets import select_targets

    selection = select_targets(args.matrix, args.vendor, args.select)
    client = routing.engine_client()
    host = routing.host_facts(selection, args.host_root, None)
    if args.image:
        info = routing.image_info(args.image, selection, client)
    else:
        choice = routing.routed(host, selection, args.python)
        if choice is None or choice.target is None:
            reasons = "; ".join(choice.reasons) if choice else "this host has no GPU"
            raise UserError(f"no matrix target fits this host ({reasons}); name an image to run it anyway")
        info = routing.image_info(choice.target.tags[0], selection, client)
    image_vendor = VENDOR_OF.get(info.labels.get(f"{LABEL_PREFIX}backend", ""))
    flags: list[str] = []
    if image_vendor and host.vendors() and image_vendor not in host.vendors():
        other = host.vendors()[0]
        twin = routing.twin_of(info.labels, selection, other) or routing.choices(host, selection, args.python)[other].target
        hint = f"; run {twin.tags[0]} instead" if twin else ""
        raise UserError(
            f"{info.reference} is an {VENDOR_NAME[image_vendor]} image and this host has only {VENDOR_NAME[other]} GPUs: "
            f"torch would find no usable GPU and silently run on the CPU{hint}"
        )
    if image_vendor in host.vendors():
        flags = run_arguments(image_vendor, host)
    elif not host.vendors():
        err.print("note: this host has no GPU; the container runs on the CPU", highlight=False)
    command = args.container_command
    docker_cli = os.environ.get("BUILDKIT_DOCKER", "docker")
    argv = [docker_cli, "run", "--rm", *(["-it"] if os.isatty(0) and os.isatty(1) else []), *flags, info.reference, *command]
    if args.print:
        print(shlex.join(argv))
        return 0
    return subprocess.call(argv)


def cmd_doctor(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app import routing
    from buildkit.core.host import diagnose
    from buildkit.app.targets import select_targets

    selection = select_targets(args.matrix, args.vendor, args.select)
    client = routing.engine_client()
    host = routing.host_facts(selection, args.host_root, client)
    info = routing.image_info(args.image, selection, client) if args.image else None
    findings = diagnose(host, selection.matrix.compat, info.labels if info else None, info.reference if info else "")
    if client is None:
        err.print("note: the Docker engine is not reachable, so its NVIDIA runtime was not checked", highlight=False)
    blocking = any(f.blocking for f in findings)
    if args.json:
        print(json.dumps({
            **_gpu_json(host), "image": info.reference if info else None, "ok": not blocking,
            "findings": [{"blocking": f.blocking, "finding": f.title, "fix": f.fix} for f in findings],
        }, indent=2))
        return 1 if blocking else 0
    table = Table(title=f"doctor{': ' + info.reference if info else ''}", title_justify="left")
    for column in ("", "finding", "fix"):
        table.add_column(column, overflow="fold")
    for finding in findings:
        table.add_row("BLOCKS" if finding.blocking else "note", finding.title, finding.fix)
    if findings:
        out.print(table)
    out.print("GPU acceleration is blocked here: fix the findings marked BLOCKS" if blocking else "ok: nothing blocks GPU acceleration here", highlight=False)
    return 1 if blocking else 0


def cmd_compat_check(args: argparse.Namespace, out: Console, err: Console) -> int:
    from buildkit.app.compat_check import check_compat
    from buildkit.ui.compat import compat_json, compat_markdown

    outcome = check_compat(args.index, args.data, args.write)
    if args.json:
        print(json.dumps(compat_json(outcome), indent=2))
    else:
        print(compat_markdown(outcome), end="")
    return 0 if outcome.agrees else 1


COMMANDS = {
    ("matrix", "validate"): cmd_matrix_validate,
    ("plan", None): cmd_plan,
    ("render", None): cmd_render,
    ("build", None): cmd_build,
    ("publish", None): cmd_publish,
    ("test", None): cmd_test,
    ("parity", None): cmd_parity,
    ("detect", None): cmd_detect,
    ("run", None): cmd_run,
    ("doctor", None): cmd_doctor,
    ("hipify", None): cmd_hipify,
    ("compat", "check"): cmd_compat_check,
}


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
    try:
        return handler(args, out, err)
    except UserError as error:
        for problem in error.problems:
            err.print(f"error: {problem}", highlight=False, markup=False)
        return error.exit_code
    except KeyboardInterrupt:
        err.print("interrupted", highlight=False)
        return 130


if __name__ == "__main__":
    sys.exit(main())
