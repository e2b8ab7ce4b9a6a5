"""Targets: the matrix expanded into one image each, with tags, pair keys and labels.

A target is one (vendor, backend version, torch, python, flavor). The CUDA and ROCm twins of a pair are the
targets of one (torch, python, flavor) whose backend versions the stack names in `pair` (by default the
newest confirmed of each); they share a `pair` key and the floating tags move for them together.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from buildkit.core import grammar
from buildkit.core.bases import base_environment
from buildkit.core.compat.amd_targets import VARIANT_FEATURE, VARIANT_NAMESPACE
from buildkit.core.compat.facts import AMD64, ARM64, Compat, DeviceCode, RocmLayout
from buildkit.core.matrix.fields import Rule, apply_rules
from buildkit.core.matrix.resolve import Matrix, Stack, User, first_problems
from buildkit.core.targets.source import SOURCE_FLAVOR
from buildkit.core.vendors import BACKENDS, VENDORS, Vendor, of_backend
from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from _typeshed import DataclassInstance  # what mypy knows a dataclass by: it lives in typeshed's stubs only

ALL_VENDORS = "all"  # --vendor all: no vendor criterion
# Flavors whose base is the vendor's devel image; every other flavor starts from the slim runtime base.
DEVEL_BASED_FLAVORS = ("devel",)
# Flavors built with the vendor's devel image and its OS Python (devel itself, and the source build's builder)
OS_PYTHON_FLAVORS = ("devel", SOURCE_FLAVOR)


@dataclass(frozen=True)
class Twin:
    """The other vendor's image of a target's pair, as the target's own image names it (the GPU guard)."""

    vendor: str
    reference: str  # its immutable tag
    archs: tuple[str, ...]  # only when the target has several twins of that vendor, to choose among them
    # with archs: the twin's bundle of AMD's hierarchy and that bundle's family (gfx9_4, gfx9), for the guard to name
    bundle: str = ""
    bundle_family: str = ""


Record = TypeVar("Record", bound="DataclassInstance")


def _fields_at_once(record: type[Record]) -> type[Record]:
    """The frozen dataclass's __init__ with the same arguments and defaults, setting the record's dictionary at once.

    A frozen dataclass's own __init__ sets each field with object.__setattr__: for a Target's 45 fields, most of the
    time of expanding 100,000 targets. mypy checks every call against the dataclass's signature, which this keeps
    (tests/unit/test_matrix_scale.py compares the two); the record has no __post_init__ and no default factory."""
    fields = dataclasses.fields(record)
    assert not hasattr(record, "__post_init__") and all(f.init and f.default_factory is dataclasses.MISSING for f in fields)
    defaults = {f"_default_{f.name}": f.default for f in fields if f.default is not dataclasses.MISSING}
    arguments = ", ".join(f"{f.name}=_default_{f.name}" if f"_default_{f.name}" in defaults else f.name for f in fields)
    values = ", ".join(f"{f.name!r}: {f.name}" for f in fields)
    namespace: dict[str, Any] = {}
    exec(f"def __init__(self, {arguments}):\n    _set(self, '__dict__', {{{values}}})\n", {"_set": object.__setattr__, **defaults}, namespace)
    namespace["__init__"].__qualname__ = f"{record.__qualname__}.__init__"
    setattr(record, "__init__", namespace["__init__"])  # noqa: B010 (mypy refuses assigning a method)
    return record


