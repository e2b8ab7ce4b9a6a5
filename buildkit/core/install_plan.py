"""How torch goes into an image: what to resolve, and which layers the resolved packages are installed in.

The image-side installer (buildkit/image/install.py) carries it out. A `resolve` stage resolves torch and
its companions on the backend's wheel index once; then every layer is downloaded and installed in a stage of
its own, all at once, into a folder laid out as the venv holds it, and the image copies them in as layers of
their own (`COPY --link`), in this order:

1. each of the backend version's large dependencies (compat `layers`: cuDNN, cuBLAS, NCCL…; rocm-sdk-core and
   rocm-sdk-libraries), a layer each, so a pull fetches them in parallel and a registry's layer limit holds:
   first those built for any Python (the vendor's library wheels), then the rest (triton);
2. the vendor's other library wheels together (`nvidia-libraries`: nvrtc, curand, nvjitlink…), for any Python;
   then the files of each large dependency built for one Python that are the same under every Python
   (`<name>-any-python`: all of triton's but its shared objects, which its stage moves there);
3. `dependencies`: everything else torch needs, in one layer;
4. `torch` itself, whose stage also narrows a thin wheel's requirement on device code, applies a fat wheel's
   arch trim, and writes torch's exact build as the constraint of every later install;
5. `companions`: torchvision and the others built with torch, which change when torch does;
6. for thin ROCm wheels, torch's device code, a layer per bundle of AMD's hierarchy its layout cuts it at
   (device-gfx942, device-gfx115x), then the companions' device code where the layout publishes it, a layer
   per companion and bundle (device-torchvision-gfx942).

What changes most often comes last: a node holding yesterday's nightly pulls the layers from torch's up, and
a node holding one family image pulls another's device layers only. A layer whose distributions are all the
vendor's library wheels (`python_neutral`) is installed without bytecode: its files, and so its digest, are
the same in the images of every Python of a stack (their venvs keep site-packages in one Python-neutral
folder). An image on a base whose environment buildkit knows (core/bases.py) is assembled with those layers
(`below_base`) at its very bottom, under the base's files, so a node unpacks them once for every Python; the
others (`above_base`) come after the base, in the order above. Every layer's files carry one fixed timestamp,
so a layer rebuilt from the same wheels, on any day and any builder, is the same blob.

The image proves the backend (check-backend) as soon as the layers are in, before anything is installed on
torch. Stages run side by side (a cold build's downloads and installs overlap), and a copied layer does not
depend on the ones below it, so a change in one stage rebuilds that layer alone.

Everything above the device layers is the same for every family image of a ROCm stack, so BuildKit builds
those layers once and the family images share them. Every layer's wheels are measured against
`max_layer_size` before they are installed, so an oversized one fails the build before anything is pushed.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import asdict, dataclass
from fnmatch import fnmatchcase
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypedDict

from buildkit.core.targets.source import SOURCE_FLAVOR
from buildkit.core.trim import LIBRARY_DIRS, trim_for

if TYPE_CHECKING:
    from collections.abc import Hashable

    from buildkit.core.compat.facts import Compat
    from buildkit.core.targets.plan import Target
    from buildkit.core.vendors import Vendor

DEPENDENCIES = "dependencies"
TORCH = "torch"
COMPANIONS = "companions"
DEVICE_PREFIX = "device-"
ANY_PYTHON_SUFFIX = "-any-python"
_REQUIREMENT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class InstallLayer:
    name: str  # a distribution name, nvidia-libraries, `dependencies`, `torch`, `companions` or device-<gfx>; also its plan file's
    # the distributions of the resolution it installs: names, or fnmatch patterns that take what no name does
    # ((): whatever no other layer takes)
    packages: tuple[str, ...]
    python_neutral: bool = False  # only wheels built for any Python: no bytecode, the same files under every Python
    # wheels built for one Python whose other files are the same under every Python: triton 3.8.0's cp311 and cp313
    # wheels (their RECORDs, read) hold 413 of 420 files alike, 392 of 936 MB, and every file that differs is a
    # shared object (libtriton.so, libproton.so, plugins) or the wheel's own metadata. Those files go to a layer
    # of their own (any_python_name), installed without bytecode; the shared objects, metadata and bytecode stay.
    any_python: bool = False

    @property
    def any_python_name(self) -> str:
        return f"{self.name}{ANY_PYTHON_SUFFIX}"


@dataclass(frozen=True)
class LayerCopy:
    """One layer of the image: what a layer's stage installed under /layers/<folder>/, copied in."""

    stage: str  # the layer's stage is layer-<stage>
    folder: str


