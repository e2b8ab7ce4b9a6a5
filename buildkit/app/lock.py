"""`buildkit lock` (and `publish --refresh`): matrix.lock written anew.

The matrix's base images and package ranges resolved again, and matrix.lock written beside the matrix. See
buildkit.core.matrix.lock for what is locked and why."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from packaging.requirements import Requirement

from buildkit.adapters.build_stamp import created_now
from buildkit.adapters.files.matrix import load_matrix, lock_path, read_matrix_lock
from buildkit.adapters.files.outputs import write_atomic
from buildkit.adapters.index.wheel_index import WheelIndex, default_package_index
from buildkit.adapters.registry.client import Registry, load_credentials
from buildkit.core.matrix.lock import Lock, is_range, lock_text, newest_matching
from buildkit.core.reference import ImageReference
from buildkit.core.targets.plan import expand
from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from pathlib import Path

DOCKER_HUB = "registry-1.docker.io"  # where docker sends names without a registry


@dataclass(frozen=True)
class LockReport:
    path: Path
    lock: Lock
    changed_bases: tuple[str, ...]  # references whose digest differs from the previous lock
    changed_packages: tuple[str, ...]


def _hub(reference: ImageReference) -> tuple[str, str]:
    """(registry host, repository) as a registry sees them: Docker Hub's official images live under library/."""
    if reference.registry:
        return reference.registry, reference.repository
    repository = reference.repository if "/" in reference.repository else f"library/{reference.repository}"
    return DOCKER_HUB, repository


def resolve_base(reference_text: str, registries: dict[str, Registry], insecure: bool = False) -> str:
    """The digest a base reference names now; `registries` holds one client per host (one session, one
    token, credentials read once) for the whole lock."""
    reference = ImageReference.parse(reference_text)
    if reference is None:
        raise UserError(Problem(reference_text, "not an image reference"))
    if reference.digest:
        return reference.digest
    host, repository = _hub(reference)
    if host not in registries:
        registries[host] = Registry(host, load_credentials(host), insecure=True if insecure else None)
    return registries[host].resolve_digest(repository, reference.tag or "latest").digest


def lock_matrix(matrix_path: Path | None, package_index: str | None = None, insecure: bool = False) -> LockReport:
    """Resolve every base image and package range of the whole matrix (not a selection: the lock is the
    matrix's) and write matrix.lock beside it; the report says what moved since the previous lock.

    The bundled matrix (`matrix_path` None) has no lock: its folder is the installed package, which is not
    the user's to write and which every other user of that installation reads."""
    if matrix_path is None:
        raise UserError(
            Problem(
                "matrix.lock",
                "the matrix bundled with buildkit has no lock: matrix.lock is written beside "
                "the matrix it locks, and the bundled one lives inside the installed package. "
                'Lock your own matrix: a matrix.toml with `extends = "default"` in this folder, '
                "or --matrix FILE",
            )
        )
    matrix = load_matrix(matrix_path, use_lock=False)
    targets = expand(matrix).targets
    references = sorted({t.base_image for t in targets} | {t.builder_image for t in targets if t.builder_image})
    registries: dict[str, Registry] = {}
    bases = {reference: resolve_base(reference, registries, insecure) for reference in references}
    index = WheelIndex(package_index or default_package_index())
    packages = {}
    for requirement in sorted({package for stack in matrix.stacks for package in stack.packages if is_range(package)}):
        version = newest_matching(requirement, index.project_versions(Requirement(requirement).name))
        if version is None:
            raise UserError(Problem(requirement, f"no release on {index.shown} satisfies it; widen the range or check the index"))
        packages[requirement] = version
    previous = read_matrix_lock(matrix_path)
    lock = Lock(bases, packages)
    path = lock_path(matrix_path)
    write_atomic(path, lock_text(lock, created_now()).encode(), "matrix.lock")
    return LockReport(
        path,
        lock,
        tuple(r for r in bases if previous.bases.get(r) != bases[r]),
        tuple(p for p in packages if previous.packages.get(p) != packages[p]),
    )