@_fields_at_once
@dataclass(frozen=True)
class Target:
    id: str
    vendor: str
    backend: str
    backend_version: str
    torch: str
    python: str
    flavor: str
    pair: str | None  # shared by the CUDA and ROCm twins; None when this target is not a twin or lacks one
    base_image: str
    index_url: str
    archs: tuple[str, ...]
    companions: tuple[str, ...]  # exact requirements, built for the same backend as torch
    packages: tuple[str, ...]
    os_packages: tuple[str, ...]
    channel: str
    user: User | None
    registry: str
    repository: str
    tag_names: tuple[str, ...]  # the immutable tag first, then floating aliases
    unconfirmed: tuple[str, ...]
    thin_wheels: bool
    # Where the wheels exist (compat data) and what this build produces: an image index with one image per
    # platform; linux/amd64 unless --platform asks for more. arm64 CUDA wheels have an arch list of their own.
    supported_platforms: tuple[str, ...] = (AMD64,)
    platforms: tuple[str, ...] = (AMD64,)
    arm64_archs: tuple[str, ...] = ()
    compile: bool = True  # a C/C++ toolchain and the Python headers in the image, so torch.compile works
    installer: str = "uv"  # what installs torch and the stack's packages in the image: uv (pinned) or pip
    uv: str = ""  # the uv release the image installs (compat [installers]) when installer is uv
    compression: str = "zstd"  # how the image's layers are compressed (zstd; gzip for older engines)
    base_digest: str = ""  # matrix.lock's digest of base_image ("": not locked)
    builder_digest: str = ""  # matrix.lock's digest of builder_image
    locked_packages: tuple[str, ...] = ()  # name==version the lock resolved each of the stack's ranges to
    channel_date: str = ""  # nightly channel: the day's wheels, so each day is a new image
    builder_image: str = ""  # source flavor: the ROCm devel image torch is compiled in
    source_checkout: bool = False  # source flavor: compile the build context (a local checkout), not a git clone
    max_jobs: int = 0  # source flavor: compile jobs; 0 derives them from the builder's memory and cores
    wheel_archs: tuple[str, ...] = ()  # what the backend version's wheels carry; `archs` may narrow it (core/trim.py)
    twins: tuple[Twin, ...] = ()  # the pair's images of the other vendor (one per ROCm family image for a CUDA target)
    family: str = ""  # a ROCm family image (mi300, or a bundle: gfx9_4): it carries the device code of its `archs` only
    bundle: str = ""  # a family image's bundle of AMD's hierarchy: the one it names, or the finest holding its archs
    layout: str = ""  # thin ROCm wheels: the [rocm_layouts] entry of its index
    layers: tuple[str, ...] = ()  # torch's large dependencies, each in a layer of its own
    max_layer_size: int = 10 * 10**9  # bytes: no layer of the image may be larger
    local_version: str = ""  # torch's local version on its index ("": the backend's own, cu130 or rocm7.2)
    # thin ROCm wheels: per bundle of the layout's levels, the distributions of torch's and the companions' device code
    device_code: tuple[DeviceCode, ...] = ()
    # thin ROCm wheels: the `gfx_arch` values AMD's WheelNext variant plugin reports for the image's archs
    gfx_arch_variant: tuple[str, ...] = ()
    # the major.minor torch.version.hip/cuda reports, where it is not backend_version (ROCm 10.0's torch: HIP 7.15)
    backend_runtime: str = ""

    @property
    def reported_backend_version(self) -> str:
        """The CUDA or HIP version (major.minor) torch reports in this image: what its install step checks."""
        return self.backend_runtime or self.backend_version

    @cached_property  # kept: templates and labels read it for every render
    def device_packages(self) -> tuple[str, ...]:
        return _device_packages(self.device_code)

    @property
    def companion_device_packages(self) -> dict[str, list[str]]:
        """companion -> the distributions of its device code the image carries (torchvision's amd-torchvision-device-*)."""
        found: dict[str, list[str]] = {}
        for code in self.device_code:
            if code.owner != "torch":
                found.setdefault(code.owner, []).extend(code.packages)
        return found

    @property
    def wheel_variant(self) -> tuple[str, ...]:
        """The image's WheelNext variant properties (PEP 825): amd :: gfx_arch :: gfx942, one per package owner."""
        return tuple(f"{VARIANT_NAMESPACE} :: {VARIANT_FEATURE} :: {value}" for value in self.gfx_arch_variant)

    @property
    def tags(self) -> tuple[str, ...]:
        return tuple(f"{self.image_name}:{name}" for name in self.tag_names)

    @property
    def image_name(self) -> str:
        return f"{self.registry}/{self.repository}"

    @cached_property
    def facts(self) -> dict[str, str]:
        """What --select and include/exclude rules match against (kept: expand and select match each
        target against many rules; a frozen record's facts never change)."""
        return {
            "torch": self.torch,
            "python": self.python,
            "backend": self.backend,
            "backend_version": self.backend_version,
            "flavor": self.flavor,
            "vendor": self.vendor,
            "family": self.family,
            "id": self.id,
        }

    @property
    def base_reference(self) -> str:
        """What FROM names: the base pinned to the lock's digest, or the base as the matrix names it."""
        return f"{self.base_image}@{self.base_digest}" if self.base_digest else self.base_image

    @property  # not cached here: bases.base_environment is, and a cached property costs each target a lock and a slot
    def base_environment(self) -> tuple[tuple[str, str], ...] | None:
        """What the base image's configuration sets, where buildkit knows it (core/bases.py); None otherwise."""
        return base_environment(self.base_image)

    @property
    def builder_reference(self) -> str:
        return f"{self.builder_image}@{self.builder_digest}" if self.builder_digest else self.builder_image

    @property
    def package_requirements(self) -> tuple[str, ...]:
        """The stack's packages as the image installs them: each range, then the pins matrix.lock resolved them to."""
        return (*self.packages, *self.locked_packages)

    @cached_property  # kept: templates and labels read it for every render
    def vendor_record(self) -> Vendor:
        """What buildkit knows about the vendor whose GPUs the image is for."""
        return of_backend(self.backend)

    @cached_property  # kept: templates and labels read it for every render
    def backend_label(self) -> str:
        """CUDA 13.0, ROCm 7.2."""
        return self.vendor_record.backend_label(self.backend_version)

    @cached_property  # kept: templates and labels read it for every render
    def container_environment(self) -> tuple[tuple[str, str], ...]:
        """What the vendor's container runtime reads from the image's environment (NVIDIA_VISIBLE_DEVICES…)."""
        return self.vendor_record.environment(self.backend_version)

    @property
    def local_tag(self) -> str:
        """The local version of this backend's wheels on its index: cu130, rocm7.2 (a layout may say otherwise)."""
        return self.local_version or of_backend(self.backend).index_tag(self.backend_version)

    @property
    def torch_requirement(self) -> str:
        if self.channel == "nightly":
            return "torch"  # the nightly index's newest dev build, with pip's --pre
        # The exact build: with the backend's index as the only index, a missing wheel fails the install
        # instead of pip falling back to PyPI's build of another backend.
        return f"torch=={self.torch}+{self.local_tag}"


