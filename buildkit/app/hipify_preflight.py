"""`buildkit hipify`: options checked before the minutes of work, the run, the compile check, the JSON report."""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from buildkit.adapters.files.bundled import shipped_compat
from buildkit.adapters.files.inputs import NotReadable, read_regular
from buildkit.adapters.files.outputs import check_writable_file, write_atomic
from buildkit.adapters.hipify.compile_check import build_macros, compile_check, extension_name
from buildkit.adapters.hipify.convert import check_folders, run_hipify
from buildkit.adapters.hipify.hipcc import HOST, ImageRunner, default_offload_arch, find_hipcc
from buildkit.adapters.hipify.torch_extension import hipify_nvcc_flags, read_extension_build
from buildkit.core import grammar
from buildkit.core.porting.setup_py import MAX_SETUP_BYTES, ExtensionFlags, ProjectFlags, SetupFlags, read_setup_py
from buildkit.core.vendors import AMD
from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from buildkit.core.porting.report import HipifyReport


@dataclass(frozen=True, kw_only=True)
class PreflightOptions:
    source: Path
    out: Path | None = None  # default: SOURCE-hip next to SOURCE
    compile_check: bool = False
    offload_arch: str | None = None  # default: the newest data-center arch the hipcc supports
    json: Path | None = None
    toolchain_image: str | None = None  # run hipcc in a container of this image instead of on this machine
    include_dirs: tuple[str, ...] = ()  # the tree's own include folders (relative to it), as its setup.py passes them
    defines: tuple[str, ...] = ()  # -D NAME[=VALUE]: macros the project's build defines, for both compilers
    hipcc_flags: tuple[str, ...] = ()  # more flags for hipcc (--hipcc-flags, split as a shell would)
    cxx_flags: tuple[str, ...] = ()  # more flags for the C++ compiler (--cxx-flags)
    keep_objects: Path | None = None  # where the compile check's objects are kept


def preflight(options: PreflightOptions) -> HipifyReport:
    known = shipped_compat().known_archs[AMD.backend]  # hipify ports to AMD's GPUs
    arch = options.offload_arch
    if arch is not None:
        if options.compile_check and arch not in known:
            raise UserError(f"--offload-arch: unknown gfx target {arch!r}; known: {', '.join(known)}")
        if grammar.rocm_arch(arch):
            raise UserError(f"--offload-arch: expected a gfx target such as gfx942, got {arch!r}")
    compile_only = {
        "--toolchain-image": options.toolchain_image,
        "--include-dir": options.include_dirs,
        "--hipcc-flags": options.hipcc_flags,
        "--cxx-flags": options.cxx_flags,
        "--keep-objects": options.keep_objects,
    }
    for option, value in compile_only.items():
        if value and not options.compile_check:
            raise UserError(Problem(option, "only applies to --compile-check"))
    _check_include_dirs(options.source, options.include_dirs)
    for define in options.defines:
        if not re.fullmatch(r"[A-Za-z_]\w*(?:=.*)?", define):
            raise UserError(Problem("-D", f"expected NAME or NAME=VALUE (a C identifier), got {define!r}"))
    if options.toolchain_image and grammar.image_reference(options.toolchain_image):
        raise UserError(Problem("--toolchain-image", f"expected {grammar.image_reference(options.toolchain_image)}, got {options.toolchain_image!r}"))
    if options.keep_objects:
        _check_objects_folder(options.keep_objects, options.source)
    if options.json:
        check_writable_file(options.json, "--json")
    hipcc = None
    if options.compile_check:  # before the hipify run: an image without hipcc is said at once
        runner = ImageRunner.of(options.toolchain_image) if options.toolchain_image else HOST
        hipcc = find_hipcc(runner)
        if hipcc is None and options.toolchain_image:
            raise UserError(Problem("--toolchain-image", f"{options.toolchain_image} has no hipcc (looked on its PATH and in /opt/rocm/bin)"))
    source = options.source
    out = options.out or source.resolve().parent / f"{source.resolve().name}-hip"
    check_folders(source, out)  # before setup.py is read: an unreadable tree is one message
    arch = arch or default_offload_arch(hipcc, known)
    project = _project_flags(options)
    build = read_extension_build(arch, extension_name(str(source.resolve())))
    macros = build_macros(hipcc if options.compile_check else None, build, project, arch)
    report = run_hipify(source, out, macros)
    report.build_flags = project.described()  # what setup.py gave the macros, and what of it was not read or not used
    if options.compile_check:
        report = compile_check(
            report, arch, known, hipcc, build, project, options.include_dirs, options.keep_objects.resolve() if options.keep_objects else None
        )
    if options.json:
        document = asdict(report) | {"passed": report.passed, "failures": report.failures}
        write_atomic(options.json, (json.dumps(document, indent=2) + "\n").encode("utf-8"), "--json")
    return report


def _project_flags(options: PreflightOptions) -> ProjectFlags:
    """setup.py's extensions (read, never run), their nvcc flags as torch hands them to hipcc, and the command line's."""
    setup = options.source / "setup.py"
    extensions: tuple[ExtensionFlags, ...] = ()
    notes: tuple[str, ...] = ()
    if setup.exists() or setup.is_symlink():
        try:
            tree = options.source.resolve()
            if setup.is_symlink() and tree not in setup.resolve().parents:
                raise NotReadable("is a link leading out of the source tree, which hipify reads alone")
            data = read_regular(setup, MAX_SETUP_BYTES)
        except NotReadable as error:  # a FIFO, a device, a link to nowhere, a file of 50 MB: a note, as unparsable Python is
            read = SetupFlags(problem=f"setup.py: {error.reason}; its build flags were not read")
        else:
            read = read_setup_py(data, "setup.py")
        notes = (read.problem,) if read.problem else ()
        extensions = tuple(dataclasses.replace(e, nvcc_flags=hipify_nvcc_flags(e.nvcc_flags)) for e in read.extensions)
    return ProjectFlags(extensions, tuple(f"-D{define}" for define in options.defines), options.hipcc_flags, options.cxx_flags, notes)


def _check_objects_folder(folder: Path, source: Path) -> None:
    resolved, tree = folder.resolve(), source.resolve()
    if resolved.exists() and not resolved.is_dir():
        raise UserError(Problem("--keep-objects", f"{folder} is a file, not a folder"))
    if resolved == tree or tree in resolved.parents:
        raise UserError(Problem("--keep-objects", f"{folder} is inside the source tree; keep the objects elsewhere"))


def _check_include_dirs(source: Path, include_dirs: tuple[str, ...]) -> None:
    for folder in include_dirs:
        relative = PurePosixPath(folder)
        if relative.is_absolute() or ".." in relative.parts or not (source / relative).is_dir():
            raise UserError(
                Problem(
                    "--include-dir",
                    f"{folder!r} is not a folder inside {source}: give the tree's own include folders relative to it (their hipified copies are what compiles)",
                )
            )
