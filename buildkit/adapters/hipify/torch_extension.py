"""What torch's own ROCm extension build passes to its compilers, read from the installed torch.

And where the ROCm-only headers an extension includes come from.

torch.utils.cpp_extension's BuildExtension compiles a ROCm extension's .hip/.cu files with hipcc and its
.cpp files with the host C++ compiler (torch 2.4-2.13, unix_wrap_single_compile):
    hipcc: COMMON_HIP_FLAGS + COMMON_HIPCC_FLAGS + user flags + _get_rocm_arch_flags() + -std=c++NN
    c++:   COMMON_HIP_FLAGS + user flags + -std=c++NN
with include_paths() (torch/include and torch/include/torch/csrc/api/include; for a ROCm torch also
torch/include/THH and ROCm's include folder), Python's headers, -DTORCH_API_INCLUDE_EXTENSION_H and
-DTORCH_EXTENSION_NAME=<name> (build_extensions, _define_torch_extension_name). The compile check reads
the flags and folders from the installed torch, so it follows whatever torch is there.

ATen/hip and c10/hip exist only in a ROCm build of torch. PyTorch's ROCm build makes them by hipifying
its CUDA sources (tools/amd_build/build_amd.py: "aten/src/ATen/cuda/*" and "c10/cuda/*", PyTorch's own
mappings, out of place into .../hip/) and writes c10/hip/impl/hip_cmake_macros.h with CMake
(c10/hip/CMakeLists.txt). Every torch wheel, CPU builds included, ships the CUDA headers those come from
(torch/include/ATen/cuda, torch/include/c10/cuda), so for a torch that is not a ROCm build the check
does the same into a scratch include tree, and says so.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import re
import shutil
import sysconfig
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType, SimpleNamespace

from buildkit.errors import Problem, UserError

# torch's BuildExtension adds these to every extension it compiles (build_extensions, torch 2.4-2.13).
_EXTENSION_DEFINES = ("-DTORCH_API_INCLUDE_EXTENSION_H",)
_STANDARD_RE = re.compile(r"'c\+\+(\d\d)'")
# The CUDA header folders of a torch wheel that PyTorch's ROCm build hipifies, and where they sit in a
# PyTorch checkout (what build_amd.py's include patterns and hipify's path rules expect).
_CUDA_HEADER_FOLDERS = {"ATen/cuda": "aten/src/ATen/cuda", "c10/cuda": "c10/cuda"}
# c10/hip/CMakeLists.txt: set(C10_HIP_BUILD_SHARED_LIBS ${BUILD_SHARED_LIBS}) and configure_file(
# impl/hip_cmake_macros.h.in ...); torch's wheels are shared-library builds.
_HIP_CMAKE_MACROS = (
    "// Written by buildkit hipify as PyTorch's ROCm CMake writes it (c10/hip/CMakeLists.txt,\n"
    "// a shared-library build, as torch's wheels are).\n#pragma once\n#define C10_HIP_BUILD_SHARED_LIBS\n"
)


@dataclass(frozen=True)
class ExtensionBuild:
    """torch's ROCm extension build, as the installed torch does it."""

    torch: str  # torch.__version__, e.g. 2.13.0+cpu
    hip: str | None  # torch.version.hip: set for a ROCm build
    include_dirs: tuple[Path, ...]  # torch's own
    python_include_dirs: tuple[Path, ...]
    every_file_flags: tuple[str, ...]  # COMMON_HIP_FLAGS, the extension defines and -std
    hipcc_flags: tuple[str, ...]  # COMMON_HIPCC_FLAGS
    arch_flags: tuple[str, ...]  # what _get_rocm_arch_flags adds to an explicit --offload-arch (-fno-gpu-rdc)

    @property
    def torch_include(self) -> Path:
        return self.include_dirs[0]


def _cpp_extension() -> tuple[ModuleType, ModuleType]:
    """torch and torch.utils.cpp_extension (torch is an optional dependency: its modules, seen untyped)."""
    try:
        # torch's import warns about optional modules, and cpp_extension logs where it looked for CUDA and ROCm
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            import torch
            from torch.utils import cpp_extension
    except ImportError as error:
        raise UserError(
            Problem(
                "--compile-check",
                f"needs torch.utils.cpp_extension, which could not be imported ({error}); pip install setuptools (cpp_extension imports it) and torch",
            )
        ) from None
    return torch, cpp_extension