@dataclass(frozen=True)
class Note:
    """Something the expansion did that a user should hear about (never a silent drop)."""

    subject: str
    message: str
    facts: tuple[tuple[str, str], ...] = ()  # what the note is about, so a selection keeps only its own notes
    warning: bool = False  # most likely not what the matrix meant (its own warnings, located in its files)

    def __str__(self) -> str:
        return f"{self.subject}: {self.message}"

    @classmethod
    def of_warning(cls, problem: Problem) -> Note:
        return cls(problem.location, f"{problem.key}: {problem.message}" if problem.key else problem.message, warning=True)


@dataclass(frozen=True)
class Plan:
    targets: tuple[Target, ...]
    notes: tuple[Note, ...]


def target_id(prefix: str, torch: str, backend: str, backend_version: str, python: str, flavor: str, family: str = "") -> str:
    return f"{prefix}{torch}-{backend}{backend_version}{f'-{family}' if family else ''}-py{python}-{flavor}"


def floating_tag(prefix: str, torch: str, backend: str, python: str, flavor: str, family: str = "") -> str:
    """The tag that floats to a pair's newest twin: 2.14.1-cuda-py3.12-runtime, 2.14.1-rocm-mi300-py3.12-runtime."""
    return f"{prefix}{torch}-{backend}{f'-{family}' if family else ''}-py{python}-{flavor}"


def pair_key(prefix: str, torch: str, python: str, flavor: str) -> str:
    return f"{prefix}{torch}-py{python}-{flavor}"


def _base_image(matrix: Matrix, flavor: str, backend: str, version: str, python: str) -> str:
    if flavor in DEVEL_BASED_FLAVORS:
        # a Matrix is validated: each stack's backend versions are in its compatibility data
        return matrix.compat.backend(backend, version).devel_base  # type: ignore[union-attr]
    if flavor == SOURCE_FLAVOR:
        return matrix.source_runtime_base.replace("{python}", python)
    return matrix.runtime_base.replace("{python}", python)


