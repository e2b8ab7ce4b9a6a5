"""`buildkit hipify`: what of a CUDA tree will not port to ROCm, and whether it compiles."""

from __future__ import annotations

from pathlib import Path

from buildkit.cli.options import EXIT_FAILED, EXIT_OK, Commands, Invocation, command, split_flags
from buildkit.ui import views
from buildkit.ui.hipify import hipify_lines


def add_hipify(commands: Commands) -> None:
    hipify = command(commands, "hipify", run_hipify, help="preflight a CUDA tree for ROCm: hipify it out of place, report what does not map")
    hipify.add_argument("path", type=Path, help="a CUDA source tree (a PyTorch checkout or your extension)")
    hipify.add_argument("--out", type=Path, help="output folder (default: PATH-hip next to PATH)")
    hipify.add_argument("--compile-check", action="store_true", help="compile the hipified sources with hipcc")
    hipify.add_argument("--offload-arch", help="GPU arch for --compile-check (default: the newest data-center arch the hipcc supports)")
    hipify.add_argument(
        "--toolchain-image", metavar="IMAGE", help="run --compile-check's hipcc in a container of this ROCm toolchain image, not on this machine"
    )
    hipify.add_argument(
        "--include-dir", action="append", default=[], metavar="DIR", help="an include folder of the tree (relative to PATH) for --compile-check; repeatable"
    )
    hipify.add_argument(
        "-D",
        "--define",
        action="append",
        default=[],
        metavar="NAME[=VALUE]",
        dest="defines",
        help="a macro the project's build defines (as setup.py's define_macros), for the findings and --compile-check; repeatable",
    )
    hipify.add_argument(
        "--hipcc-flags",
        default="",
        metavar="FLAGS",
        help="more flags for --compile-check's hipcc, one string split as a shell would: --hipcc-flags='-O3 -DFOO'",
    )
    hipify.add_argument("--cxx-flags", default="", metavar="FLAGS", help="more flags for --compile-check's C++ compiler (one string)")
    hipify.add_argument("--keep-objects", type=Path, metavar="DIR", help="keep --compile-check's objects (and dependency lists) in DIR")
    hipify.add_argument("--json", type=Path, help="write the report as JSON")


def run_hipify(call: Invocation) -> int:
    from buildkit.app.hipify_preflight import PreflightOptions, preflight

    args = call.args
    report = preflight(
        PreflightOptions(
            source=args.path,
            out=args.out,
            compile_check=args.compile_check,
            offload_arch=args.offload_arch,
            json=args.json,
            toolchain_image=args.toolchain_image,
            include_dirs=tuple(args.include_dir),
            defines=tuple(args.defines),
            hipcc_flags=split_flags(args.hipcc_flags, "--hipcc-flags"),
            cxx_flags=split_flags(args.cxx_flags, "--cxx-flags"),
            keep_objects=args.keep_objects,
        )
    )
    for line in hipify_lines(report):
        views.say(call.out, line)
    return EXIT_OK if report.passed else EXIT_FAILED