def read_extension_build(arch: str, extension_name: str) -> ExtensionBuild:
    torch, cpp_extension = _cpp_extension()
    include_dirs = [Path(p) for p in cpp_extension.include_paths()]
    if torch.version.hip and (include_dirs[0] / "THH").is_dir():  # include_paths("cuda") adds it for ROCm torch
        include_dirs.append(include_dirs[0] / "THH")
    # BuildExtension appends -std=c++NN when the user gave none; the number lives in its code only.
    standard = max(_STANDARD_RE.findall(inspect.getsource(cpp_extension.BuildExtension.build_extensions)), default="17")
    return ExtensionBuild(
        torch=str(torch.__version__),
        hip=torch.version.hip,
        include_dirs=tuple(include_dirs),
        python_include_dirs=python_include_dirs(),
        every_file_flags=(*cpp_extension.COMMON_HIP_FLAGS, *_EXTENSION_DEFINES, f"-DTORCH_EXTENSION_NAME={extension_name}", f"-std=c++{standard}"),
        hipcc_flags=tuple(cpp_extension.COMMON_HIPCC_FLAGS),
        arch_flags=tuple(cpp_extension._get_rocm_arch_flags([f"--offload-arch={arch}"])),
    )


def python_include_dirs() -> tuple[Path, ...]:
    """Python's headers, and on Debian the multiarch folder its pyconfig.h includes from."""
    paths = sysconfig.get_paths()
    found = [Path(paths["include"]), Path(paths["platinclude"])]
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch:
        found.append(Path("/usr/include") / multiarch / Path(paths["include"]).name)
    return tuple(dict.fromkeys(path for path in found if path.is_dir()))


@dataclass(frozen=True)
class RocmHeaders:
    include_dirs: tuple[Path, ...]
    origin: str  # which way they were had, for the report


def rocm_headers(build: ExtensionBuild, hipify_python: ModuleType, scratch: Path) -> RocmHeaders:
    """ATen/hip and c10/hip: the ROCm torch's own, or made from this torch's CUDA headers in `scratch`."""
    if build.hip:
        return RocmHeaders((), f"torch {build.torch}'s own ATen/hip and c10/hip (a ROCm build, HIP {build.hip})")
    tree = scratch / "rocm-headers"
    for installed, checkout in _CUDA_HEADER_FOLDERS.items():
        source = build.torch_include / installed
        if not source.is_dir():
            raise UserError(
                Problem(
                    "--compile-check",
                    f"torch {build.torch} has no {installed} headers in {build.torch_include}, "
                    "so its ROCm headers cannot be made; install a torch wheel from PyTorch's index",
                )
            )
        shutil.copytree(source, tree / checkout)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        hipify_python.HIPIFY_FINAL_RESULT.clear()  # module-level results of earlier calls
        hipify_python.hipify(
            project_directory=str(tree),
            output_directory=str(tree),
            includes=[str(tree / f"{c}/*") for c in _CUDA_HEADER_FOLDERS.values()],
            ignores=[str(tree / "*/hip/*")],
            extensions=(".h", ".cuh", ".hpp"),
            show_progress=False,
            is_pytorch_extension=False,
        )
    macros = tree / "c10" / "hip" / "impl" / "hip_cmake_macros.h"
    macros.parent.mkdir(parents=True, exist_ok=True)
    macros.write_text(_HIP_CMAKE_MACROS, encoding="utf-8")
    return RocmHeaders(
        (tree / "aten" / "src", tree),
        f"torch {build.torch} is not a ROCm build: its CUDA headers (ATen/cuda, c10/cuda) hipified into ATen/hip and c10/hip "
        "as PyTorch's ROCm build makes them (tools/amd_build/build_amd.py), in a scratch include tree",
    )


def hipify_nvcc_flags(flags: tuple[str, ...]) -> tuple[str, ...]:
    """An extension's extra_compile_args["nvcc"] as torch's ROCm build hands them to hipcc: its own rule
    (BuildExtension._hipify_compile_flags: the first CUDA in a -flag becomes HIP, so -DWITH_CUDA reaches hipcc
    as -DWITH_HIP), called on a stand-in extension, since the method reads nothing else."""
    _, cpp_extension = _cpp_extension()
    extension = SimpleNamespace(extra_compile_args={"nvcc": list(flags)})
    with contextlib.redirect_stderr(io.StringIO()):
        cpp_extension.BuildExtension._hipify_compile_flags(None, extension)
    return tuple(extension.extra_compile_args["nvcc"])