def _python_for_flavor(matrix: Matrix, flavor: str, backend: str, version: str) -> str | None:
    """Devel images use the Python their OS ships; None means any Python the stack lists."""
    if flavor not in OS_PYTHON_FLAVORS:
        return None
    release = matrix.compat.backend(backend, version)
    return matrix.compat.os_python.get(release.devel_os, "") if release else ""


def _family_archs(
    matrix: Matrix, stack: Stack, vendor: Vendor, version: str, archs: tuple[str, ...], thin: bool, notes: list[Note]
) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(family, its archs) per image of a ROCm version: one per declared family for thin wheels (the
    family's gfx targets among the stack's archs), else one image with every arch ("" family). A family
    the stack's narrowed arch list leaves empty builds no image, and the plan says so."""
    if not thin or not stack.rocm_families:
        return (("", archs),)
    images = []
    for name in stack.rocm_families:
        kept = tuple(gfx for gfx in matrix.compat.image_group(name) or () if gfx in archs)
        if kept:
            images.append((name, kept))
        else:
            notes.append(
                Note(
                    f"{stack.torch} {vendor.index_tag(version)}-{name}",
                    f"left out: the stack's {vendor.backend_display} archs ({' '.join(archs)}) hold none of family {name}'s",
                    (("torch", stack.torch), ("backend", vendor.backend), ("family", name)),
                )
            )
    return tuple(images)


def family_bundle(compat: Compat, family: str) -> str:
    """The bundle of AMD's hierarchy a family image is for: the one its family names (gfx9_4), a product family's
    bundle (mi300 -> gfx9_4), or the finest holding a product family's several bundles (strix-point -> gfx115x);
    "" for an image with every arch."""
    if not family or family in compat.amd.bundles:
        return family
    found = compat.families.get(family)
    if found is None:
        return ""
    covering = compat.amd.bundles.get(found.bundles[0]) if len(found.bundles) == 1 else compat.amd.covering(found.gfx)
    return covering.key if covering else ""


def device_code(
    compat: Compat, layout: RocmLayout, version: str, archs: tuple[str, ...], wheel_archs: tuple[str, ...], companions: tuple[str, ...]
) -> tuple[DeviceCode, ...]:
    """The device code a thin image carries: its archs' (one with the wheels' whole list: every gfx target its
    index has device packages for, what torch's device-all asks for), torch's and its companions'."""
    carried = compat.device_archs(version) if archs == wheel_archs else archs
    return layout.device_code(compat.amd, carried, tuple(_requirement_name(c) for c in companions))


def _requirement_name(requirement: str) -> str:
    return requirement.partition("=")[0].partition("[")[0]


@dataclass(slots=True)
class _Image:
    """One image of a backend version while the plan is expanded: its own fields (the version's are its prototype's),
    its pair key and tags until the pair is settled, and its twins once they are known. Its Target is made last."""

    version: _Version
    id: str
    python: str
    flavor: str
    family: str
    bundle: str
    archs: tuple[str, ...]
    device_code: tuple[DeviceCode, ...]
    device_packages: tuple[str, ...]
    gfx_arch_variant: tuple[str, ...]
    pair: str | None
    base_image: str
    base_digest: str
    tag_names: tuple[str, ...]
    builder_image: str
    builder_digest: str
    twins: tuple[Twin, ...] = ()

    def facts(self) -> dict[str, str]:
        """Target.facts of its target."""
        shared = self.version.prototype
        return {
            "torch": shared.torch,
            "python": self.python,
            "backend": shared.backend,
            "backend_version": shared.backend_version,
            "flavor": self.flavor,
            "vendor": shared.vendor,
            "family": self.family,
            "id": self.id,
        }


@dataclass(frozen=True)
class _Version:
    """What the targets of one backend version share: a prototype target whose fields the images differ in are
    blank, and the values of its cached properties (see _target)."""

    prototype: Target
    cached: Mapping[str, object]


