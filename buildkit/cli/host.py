"""`buildkit detect | run | doctor | kube`: this host's GPUs and the image that fits them, run with its vendor's
flags, why GPU acceleration would or would not work, Kubernetes manifests for both twins of a pair."""

from __future__ import annotations

import subprocess
import sys

from buildkit.cli.options import (
    EXIT_FAILED,
    EXIT_OK,
    Commands,
    Invocation,
    add_host_options,
    add_matrix,
    add_registry_access,
    command,
    host_choice,
    matrix_path,
    positive,
    selection,
)
from buildkit.ui import views


def add_detect(commands: Commands) -> None:
    detect = command(commands, "detect", run_detect, help="this host's GPUs, what they need, and the image that fits")
    add_host_options(detect)
    detect.add_argument("--json", action="store_true", help="print JSON instead of a table")


def add_run(commands: Commands) -> None:
    run = command(
        commands, "run", run_run, help="run the image that fits this host's GPU, with the right flags", usage="buildkit run [IMAGE] [options] [-- CMD...]"
    )
    run.add_argument("image", nargs="?", help="image to run (default: the matrix target that fits this host)")
    add_host_options(run)
    run.add_argument("--print", action="store_true", help="show the docker run command instead of running it")


def add_doctor(commands: Commands) -> None:
    doctor = command(commands, "doctor", run_doctor, help="explain why GPU acceleration would or would not work here")
    doctor.add_argument("image", nargs="?", help="image to check against this host (labels from the engine or the matrix)")
    add_host_options(doctor)
    doctor.add_argument("--json", action="store_true", help="print JSON instead of a table")


def add_kube(commands: Commands) -> None:
    kube = command(
        commands,
        "kube",
        run_kube,
        help="Kubernetes manifests for both twins of a pair: GPU resource, node affinity, non-root user",
        usage="buildkit kube PAIR [options] [-- CMD...]",
    )
    kube.add_argument("pair", metavar="PAIR", help="a pair key (see `buildkit plan`) or a tag of one of its images")
    add_matrix(kube)
    kube.add_argument("--gpus", type=positive, default=1, help="GPUs per pod (default 1)")
    kube.add_argument(
        "--dra", action="store_true", help="claim GPUs through DRA ResourceClaimTemplates (Kubernetes 1.34+) instead of the device plugins' resources"
    )
    kube.add_argument("--name", default="pytorch", help="prefix of the objects' names (default: pytorch)")
    kube.add_argument("--by-tag", action="store_true", help="name images by tag; do not ask the registry for their digests")
    add_registry_access(kube)
    kube.add_argument("--json", action="store_true", help="print a JSON List instead of YAML documents")


def run_detect(call: Invocation) -> int:
    from buildkit.app import routing

    detection = routing.detect(selection(call), host_choice(call))
    if call.args.json:
        views.print_json(views.detection_json(detection))
    else:
        views.show_detection(call.out, detection)
    return EXIT_OK


def run_run(call: Invocation) -> int:
    from buildkit.app import routing

    command_line = routing.run_command(selection(call), call.args.image, host_choice(call), list(call.rest))
    for finding in command_line.warnings:
        views.say(call.err, f"warning: {finding.title} (fix: {finding.fix})")
    if call.args.print:
        sys.stdout.write(views.command_line(*command_line.argv) + "\n")
        return EXIT_OK
    return subprocess.call(command_line.argv)


def run_doctor(call: Invocation) -> int:
    from buildkit.app import routing

    report = routing.doctor(selection(call), call.args.image, host_choice(call))
    if report.host.engine is None:
        views.say(
            call.err,
            "note: the container engine was not asked (not reachable, or --host-root describes another host; "
            "--engine names it), so its NVIDIA runtime and CDI support were not checked",
        )
    if call.args.json:
        views.print_json(views.doctor_json(report))
    else:
        views.show_doctor(call.out, report)
    return EXIT_FAILED if report.blocking else EXIT_OK


def run_kube(call: Invocation) -> int:
    from buildkit.app.kube import KubeOptions, Lookup, kube
    from buildkit.app.targets import Choices

    args = call.args
    options = KubeOptions(args.name, args.gpus, args.dra, call.rest)
    result = kube(Choices(matrix=matrix_path(call)), args.pair, options, Lookup(args.by_tag, args.registry_auth_file, args.insecure_registry))
    sys.stdout.write(views.kube_json(result.manifests) if args.json else views.kube_yaml(result.manifests))
    for note in result.manifests.notes:
        views.say(call.err, f"note: {note}")
    return EXIT_OK