@dataclass(frozen=True)
class Narrowing:
    """A thin-wheel torch whose own requirement names every device package (rocm[device-all,libraries] on
    PyTorch's index): the image resolves torch's requirements with that extra replaced by its archs' extras,
    and the installed torch's metadata keeps the requirement without it, so no later install pulls every
    device package back in."""

    requirement: str  # the distribution whose extras choose device code (rocm)
    drop: str  # device-all
    add: tuple[str, ...]  # device-gfx942, …


class FatTrim(TypedDict):
    """A fat wheel's arch trim, as the image-side installer reads it: a file under the library folders goes when its
    path matches `removed` and not `kept` (core/trim.py names_pattern)."""

    removed: str
    kept: str
    library_dirs: list[str]
    removed_archs: list[str]
    kept_archs: list[str]


@dataclass(frozen=True)
class TorchInstall:
    index_url: str
    requirements: tuple[str, ...]  # torch first, then its companions
    layers: tuple[InstallLayer, ...]
    backend: str
    backend_version: str
    max_layer_size: int
    narrowing: Narrowing | None = None
    trim: FatTrim | None = None  # a fat wheel's arch trim
    pre: bool = False  # the nightly channel: pre-releases
    installer: str = "uv"  # what installs each layer's wheels (pip always resolves and downloads them)

    def to_json(self) -> str:
        """The plan as the image-side installer reads it (the build context's torch-install.json)."""
        return self._json

    @cached_property  # kept: every target of the install renders it
    def below_base(self) -> tuple[LayerCopy, ...]:
        """The layers that are the same under every Python, bottom first: the vendor's library layers (device code
        aside: it differs between the family images of one Python) and the Python-independent files of the layers
        built for one Python."""
        neutral = [LayerCopy(layer.name, layer.name) for layer in self.layers if layer.python_neutral and not layer.name.startswith(DEVICE_PREFIX)]
        return (*neutral, *(LayerCopy(layer.name, layer.any_python_name) for layer in self.layers if layer.any_python))

    @cached_property  # kept: every target of the install renders it
    def above_base(self) -> tuple[LayerCopy, ...]:
        """The other layers, in install order: what a Python, a day's torch or a GPU family changes."""
        below = {copy.folder for copy in self.below_base}
        return tuple(LayerCopy(layer.name, layer.name) for layer in self.layers if layer.name not in below)

    @cached_property
    def _plain(self) -> dict[str, Any]:  # kept: the plan's JSON and its digest both read it
        return asdict(self)

    @cached_property
    def _json(self) -> str:  # kept: every build context of the targets that install torch alike writes it
        return json.dumps(self._plain, indent=1, sort_keys=True) + "\n"

    @cached_property  # kept: the fingerprint of every target that installs torch alike reads it
    def digest(self) -> str:
        """sha256 of the plan's compact JSON, keys sorted: what a fingerprint takes of it (json's C encoder writes
        compact JSON, many times faster than the indented file; the same data either way)."""
        return hashlib.sha256(_CANONICAL.encode(self._plain).encode()).hexdigest()


def python_neutral(vendor: Vendor, packages: tuple[str, ...]) -> bool:
    """Whether a layer of these distributions holds only the vendor's library wheels, built for any Python."""
    return bool(packages) and all(any(fnmatchcase(name, pattern) for pattern in vendor.library_distributions) for name in packages)