def _stack_targets(matrix: Matrix, stack: Stack, notes: list[Note]) -> list[_Image]:
    """The stack's images (a Target is made once its pair and twins are settled)."""
    compat = matrix.compat
    release = compat.torch_release(stack.torch)
    assert release is not None  # resolve_matrix guarantees it
    locked_packages = tuple(pin for pin in map(matrix.lock.constraint, stack.packages) if pin)
    targets = []
    for backend in BACKENDS:
        vendor = of_backend(backend)
        if not stack.backends[backend] and any(stack.backends.values()):  # a stack of one vendor's images says why
            why = (
                f"the compatibility data lists no {vendor.backend_display} wheels for torch {release.minor} yet "
                "(`buildkit compat check` adds them once an index carries them)"
                if not release.backends[backend]
                else f"the stack lists no {vendor.backend_display} version"
            )
            notes.append(Note(f"{stack.torch}", f"no {vendor.display} images: {why}", (("torch", stack.torch), ("backend", backend))))
        for version in stack.backends[backend]:
            facts = compat.backend(backend, version)
            assert facts is not None
            built = compat.wheel_archs(release.minor, backend, version)  # this release's build of the version
            layout = compat.layout_of(facts)
            local = vendor.index_tag(version)
            if layout and layout.local:
                local = layout.local.format(version=version)
            index_url = layout.index if layout and layout.index else compat.wheel_index_url(matrix.wheel_index, stack.channel, vendor.index_tag(version))
            # what every target of this backend version shares, whatever its flavor and Python
            prototype = Target(
                id="",
                vendor=vendor.name,
                backend=backend,
                backend_version=version,
                torch=stack.torch,
                python="",
                flavor="",
                pair=None,
                base_image="",
                index_url=index_url,
                archs=(),
                # exact builds for the same backend as torch (0.29.1+rocm7.2); the nightly channel takes the newest
                companions=tuple(
                    name if stack.channel == "nightly" else f"{name}=={release.companion_version(name, stack.torch)}+{local}" for name in stack.companions
                ),
                packages=stack.packages,
                os_packages=stack.os_packages,
                channel=stack.channel,
                user=matrix.user,
                registry=matrix.registry,
                repository=matrix.repository,
                tag_names=(),
                unconfirmed=tuple(
                    [f"torch {release.minor}: {item}" for item in release.unconfirmed if item == f"{backend} {version}"]
                    + [f"{backend} {version}: {item}" for item in facts.unconfirmed]
                ),
                thin_wheels=facts.thin_wheels,
                supported_platforms=compat.platforms(release.minor, backend, version),
                arm64_archs=stack.archs.get(backend, built.arm64_archs) if ARM64 in facts.platforms else (),
                compile=stack.compile,
                locked_packages=locked_packages,
                wheel_archs=built.archs,
                installer=stack.installer,
                uv=compat.uv if stack.installer == "uv" else "",
                compression=matrix.compression,
                layout=layout.name if layout else "",
                layers=facts.layers,
                max_layer_size=stack.max_layer_size,
                local_version=local,
                backend_runtime=facts.runtime,
            )
            shared = _Version(
                prototype, {"vendor_record": vendor, "backend_label": vendor.backend_label(version), "container_environment": vendor.environment(version)}
            )
            stack_archs = stack.archs.get(backend, built.archs)
            # per image of the version (one per ROCm family, or one with every arch): its archs, bundle, device code
            # and the variant AMD's plugin would report for it
            images = [
                (family, archs, family_bundle(compat, family), code, _device_packages(code), compat.amd.variant_values(archs) if layout else ())
                for family, archs, code in (
                    (family, archs, device_code(compat, layout, version, archs, built.archs, stack.companions) if layout else ())
                    for family, archs in _family_archs(matrix, stack, vendor, version, stack_archs, layout is not None, notes)
                )
            ]
            for flavor in stack.flavors:
                if flavor == SOURCE_FLAVOR and not of_backend(backend).builds_from_source:
                    notes.append(
                        Note(
                            f"{stack.torch} {flavor}",
                            "the source flavor compiles ROCm torch only; its CUDA twin is the runtime flavor's",
                            (("torch", stack.torch), ("flavor", flavor)),
                        )
                    )
                    continue
                only_python = _python_for_flavor(matrix, flavor, backend, version)
                skipped = [p for p in stack.python if only_python is not None and p != only_python]
                if skipped:
                    notes.append(
                        Note(
                            f"{stack.torch} {flavor}",
                            f"Python {', '.join(skipped)} skipped: the vendors' devel base images ship Python {only_python or '(unknown)'} only",
                            (("torch", stack.torch), ("flavor", flavor)),
                        )
                    )
                twin = stack.pair.get(backend) == version and flavor != SOURCE_FLAVOR  # source has no CUDA side
                builder = facts.devel_base if flavor == SOURCE_FLAVOR else ""
                builder_digest = matrix.lock.base_digest(builder) if builder else ""
                # the source flavor compiles torch for its archs: one image, no device packages to choose
                flavor_images = images if flavor != SOURCE_FLAVOR else [("", stack_archs, "", (), (), ())]
                for python in stack.python:
                    if python in skipped:
                        continue
                    base = _base_image(matrix, flavor, backend, version, python)
                    base_digest = matrix.lock.base_digest(base)
                    for family, archs, bundle, code, device_packages, variant in flavor_images:
                        ident = target_id(matrix.tag_prefix, stack.torch, backend, version, python, flavor, family)
                        floating = floating_tag(matrix.tag_prefix, stack.torch, backend, python, flavor, family)
                        targets.append(
                            _Image(
                                shared,
                                ident,
                                python,
                                flavor,
                                family,
                                bundle,
                                archs,
                                code,
                                device_packages,
                                variant,
                                pair_key(matrix.tag_prefix, stack.torch, python, flavor) if twin else None,
                                base,
                                base_digest,
                                (ident, floating) if twin else (ident,),
                                builder,
                                builder_digest,
                            )
                        )
    return targets


