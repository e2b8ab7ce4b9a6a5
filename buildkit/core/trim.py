"""Arch-trimmed ROCm images: which GPU code an image leaves out when its stack narrows the ROCm archs.

torch's ROCm wheels carry GPU code for every arch of their backend version. When a stack declares fewer
(`archs = { rocm = ["gfx942"] }`, `--gpu-arch gfx942`), the image leaves out the others' code:

- thin wheels (the backend's index offers the device code as one package per arch): only the declared
  archs' device packages are installed (core/install_plan.py), so the others' never download;
- fat wheels (torch bundles its ROCm libraries under torch/lib): the install's own RUN deletes the
  per-arch kernel and code-object files of those libraries for the undeclared archs, so no layer holds
  them. The rule is by name only, and conservative: a file goes only if its path names an undeclared
  arch and no declared one; a file naming no gfx target (a library's shared index, a fat .so) stays.

Where the per-arch files live and how they are named (each library's source, and PyTorch's wheel build):
- PyTorch .ci/manywheel/build_rocm.sh copies into the wheel, per arch of PYTORCH_ROCM_ARCH, the files of
  $ROCM_HOME/lib/{rocblas,hipblaslt,hipsparselt}/library and share/miopen/db whose names match the arch
  (`grep -E $ARCH`), plus the files naming no gfx target (`grep -v gfx`): LIBRARY_DIRS below, under torch/.
- rocBLAS library/src/tensile_host.cpp loads TensileLibrary_lazy_<processor>.dat (or
  TensileLibrary_<processor>.dat) from rocblas/library, optionally from a rocblas/library/<processor>/
  folder; Tensile/TensileCreateLibrary.py names code objects <kernels>_<arch>.co (assembly),
  Kernels.so-000-<arch>.hsaco and <name>_fallback_<arch>.hsaco (source kernels), and the per-arch
  metadata <name>_<arch>.dat next to a shared <name>_fallback.dat. Arch names may carry target-ID
  features (gfx90a-xnack-, gfx906-xnack-).
- hipBLASLt (tensilelite, same naming) adds extop_<arch>.co (tensilelite/Tensile/Ops/gen_assembly.sh)
  next to the shared hipblasltExtOpLibrary.dat and hipblasltTransform.hsaco
  (library/src/amd_detail/hipblaslt-ext-op.cpp, rocblaslt/src/rocblaslt_transform.cpp).
- MIOpen src/include/miopen/handle.hpp GetDbBasename: <arch>[_sramecc|_nosramecc][_xnack] followed by
  `_<CUs>` (64 CUs or fewer) or the CU count in hex with no separator (gfx90a6e.db, gfx942130.HIP.fdb.txt),
  and <arch>.kdb for the kernel database (src/binary_cache.cpp).
So a path names an arch when the arch appears at the start of a word, followed by the end of the word or
by two or three hex digits (MIOpen's CU count) and then the end of the word. That is unambiguous because
no known gfx target is a prefix of another (tests/unit/test_trim.py checks it for compat's list).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from buildkit.core.targets.source import SOURCE_FLAVOR

if TYPE_CHECKING:
    from buildkit.core.targets.plan import Target

# Folders under the torch package that hold per-arch files of torch's bundled ROCm libraries
LIBRARY_DIRS = ("lib/rocblas/library", "lib/hipblaslt/library", "lib/hipsparselt/library", "share/miopen/db")


def names_pattern(archs: tuple[str, ...]) -> str:
    """A regular expression that finds any of `archs` named in a file path (see the module's rule). The
    trim step (templates/_macros.Dockerfile.j2, trim_archs) deletes a file whose path under torch/ matches
    the removed archs' pattern and not the kept archs' one."""
    return "(?<![0-9A-Za-z])(" + "|".join(archs) + ")([0-9a-f]{2,3})?(?![0-9A-Za-z])"


@dataclass(frozen=True)
class Trim:
    """The archs an image leaves out, and how."""

    removed: tuple[str, ...]  # in the wheels' order
    kept: tuple[str, ...]  # the declared archs
    by_packages: bool  # thin wheels: their device packages are not installed; fat wheels: files are deleted

    @property
    def library_dirs(self) -> str:
        return " ".join(LIBRARY_DIRS)

    @property
    def removed_pattern(self) -> str:
        return names_pattern(self.removed)

    @property
    def kept_pattern(self) -> str:
        return names_pattern(self.kept)


def trim_for(target: Target) -> Trim | None:
    """None unless a ROCm wheel image declares fewer archs than its backend version's wheels carry.
    The source flavor compiles only the declared archs, so it has nothing to trim."""
    if not target.vendor_record.narrows_arch_code or target.flavor == SOURCE_FLAVOR:
        return None
    removed = tuple(arch for arch in target.wheel_archs if arch not in target.archs)
    if not removed:
        return None
    return Trim(removed, target.archs, target.thin_wheels)
