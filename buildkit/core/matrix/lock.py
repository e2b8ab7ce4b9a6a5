"""matrix.lock: what the matrix's moving references resolved to.

So builds are reproducible and change exactly when what they are built on changes.

- Base images: each reference (python:3.12-slim-bookworm, rocm/dev-ubuntu-24.04:7.2.1-complete, ...) pinned
  to the digest its tag named (the image index, or the manifest of a single-platform image). Dockerfiles
  then say `FROM ref@sha256:...`, and the digest is part of the fingerprint and a label.
- Package ranges: a stack's requirement that is not an exact `==` pin (`timm>=1.0`) is recorded with the
  version it resolves to: the newest final release on the index that satisfies it (what pip would pick for
  that requirement alone; its own dependencies are recorded in each image's SBOM, not pinned). Builds
  install it with that version as a constraint, and the version is part of the fingerprint.

`buildkit lock` (and `publish --refresh`, what the nightly runs) resolves again: an updated base or a new
release in a range changes the fingerprints of exactly the images that use it, so skip-unchanged rebuilds
those and nothing else. Without a refresh the lock holds, and two builds of the same matrix are the same.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from buildkit.core import grammar
from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet

LOCK_NAME = "matrix.lock"
SCHEMA = 1


@dataclass(frozen=True)
class Lock:
    bases: Mapping[str, str] = field(default_factory=dict)  # image reference -> sha256 digest
    packages: Mapping[str, str] = field(default_factory=dict)  # requirement as written -> resolved version

    def base_digest(self, reference: str) -> str:
        return self.bases.get(reference, "")

    def constraint(self, requirement: str) -> str:
        """`name==version` for a locked range, "" for an exact pin or a requirement the lock lacks."""
        version = self.packages.get(requirement)
        return f"{Requirement(requirement).name}=={version}" if version else ""


def is_range(requirement: str) -> bool:
    """Whether a requirement admits more than one release (anything but a single `==` without wildcards)."""
    specifiers = list(Requirement(requirement).specifier)
    return not (len(specifiers) == 1 and specifiers[0].operator in ("==", "===") and "*" not in specifiers[0].version)


def newest_matching(requirement: str, versions: list[str]) -> str | None:
    """The newest final release among `versions` that the requirement admits."""
    specifier: SpecifierSet = Requirement(requirement).specifier
    candidates = []
    for text in versions:
        try:
            version = Version(text)
        except InvalidVersion:
            continue
        if not version.is_prerelease and not version.is_devrelease and version in specifier:
            candidates.append(version)
    return str(max(candidates)) if candidates else None


def read_lock(data: Mapping[str, Any], where: str) -> Lock:
    """A parsed matrix.lock, checked as strictly as a matrix: its values reach Dockerfiles."""
    problems = []
    if data.get("schema", SCHEMA) != SCHEMA:
        problems.append(Problem(where, f"expected schema = {SCHEMA}", key="schema"))
    tables = {}
    for name, shape in (("bases", '[bases."REFERENCE"] tables'), ("packages", 'a [packages] table of "REQUIREMENT" = "VERSION"')):
        value = data.get(name) or {}
        if isinstance(value, Mapping):
            tables[name] = value
        else:  # bases = "x", packages = [1]: TOML of the wrong type
            problems.append(Problem(where, f"expected {shape}, not {_toml_type(value)}", key=name))
            tables[name] = {}
    bases: dict[str, str] = {}
    for reference, entry in tables["bases"].items():
        digest = entry.get("digest") if isinstance(entry, Mapping) else None
        if grammar.image_reference(reference) or not isinstance(digest, str) or not grammar.DIGEST_RE.fullmatch(digest):
            problems.append(Problem(where, 'expected an image reference with digest = "sha256:<64 hex>"', key=f"bases.{reference}"))
        else:
            bases[reference] = digest
    packages: dict[str, str] = {}
    for requirement, version in tables["packages"].items():
        if grammar.requirement(requirement) or not isinstance(version, str) or grammar.package_version(version):
            problems.append(Problem(where, 'expected a requirement = "version"', key=f"packages.{requirement}"))
        else:
            packages[requirement] = version
    if problems:
        raise UserError(problems)
    return Lock(bases, packages)


def _toml_type(value: object) -> str:
    return {str: "a string", list: "an array", bool: "a boolean", int: "an integer", float: "a float"}.get(type(value), "a value")


def lock_text(lock: Lock, resolved_at: str) -> str:
    """The lock file, sorted and commented so a review shows what moved."""
    lines = [
        "# Generated by `buildkit lock` (and `buildkit publish --refresh`): what this matrix's base images and",
        "# package ranges resolved to. Commit it: builds are reproducible from it, and a change here is the",
        "# reason an image rebuilds.",
        f"schema = {SCHEMA}",
        f'resolved = "{resolved_at}"',
        "",
    ]
    for reference, digest in sorted(lock.bases.items()):
        lines += [f'[bases."{reference}"]', f'digest = "{digest}"', ""]
    if lock.packages:
        lines.append("[packages]")
        lines += [f'"{requirement}" = "{version}"' for requirement, version in sorted(lock.packages.items())]
        lines.append("")
    return "\n".join(lines)