def _settle_pairs(targets: list[_Image], notes: list[Note]) -> None:
    """A twin whose other half is missing loses its pair key and floating tags, and the plan says why."""
    halves: dict[str, set[str]] = {}
    for target in targets:
        if target.pair:
            halves.setdefault(target.pair, set()).add(target.version.prototype.backend)
    for target in targets:
        if target.pair and len(halves[target.pair]) < len(BACKENDS):
            missing = next(b for b in BACKENDS if b not in halves[target.pair])
            notes.append(
                Note(
                    target.pair,
                    f"unpaired: {target.id} has no {missing} twin (not in the stack's {missing} versions, "
                    "or removed by include/exclude); it is built alone and no pair tag moves for it",
                    tuple(target.facts().items()),
                )
            )
            target.pair, target.tag_names = None, target.tag_names[:1]  # floating tags are for twins


def _link_twins(targets: list[_Image], compat: Compat) -> None:
    """Each paired target learns its twins (the pair's targets of the other vendor), so its image can name
    them; they are part of the target, hence of its fingerprint: a changed twin rebuilds the image naming it."""
    by_pair: dict[str, list[_Image]] = {}
    for target in targets:
        if target.pair:
            by_pair.setdefault(target.pair, []).append(target)
    for members in by_pair.values():
        for target in members:
            vendor = target.version.prototype.vendor
            others = [other for other in members if other.version.prototype.vendor != vendor]
            # arch lists only where there is a choice (ROCm family images): a lone twin's narrowed archs do not
            # change the image that names it
            several = len(others) > 1
            target.twins = tuple(
                Twin(
                    o.version.prototype.vendor,
                    f"{o.version.prototype.image_name}:{o.tag_names[0]}",
                    o.archs if several else (),
                    *(_bundle_and_family(compat, o.bundle) if several else ()),
                )
                for o in others
            )


def _bundle_and_family(compat: Compat, bundle: str) -> tuple[str, str]:
    """A bundle key with its family's (gfx9_4 -> gfx9_4, gfx9); ("", "") for none."""
    found = compat.amd.bundles.get(bundle)
    chain = compat.amd.chain(found.members[0]) if found else ()
    return (bundle, chain[2].key) if chain else ("", "")


