"""AMD's gfx targets and their packaging hierarchy, as AMD's own rocm-bootstrap package defines them.

rocm-bootstrap (PyPI, MIT, pure Python, no ROCm needed) holds the canonical target table and a three-level
hierarchy: target -> sub-family -> family (gfx1151 -> gfx115x "RDNA3.5" -> gfx11; gfx942 -> gfx9_4 "MI300"
-> gfx9). AMD names its device packages from it (`device_dist_name("amd-torch-device", gfx12_5)` ->
amd-torch-device-gfx12-5) and its WheelNext variant plugin (namespace `amd`, feature `gfx_arch`) reports
each target's package owner (gfx1250-strict is owned by gfx1250). buildkit keeps no copy: this module reads
rocm-bootstrap's public collections (ALL_TARGETS, ALL_SUB_FAMILIES, ALL_FAMILIES) each time the compatibility
data is loaded, so a newer rocm-bootstrap (or a test that changes its table) is what buildkit knows.

Pure: the package is data and naming rules; nothing here detects anything (adapters/host.py reads the host).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rocm_bootstrap import naming
from rocm_bootstrap import targets as amd
from rocm_bootstrap.package_metadata import group_package_targets

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

# rocm_bootstrap.PackagingLevel's values, finest first: how buildkit's data names a level (a layout's device
# packages are cut at one of them)
TARGET, SUB_FAMILY, FAMILY = (level.value for level in (amd.PackagingLevel.TARGET, amd.PackagingLevel.SUB_FAMILY, amd.PackagingLevel.FAMILY))
LEVELS = (TARGET, SUB_FAMILY, FAMILY)
# The WheelNext variant feature AMD's plugin (rocm_bootstrap.variant_provider.AMDVariantPlugin) reports: a
# property `amd :: gfx_arch :: <package owner>` per target (PEP 825's namespace :: feature :: value)
VARIANT_NAMESPACE, VARIANT_FEATURE = "amd", "gfx_arch"


@dataclass(frozen=True)
class Bundle:
    """A group of targets at one level of AMD's packaging hierarchy (rocm_bootstrap.TargetBundle)."""

    key: str  # gfx9_4, gfx115x, gfx12, gfx942
    level: str  # target | sub_family | family
    display_name: str  # MI300, RDNA3.5 (rocm-bootstrap's label)
    members: tuple[str, ...]  # its gfx targets, in rocm-bootstrap's order
    source: amd.TargetBundle

    def device_name(self, prefix: str) -> str:
        """AMD's name of this bundle's device package with `prefix` (amd-torch-device -> amd-torch-device-gfx9-4)."""
        name: str = naming.device_dist_name(prefix, self.source)  # rocm_bootstrap has no py.typed: mypy sees its annotated API as Any
        return name


@dataclass(frozen=True)
class AmdTargets:
    """rocm-bootstrap's table as buildkit reads it: the targets, every bundle by key, and each target's chain."""

    targets: tuple[str, ...]
    bundles: Mapping[str, Bundle]
    chains: Mapping[str, tuple[str, str, str]]  # target -> (its target bundle, sub-family, family) keys

    def chain(self, gfx: str) -> tuple[Bundle, ...]:
        """(target bundle, sub-family, family) of a target; () for a name rocm-bootstrap does not know."""
        return tuple(self.bundles[key] for key in self.chains.get(gfx, ()))

    def bundle_at(self, gfx: str, level: str) -> Bundle | None:
        chain = self.chain(gfx)
        return chain[LEVELS.index(level)] if chain else None

    def of_level(self, level: str) -> tuple[Bundle, ...]:
        return tuple(bundle for bundle in self.bundles.values() if bundle.level == level)

    def covering(self, archs: Iterable[str]) -> Bundle | None:
        """The finest bundle that holds every one of `archs` (gfx942 -> gfx942; gfx1100, gfx1101 -> gfx110x;
        gfx1150, gfx1151 -> gfx115x; gfx942, gfx1100 -> none)."""
        archs = tuple(archs)
        chains = [self.chain(gfx) for gfx in archs]
        if not archs or not all(chains):
            return None
        for level in range(len(LEVELS)):
            keys = {chain[level].key for chain in chains}
            if len(keys) == 1:
                return self.bundles[keys.pop()]
        return None

    def variant_values(self, archs: Iterable[str]) -> tuple[str, ...]:
        """The `gfx_arch` values AMD's variant plugin reports for these targets: their package owners."""
        return tuple(group_package_targets(gfx for gfx in archs if gfx in self.chains))

    def describe(self, gfx: str) -> str:
        """gfx942 [gfx9_4 MI300, gfx9]: a target beside its sub-family and family, as rocm-bootstrap-detect prints them."""
        chain = self.chain(gfx)
        if not chain:
            return gfx
        return f"{gfx} [{chain[1].key} {chain[1].display_name}, {chain[2].key}]"


def _bundle(source: amd.TargetBundle, level: str) -> Bundle:
    return Bundle(source.key, level, source.display_name, tuple(target.name for target in source.members), source)


def amd_targets() -> AmdTargets:
    """rocm-bootstrap's table now (read from its public collections, not its import-time lookups)."""
    names = tuple(target.name for target in amd.ALL_TARGETS)
    bundles: dict[str, Bundle] = {}
    sub_family_of: dict[str, str] = {}
    family_of: dict[str, str] = {}
    for level, group, found in ((SUB_FAMILY, amd.ALL_SUB_FAMILIES, sub_family_of), (FAMILY, amd.ALL_FAMILIES, family_of)):
        for source in group:
            bundles[source.key] = _bundle(source, level)
            found.update((target.name, source.key) for target in source.members)
    owners = group_package_targets(names)
    by_name = {target.name: target for target in amd.ALL_TARGETS}
    owner_of: dict[str, str] = {}
    for owner, members in owners.items():
        bundles.setdefault(
            owner,
            Bundle(
                owner,
                TARGET,
                owner,
                tuple(members),
                amd.TargetBundle(
                    key=owner, level=amd.PackagingLevel.TARGET, display_name=owner, llvm_generic=None, members=tuple(by_name[name] for name in members)
                ),
            ),
        )
        owner_of.update((name, owner) for name in members)
    chains = {name: (owner_of[name], sub_family_of[name], family_of[name]) for name in names if name in sub_family_of and name in family_of}
    return AmdTargets(names, bundles, chains)
