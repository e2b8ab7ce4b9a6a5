"""TEST DOUBLES for torch builds: tiny wheels that stand in for torch's CUDA and ROCm wheels.

No ROCm wheel can be had on this machine (and a real CUDA torch is 5 GB), so pair tests install these.
They carry what the smoke test and the build read: `torch.__version__` with its local tag and
`torch.version.cuda` / `torch.version.hip`, plus a `torch.cuda` that reports no GPU.
"""

from __future__ import annotations

import base64
import hashlib
import random
import zipfile
from typing import TYPE_CHECKING

from testkit.artifacts import torch_version_module
from testkit.elf import arch_flags_library

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from pathlib import Path

TORCH_DOUBLE = '''"""TEST DOUBLE of torch ({local}); not PyTorch."""
from . import version, cuda  # noqa: F401
__version__ = "{version}"
BUILDKIT_TEST_DOUBLE = True
'''
VERSION_DOUBLE = """__version__ = "{version}"
cuda = {cuda!r}
hip = {hip!r}
git_version = "test-double"
"""
CUDA_DOUBLE = '''"""TEST DOUBLE of torch.cuda: no GPU. Its compiled arch list is the one of the machine it runs
on: PyTorch builds its x86_64 and aarch64 wheels for different GPUs."""
import platform as _platform
_ARCHS = {archs!r}
def is_available():
    return False
def device_count():
    return 0
def get_arch_list():
    return list(_ARCHS.get(_platform.machine(), ()))
'''


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(
    folder: Path,
    name: str,
    version: str,
    files: Mapping[str, str | bytes],
    requires: Sequence[str] = (),
    provides_extras: Sequence[str] = (),
    tag: str = "py3-none-any",
    requires_python: str = "",
) -> Path:
    """A valid wheel with the given files (large ones stored: deflating random bytes gains nothing), py3-none-any
    unless `tag` names another (cp311-cp311-linux_x86_64: one built for one Python)."""
    distribution = name.replace("-", "_")
    dist_info = f"{distribution}-{version}.dist-info"
    metadata = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + (f"Requires-Python: {requires_python}\n" if requires_python else "")
        + "".join(f"Provides-Extra: {e}\n" for e in provides_extras)
        + "".join(f"Requires-Dist: {r}\n" for r in requires)
    )
    contents = {
        **{path: data.encode() if isinstance(data, str) else data for path, data in files.items()},
        f"{dist_info}/METADATA": metadata.encode(),
        f"{dist_info}/WHEEL": (f"Wheel-Version: 1.0\nGenerator: buildkit-tests\nRoot-Is-Purelib: {str(tag.endswith('-any')).lower()}\nTag: {tag}\n").encode(),
    }
    record = [_record_line(path, data) for path, data in contents.items()] + [f"{dist_info}/RECORD,,"]
    contents[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{distribution}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in contents.items():
            archive.writestr(member, data, zipfile.ZIP_STORED if len(data) > 1 << 20 else zipfile.ZIP_DEFLATED)
    return path


def torch_double(
    folder: Path, torch: str, local: str, cuda: str | None, hip: str | None, archs: list[str] | dict[str, list[str]], requires: Sequence[str] = ()
) -> Path:
    """`archs`: the compiled arch list, or one per machine (platform.machine(): x86_64, aarch64); `requires`:
    the double's own dependencies."""
    version = f"{torch}+{local}" if local else torch
    per_machine = archs if isinstance(archs, dict) else {"x86_64": list(archs), "aarch64": list(archs)}
    return build_wheel(
        folder,
        "torch",
        version,
        {
            "torch/__init__.py": TORCH_DOUBLE.format(local=local or "cpu", version=version),
            "torch/version.py": VERSION_DOUBLE.format(version=version, cuda=cuda, hip=hip),
            "torch/cuda/__init__.py": CUDA_DOUBLE.format(archs=per_machine),
        },
        requires=requires,
    )


def published_torch(
    folder: Path,
    release: str,
    local: str,
    build: str,
    python: str,
    machine: str,
    *,
    requires_python: str,
    requires: list[str],
    table: str = "",
    flags: str = "",
) -> Path:
    """TEST DOUBLE of one torch wheel as a release publishes it, for compat check to read: METADATA (Requires-Python,
    the build's requirements), torch/version.py naming the build (PyPI's names none in its file name: `local` ""),
    torch/cuda/__init__.py holding the release's own arch table (`table`: the assignment's text) and a
    libtorch_python.so whose .rodata holds the build's arch flags. `machine`: x86_64 or aarch64."""
    cp = "cp" + python.replace(".", "")
    version = f"{release}+{local}" if local else release
    files: dict[str, str | bytes] = {
        "torch/__init__.py": TORCH_DOUBLE.format(local=build, version=f"{release}+{build}"),
        "torch/version.py": torch_version_module(release, build),
        "torch/cuda/__init__.py": f'"""TEST DOUBLE of torch.cuda: its arch table only."""\n{table}',
    }
    if flags:
        files["torch/lib/libtorch_python.so"] = arch_flags_library(flags)
    return build_wheel(folder, "torch", version, files, requires=requires, tag=f"{cp}-{cp}-manylinux_2_28_{machine}", requires_python=requires_python)


def companion_double(folder: Path, name: str, version: str, local: str, torch: str) -> Path:
    module = name.replace("-", "_")
    full = f"{version}+{local}" if local else version
    return build_wheel(
        folder,
        name,
        full,
        {f"{module}/__init__.py": f'"""TEST DOUBLE of {name}."""\n__version__ = "{full}"\n'},
        requires=[f"torch=={torch}"],
    )


# --- A ROCm torch whose torch/lib carries ROCm libraries laid out like the real wheel's ---------------------
# The layout and the file names follow what PyTorch's .ci/manywheel/build_rocm.sh bundles and how each library
# names its files (sources in buildkit/core/trim.py): per arch, rocBLAS and hipBLASLt kernels and code objects
# (Tensile's Kernels.so-000-<arch>.hsaco, <kernels>_<arch>.co, <name>_<arch>.dat, TensileLibrary_lazy_<arch>.dat,
# hipBLASLt's extop_<arch>.co) and MIOpen's databases (<arch><CUs>.db, <arch>.kdb); shared, with no arch in
# their names, the libraries' own .so files and indexes. gfx90a's rocBLAS kernels come in its two target-ID
# variants (gfx90a-xnack-, gfx90a-xnack+) as in ROCm's builds. Sizes: each arch gets `weight x unit` bytes
# spread over its files (datacenter archs weigh 3, as their tuned hipBLASLt kernels dominate the real
# libraries), and the shared files `shared` bytes: the per-arch files dominate, as device code does in the
# real wheels (docs/benchmarks.md compares the proportions). Every byte is pseudo-random (incompressible),
# so a layer's size is honest.

ROCM_CUDA_DOUBLE = '''"""TEST DOUBLE of torch.cuda: no GPU. The compiled arch list is derived, at import, from the
per-arch files left on disk: an arch counts while rocBLAS and hipBLASLt both still hold its kernel index
(TensileLibrary_lazy_<arch>.dat), so an image trimmed of an arch it declares fails the smoke test's arch check."""
import os as _os

_LIB = _os.path.join(_os.path.dirname(_os.path.dirname(__file__)), "lib")


def _archs(library):
    folder = _os.path.join(_LIB, library, "library")
    names = _os.listdir(folder) if _os.path.isdir(folder) else []
    prefix, suffix = "TensileLibrary_lazy_", ".dat"
    return {n[len(prefix):-len(suffix)] for n in names if n.startswith(prefix) and n.endswith(suffix)}


_ARCHS = sorted(_archs("rocblas") & _archs("hipblaslt"), key=lambda arch: (len(arch), arch))


def is_available():
    return False


def device_count():
    return 0


def get_arch_list():
    return list(_ARCHS)
'''

# Datacenter parts: the largest per-arch libraries (hipBLASLt's tuned kernels are mostly for these)
DATACENTER_ARCHS = ("gfx90a", "gfx942", "gfx950")
# A compute-unit count per arch, for MIOpen's database names (one representative part each)
MIOPEN_CUS = {
    "gfx900": 64,
    "gfx906": 60,
    "gfx908": 120,
    "gfx90a": 110,
    "gfx942": 304,
    "gfx950": 256,
    "gfx1030": 36,
    "gfx1100": 96,
    "gfx1101": 60,
    "gfx1102": 32,
    "gfx1103": 12,
    "gfx1150": 16,
    "gfx1151": 40,
    "gfx1200": 32,
    "gfx1201": 64,
}
ROCBLAS = "torch/lib/rocblas/library"
HIPBLASLT = "torch/lib/hipblaslt/library"
MIOPEN_DB = "torch/share/miopen/db"
# (path pattern, share of the arch's bytes); {arch} is the gfx target, {db} MIOpen's database base name
PER_ARCH_FILES = (
    (f"{ROCBLAS}/Kernels.so-000-{{arch}}.hsaco", 0.10),
    (f"{ROCBLAS}/TensileLibrary_lazy_{{arch}}.dat", 0.01),
    (f"{ROCBLAS}/TensileLibrary_Type_HH_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_{{arch}}.co", 0.15),
    (f"{ROCBLAS}/TensileLibrary_Type_HH_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_{{arch}}.dat", 0.04),
    (f"{ROCBLAS}/TensileLibrary_Type_SS_Contraction_l_Ailk_Bjlk_Cijk_Dijk_{{arch}}.co", 0.10),
    (f"{ROCBLAS}/TensileLibrary_Type_SS_Contraction_l_Ailk_Bjlk_Cijk_Dijk_{{arch}}.dat", 0.03),
    (f"{ROCBLAS}/TensileLibrary_Type_BB_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_fallback_{{arch}}.hsaco", 0.02),
    (f"{HIPBLASLT}/Kernels.so-000-{{arch}}.hsaco", 0.08),
    (f"{HIPBLASLT}/extop_{{arch}}.co", 0.01),
    (f"{HIPBLASLT}/TensileLibrary_lazy_{{arch}}.dat", 0.01),
    (f"{HIPBLASLT}/TensileLibrary_HH_HH_HA_Bias_SAV_Type_HH_HPA_Contraction_l_Alik_Bjlk_Cijk_Dijk_{{arch}}.co", 0.25),
    (f"{HIPBLASLT}/TensileLibrary_HH_HH_HA_Bias_SAV_Type_HH_HPA_Contraction_l_Alik_Bjlk_Cijk_Dijk_{{arch}}.dat", 0.10),
    (f"{MIOPEN_DB}/{{db}}.db", 0.05),
    (f"{MIOPEN_DB}/{{db}}.HIP.fdb.txt", 0.03),
    (f"{MIOPEN_DB}/{{arch}}.kdb", 0.02),
)
# (path, share of the shared bytes): no gfx target in their names
SHARED_FILES = (
    ("torch/lib/libtorch_hip.so", 0.40),
    ("torch/lib/librocblas.so", 0.15),
    ("torch/lib/libhipblaslt.so", 0.10),
    ("torch/lib/libMIOpen.so", 0.15),
    ("torch/lib/libamdhip64.so", 0.05),
    (f"{ROCBLAS}/TensileLibrary_Type_BB_HPA_Contraction_l_Ailk_Bjlk_Cijk_Dijk_fallback.dat", 0.02),
    (f"{HIPBLASLT}/hipblasltExtOpLibrary.dat", 0.01),
    (f"{HIPBLASLT}/hipblasltTransform.hsaco", 0.12),
)


def miopen_db_name(arch: str, cus: int) -> str:
    """MIOpen's Handle::GetDbBasename: `_<CUs>` up to 64 CUs, else the count in hex with no separator."""
    return f"{arch}_{cus}" if cus <= 64 else f"{arch}{cus:x}"


def rocm_library_layout(archs: list[str], unit: int, shared: int) -> dict[str, int]:
    """Path -> size of the double's bundled ROCm library files."""
    layout = {path: round(shared * share) for path, share in SHARED_FILES}
    for arch in archs:
        size = unit * (3 if arch in DATACENTER_ARCHS else 1)
        for pattern, share in PER_ARCH_FILES:
            path = pattern.format(arch=arch, db=miopen_db_name(arch, MIOPEN_CUS.get(arch, 64)))
            if arch == "gfx90a" and "Kernels.so-000" in path and path.startswith(ROCBLAS):
                for variant in ("gfx90a-xnack-", "gfx90a-xnack+"):  # rocBLAS builds both target-ID features
                    layout[path.replace("gfx90a", variant)] = round(size * share / 2)
            else:
                layout[path] = round(size * share)
    return layout


def rocm_torch_double(folder: Path, torch: str, local: str, hip: str, archs: list[str], unit: int = 4 << 20, shared: int = 9 << 20) -> Path:
    """A ROCm torch double whose torch/lib and torch/share hold per-arch library files for `archs`."""
    version = f"{torch}+{local}"
    noise = random.Random(f"{version} {archs}")  # the same wheel on every run
    files: dict[str, str | bytes] = {path: noise.randbytes(size) for path, size in rocm_library_layout(archs, unit, shared).items()}
    files |= {
        "torch/__init__.py": TORCH_DOUBLE.format(local=local, version=version),
        "torch/version.py": VERSION_DOUBLE.format(version=version, cuda=None, hip=hip),
        "torch/cuda/__init__.py": ROCM_CUDA_DOUBLE,
    }
    return build_wheel(folder, "torch", version, files)