def expand(matrix: Matrix) -> Plan:
    """Every target the matrix describes, after its include/exclude rules; raises on impossible tags."""
    notes: list[Note] = []
    targets: list[_Image] = []
    for stack in matrix.stacks:
        targets.extend(_stack_targets(matrix, stack, notes))
    filtered = apply_rules(matrix.include, matrix.exclude, [target.facts() for target in targets])
    if filtered.unmatched:
        raise UserError(
            first_problems(
                [
                    matrix.problem(
                        matrix.files[-1],
                        f"include rule {{ {matrix.include[index]} }} matches no target of this matrix; check its keys and globs against `buildkit plan`",
                        f"include[{index}]",
                    )
                    for index in filtered.unmatched
                ],
                matrix.files[-1],
            )
        )
    if filtered.emptied_by is not None:
        raise UserError(
            matrix.problem(
                matrix.files[-1],
                f"exclude rule {{ {matrix.exclude[filtered.emptied_by]} }} removes the last "
                "targets of this matrix: nothing is left to build; narrow it or remove it",
                f"exclude[{filtered.emptied_by}]",
            )
        )
    targets = [targets[index] for index in filtered.kept]
    # a note about targets the rules removed (the devel images of a stack a team's include leaves out) is not
    # the team's concern: only those an include rule could keep and no exclude rule removes whole are said
    notes = [note for note in notes if _kept_by_rules(matrix, dict(note.facts))]

    bad_tags = [name for target in targets for name in target.tag_names if grammar.tag(name)]
    if bad_tags:
        more = f" (and {len(bad_tags) - 1} more)" if len(bad_tags) > 1 else ""
        raise UserError(
            matrix.problem(
                matrix.files[-1],
                f"tag {bad_tags[0]!r} ({len(bad_tags[0])} characters){more} is not valid: expected {grammar.tag(bad_tags[0])}; "
                "shorten tag_prefix or the flavor name",
                "tag_prefix",
            )
        )
    _settle_pairs(targets, notes)
    _link_twins(targets, matrix.compat)
    return Plan(tuple(map(_target, targets)), (*map(Note.of_warning, matrix.warnings), *dict.fromkeys(notes)))


def _kept_by_rules(matrix: Matrix, facts: Mapping[str, str]) -> bool:
    included = not matrix.include or any(rule.could_match(facts) for rule in matrix.include)
    return included and not any(rule.matches_all(facts) for rule in matrix.exclude)


def _device_packages(code: tuple[DeviceCode, ...]) -> tuple[str, ...]:
    return tuple(name for found in code for name in found.packages)


def _target(image: _Image) -> Target:
    """The image's Target, through its constructor: every field named, each value's type checked by mypy (the
    fields every image of the version shares are its prototype's). The values of cached properties that the
    version's targets share go into the record's dictionary, where a cached property finds its value and is not
    computed again (functools.cached_property takes a lock each time it computes one, on Python 3.11)."""
    shared = image.version.prototype
    target = Target(
        id=image.id,
        vendor=shared.vendor,
        backend=shared.backend,
        backend_version=shared.backend_version,
        torch=shared.torch,
        python=image.python,
        flavor=image.flavor,
        pair=image.pair,
        base_image=image.base_image,
        index_url=shared.index_url,
        archs=image.archs,
        companions=shared.companions,
        packages=shared.packages,
        os_packages=shared.os_packages,
        channel=shared.channel,
        user=shared.user,
        registry=shared.registry,
        repository=shared.repository,
        tag_names=image.tag_names,
        unconfirmed=shared.unconfirmed,
        thin_wheels=shared.thin_wheels,
        supported_platforms=shared.supported_platforms,
        platforms=shared.platforms,
        arm64_archs=shared.arm64_archs,
        compile=shared.compile,
        installer=shared.installer,
        uv=shared.uv,
        compression=shared.compression,
        base_digest=image.base_digest,
        builder_digest=image.builder_digest,
        locked_packages=shared.locked_packages,
        channel_date=shared.channel_date,
        builder_image=image.builder_image,
        source_checkout=shared.source_checkout,
        max_jobs=shared.max_jobs,
        wheel_archs=shared.wheel_archs,
        twins=image.twins,
        family=image.family,
        bundle=image.bundle,
        layout=shared.layout,
        layers=shared.layers,
        max_layer_size=shared.max_layer_size,
        local_version=shared.local_version,
        device_code=image.device_code,
        gfx_arch_variant=image.gfx_arch_variant,
        backend_runtime=shared.backend_runtime,
    )
    cached = vars(target)
    cached.update(image.version.cached)
    cached["device_packages"] = image.device_packages
    return target


