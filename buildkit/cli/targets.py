"""`buildkit plan | render | bake`: the targets a matrix selects, as a table, JSON or ids; as Dockerfiles; as a
docker-bake.json."""

from __future__ import annotations

import sys
from pathlib import Path

from buildkit.app.render_tree import write_tree
from buildkit.app.targets import PlannedImage, github_matrix, plan_json, select_targets, target_json
from buildkit.cli.options import EXIT_OK, Commands, Invocation, add_selection, command, selection
from buildkit.errors import Problem, UserError
from buildkit.ui import views


def add_plan(commands: Commands) -> None:
    plan = command(commands, "plan", run_plan, help="list the targets a matrix expands to")
    add_selection(plan, source=True)
    plan.add_argument(
        "--format",
        choices=views.PLAN_FORMATS,
        default=views.PLAN_FORMATS[0],
        help="table (default), json, github (an Actions matrix), or ids (one target id per line)",
    )
    plan.add_argument(
        "--layers",
        action="store_true",
        help="with --format json: each target's layers, keyed by what determines their files, and how many "
        "other selected targets hold each (every target is planned before the first is printed)",
    )


def add_render(commands: Commands) -> None:
    render = command(commands, "render", run_render, help="write one Dockerfile per target into a folder tree")
    add_selection(render, source=True)
    render.add_argument("--out", type=Path, default=Path("dist"), help="output folder (default: dist)")


def add_bake(commands: Commands) -> None:
    bake = command(commands, "bake", run_bake, help="export the selection as a docker-bake.json for `docker buildx bake` on any builder")
    add_selection(bake, source=True)
    bake.add_argument("--out", type=Path, default=Path("bake"), help="output folder: docker-bake.json and the build contexts (default: bake)")
    bake.add_argument("--platform", action="append", default=[], metavar="OS/ARCH", help="platforms to build (repeatable; default linux/amd64)")
    bake.add_argument("--pip-conf", type=Path, help="pip.conf secret: its path becomes the default of ${BUILDKIT_PIP_CONF}")
    bake.add_argument("--ca-bundle", type=Path, help="CA bundle secret: its path becomes the default of ${BUILDKIT_CA_BUNDLE}")
    bake.add_argument("--network", help="network mode for RUN steps, e.g. host")
    bake.add_argument("--registry-cache", action="store_true", help="read and write the registry build cache, as publish does")


def _plan_line(planned: PlannedImage) -> str:
    return views.json_line(target_json(planned))


def run_plan(call: Invocation) -> int:
    args = call.args
    if args.layers and args.format != "json":
        raise UserError(Problem("--layers", "adds the layers to --format json's objects; add --format json, or leave --layers out"))
    chosen = select_targets(selection(call, source=True))
    if args.format == "json":
        if args.layers:  # each target's layers are named against the whole plan's
            views.write_json_array(sys.stdout, plan_json(chosen.iter_plan()))
        else:
            views.write_json_lines(sys.stdout, chosen.map_plan(_plan_line))
        return EXIT_OK
    if args.format == "ids":
        sys.stdout.writelines(f"{target.id}\n" for target in chosen.targets)
        return EXIT_OK
    planned = chosen.plan()
    if args.format == "github":
        views.print_json(github_matrix(planned), compact=True)
    else:
        call.out.print(views.plan_table(planned))
        views.notes(call.err, chosen.notes)
    return EXIT_OK


def run_render(call: Invocation) -> int:
    out = call.args.out
    chosen = select_targets(selection(call, source=True))
    tree = write_tree(chosen.render(), out)
    views.notes(call.err, chosen.notes)
    views.say(call.out, f"rendered {len(tree.folders)} Dockerfiles into {out}/ (index: {out / 'plan.json'})")
    if tree.removed:
        views.say(call.out, f"removed {len(tree.removed)} files of an earlier render that the plan no longer lists")
    return EXIT_OK


def run_bake(call: Invocation) -> int:
    from buildkit.app.bake import export_bake

    args = call.args
    export = export_bake(
        selection(call, source=True, platforms=tuple(args.platform)), args.out, args.pip_conf, args.ca_bundle, args.network, args.registry_cache
    )
    views.say(call.out, f"wrote {export.file} with {len(export.targets)} targets; groups: {', '.join(export.groups)}")
    build = views.command_line("docker", "buildx", "bake", "-f", str(export.file))
    views.say(call.out, f"build with: {build} [GROUP] --load   (or --push, on any builder, from any folder)")
    return EXIT_OK