def install_inputs(target: Target) -> tuple[Hashable, ...]:
    """Everything of a target that torch_install reads (its key: the targets of one stack and backend version,
    whatever their Python and flavor, install torch alike, so a plan computes each install once)."""
    return (
        target.backend,
        target.backend_version,
        target.torch_requirement,
        target.companions,
        target.index_url,
        target.archs,
        target.wheel_archs,
        target.device_code,
        target.layers,
        target.max_layer_size,
        target.channel,
        target.installer,
        target.flavor == SOURCE_FLAVOR,
        target.thin_wheels,
    )


def torch_install(target: Target, compat: Compat) -> TorchInstall:
    release = compat.backend(target.backend, target.backend_version)
    layout = compat.layout_of(release) if release else None
    vendor = target.vendor_record
    torch = target.torch_requirement
    narrowing = None
    device: list[InstallLayer] = []
    requirements = target.companions
    if layout is not None:
        device = [InstallLayer(code.layer, code.packages, python_neutral(vendor, code.packages)) for code in target.device_code]
        narrowed = target.archs != target.wheel_archs
        extras = layout.arch_extras(compat.amd, target.archs) if narrowed else (layout.all_extra,)
        if layout.extras_of == "torch":
            # torch's extras choose its device code, and a companion's (torchvision[device-gfx942]) its own
            torch = _with_extras(torch, extras)
            requirements = tuple(
                _with_extras(requirement, extras) if _name(requirement) in layout.companion_device else requirement for requirement in requirements
            )
        elif narrowed:
            narrowing = Narrowing(layout.extras_of, layout.all_extra, extras)
    trim = trim_for(target)
    fat_trim: FatTrim | None = None
    if trim and not trim.by_packages:
        fat_trim = {
            "removed": trim.removed_pattern,
            "kept": trim.kept_pattern,
            "library_dirs": list(LIBRARY_DIRS),
            "removed_archs": list(trim.removed),
            "kept_archs": list(trim.kept),
        }
    neutral = {name: python_neutral(vendor, (name,)) for name in target.layers}
    large = [InstallLayer(name, (name,), neutral[name], any_python=not neutral[name]) for name in target.layers]
    libraries = [InstallLayer(vendor.libraries_layer, vendor.library_distributions, True)] if vendor.libraries_layer else []
    companions = tuple(map(_name, target.companions))
    layers = (
        *(layer for layer in large if layer.python_neutral),
        *libraries,
        *(layer for layer in large if not layer.python_neutral),
        InstallLayer(DEPENDENCIES, ()),
        InstallLayer(TORCH, ("torch",)),
        *([InstallLayer(COMPANIONS, companions)] if companions else []),
        *device,
    )
    return TorchInstall(
        index_url=target.index_url,
        requirements=(torch, *requirements),
        layers=layers,
        backend=target.backend,
        backend_version=target.backend_version,
        max_layer_size=target.max_layer_size,
        narrowing=narrowing,
        trim=fat_trim,
        pre=target.channel == "nightly",
        installer=target.installer,
    )


def _name(requirement: str) -> str:
    found = _REQUIREMENT_NAME.match(requirement)
    return found.group() if found else requirement


def _with_extras(requirement: str, extras: tuple[str, ...]) -> str:
    """torch==2.14.0+rocm10.1.0 with extras: torch[device-gfx942]==2.14.0+rocm10.1.0 (a bare name: torch[...])."""
    name, _, version = requirement.partition("==")
    return f"{name}[{','.join(extras)}]" + (f"=={version}" if version else "")


_LAYER_ROOT = re.compile(r"/layers/([A-Za-z0-9._-]+)/")


def layer_name(step: str) -> str:
    """What an image layer holds, from the build step that made it (its history's created_by): the torch
    install layer it is (torch, nvidia-cudnn-cu13, device-gfx942: `COPY /layers/<name>/ /`), else the step,
    shortened."""
    found = _LAYER_ROOT.search(step) if step.lstrip().startswith("COPY") else None
    return found.group(1) if found else " ".join(step.split())[:80]