def select(plan: Plan, vendor: str = ALL_VENDORS, rule: Rule | None = None) -> Plan:
    """The targets of one vendor (or all) that match a --select rule."""
    rule = rule or Rule(())
    if vendor != ALL_VENDORS:
        rule = Rule((*rule.criteria, ("vendor", vendor)))
    chosen = tuple(t for t in plan.targets if rule.matches(t.facts)) if rule.criteria else plan.targets
    return Plan(chosen, tuple(note for note in plan.notes if rule.could_match(dict(note.facts))))


def narrow_for_source(
    targets: tuple[Target, ...], compat: Compat, gpu_archs: tuple[str, ...], checkout: bool, max_jobs: int
) -> tuple[tuple[Target, ...], list[Note]]:
    """--gpu-arch narrows ROCm targets (a wheel's list can only shrink; the source flavor compiles what it is
    given; a family image keeps the requested archs it has, and is left out without any); --pytorch-src and
    --max-jobs configure source builds."""
    known = tuple(arch for vendor in VENDORS if vendor.narrows_arch_code for arch in compat.known_archs[vendor.backend])
    unknown = [arch for arch in gpu_archs if arch not in known]
    if unknown:
        raise UserError(Problem("--gpu-arch", f"unknown gfx target {', '.join(unknown)}; known: {', '.join(known)}"))
    changed, notes = [], []
    for target in targets:
        if target.vendor_record.narrows_arch_code and gpu_archs:
            archs = gpu_archs
            if target.family:
                archs = tuple(arch for arch in target.archs if arch in gpu_archs)
                if not archs:
                    notes.append(
                        Note(
                            target.id,
                            f"left out: family {target.family} ({' '.join(target.archs)}) has none of --gpu-arch {' '.join(gpu_archs)}",
                            tuple(target.facts.items()),
                        )
                    )
                    continue
            extra = [a for a in archs if a not in target.archs]
            if extra and target.flavor != SOURCE_FLAVOR:
                raise UserError(
                    Problem("--gpu-arch", f"{', '.join(extra)} not in {target.id}'s wheel arch list; only the source flavor compiles for new archs")
                )
            layout = compat.rocm_layouts.get(target.layout) if target.device_code else None
            if layout is not None:
                carried = compat.device_archs(target.backend_version)
                missing = [arch for arch in archs if arch not in carried]
                if missing:
                    raise UserError(
                        Problem(
                            "--gpu-arch",
                            f"{', '.join(missing)}: no device package on {target.index_url} "
                            f"({target.layout} layout) for {target.id}; it has: {', '.join(carried)}",
                        )
                    )
                code = layout.device_code(compat.amd, archs, tuple(_requirement_name(c) for c in target.companions))
                target = replace(target, archs=archs, device_code=code, gfx_arch_variant=compat.amd.variant_values(archs))
            else:
                target = replace(target, archs=archs)
        if target.flavor == SOURCE_FLAVOR:
            target = replace(target, source_checkout=checkout, max_jobs=max_jobs)
        changed.append(target)
    return tuple(changed), notes


def choose_platforms(targets: tuple[Target, ...], requested: tuple[str, ...]) -> tuple[tuple[Target, ...], list[Note]]:
    """--platform: each target builds for the requested platforms its wheels exist for; a target with none
    of them is left out, with a note (ROCm wheels are linux/amd64 only)."""
    if not requested:
        return targets, []
    chosen, notes = [], []
    for target in targets:
        platforms = tuple(p for p in requested if p in target.supported_platforms)
        if platforms:
            chosen.append(replace(target, platforms=platforms))
        else:
            notes.append(
                Note(
                    target.id,
                    f"left out: its wheels exist for {', '.join(target.supported_platforms)} only, not {', '.join(requested)}",
                    tuple(target.facts.items()),
                )
            )
    return tuple(chosen), notes
