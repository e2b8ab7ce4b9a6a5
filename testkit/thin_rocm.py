"""TEST DOUBLES of ROCm 7.14's thin wheels, in both index layouts (no ROCm wheel can be had on this machine).

They mirror the real metadata, not the real bytes:
- PyTorch's index (layout "pytorch", pytorch/pytorch #193979): `torch-2.14.1+rocm7.14` requires
  `rocm[device-all,libraries]==7.14.*`; the `rocm` meta package's extras are `libraries` (the arch-neutral
  rocm-sdk-libraries), one `device-<gfx>` per ISA (rocm-sdk-device-<gfx>) and `device-all` (every one);
  rocm requires rocm-sdk-core, and each device package requires rocm-sdk-libraries (ROCm/TheRock
  build_tools/packaging/python: templates/rocm/setup.py and _dist_info.py, templates/rocm-sdk-device/setup.py).
  The real `rocm` is an sdist whose setup.py computes those extras at install; the double is a wheel that
  declares the same extras statically.
- AMD's multi-arch index (layout "amd-multi-arch", ROCm/TheRock #4946, ultralytics #24137): torch is host code
  and requires rocm[libraries]; its extra `device-<gfx>` adds amd-torch-device-<gfx> (torch's kernels for that
  ISA), which requires rocm-sdk-device-<gfx>; `device-all` adds every one.
- AMD's next index for ROCm 10 (layout "amd-whl-next", amd_layout_index below), or any layout of the data whose
  extras are torch's: built from the layout's own description, so its device packages are cut at the levels it
  names, named by rocm-bootstrap (amd-torch-device-gfx1151 and -gfx115x for torch[device-gfx1151]), and
  torchvision carries the companion device packages it names (torchvision[device-gfx1151] adds
  amd-torchvision-device-gfx1151; hipEngine docs/THEROCK.md saw exactly these installed from whl-next).

Sizes follow the sources' proportions, scaled down by SCALE: torch 1.4 GB on PyTorch's index (its own kernels
for every arch) and 431 MB of host code on AMD's, rocm-sdk-core 294 MB (TheRock #3046), device packages from
63 MB (RDNA1, #193979's log) to several hundred MB (gfx1030: 481 MB; data-center targets: about 800 MB, so that
device-all downloads about 10 GB and one arch 1.6-2.1 GB, as ultralytics #24137 measured). Every byte is
pseudo-random (incompressible), so layer sizes are honest.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from buildkit.adapters.files.bundled import shipped_compat
from testkit.wheels import TORCH_DOUBLE, VERSION_DOUBLE, build_wheel, companion_double

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from buildkit.core.compat.amd_targets import AmdTargets
    from buildkit.core.compat.facts import RocmLayout

ROCM = "7.14"
ROCM_RELEASE = "7.14.0"
HIP = "7.14.60200"
MB = 10**6
SCALE = 1 / 100  # the doubles are a hundredth of the real sizes
# Download sizes of the real packages, in MB (see the module's sources; the unnamed ones are estimates that
# make device-all about 10 GB)
DEVICE_MB = {
    "gfx1010": 63,
    "gfx1011": 63,
    "gfx1012": 63,
    "gfx1030": 481,
    "gfx1031": 68,
    "gfx1032": 68,
    "gfx1033": 68,
    "gfx1034": 68,
    "gfx1035": 68,
    "gfx1036": 68,
    "gfx908": 800,
    "gfx90a": 800,
    "gfx942": 800,
    "gfx950": 800,
}
DEFAULT_DEVICE_MB = 270  # RDNA3/3.5/4 and gfx1250
HOST_MB = {"rocm-sdk-core": 294, "rocm-sdk-libraries": 250}
TORCH_MB = {"pytorch": 1400, "amd-multi-arch": 431}
AMD_TORCH_DEVICE_MB = 150  # amd-torch-device-<gfx>: torch's own kernels for one ISA
AMD_VISION_DEVICE_MB = 30  # amd-torchvision-device-<gfx>: torchvision's kernels (nms, roi_align...) for one ISA (an estimate)
# torchvision's extension module: the probe asks it whether the compiled ops load (torchvision/extension.py's _has_ops)
VISION_EXTENSION_DOUBLE = '''"""TEST DOUBLE of torchvision.extension: its ops library loads (there is no GPU to run them on)."""
def _has_ops():
    return True
'''

ROCM_CUDA_DOUBLE = '''"""TEST DOUBLE of torch.cuda for a thin ROCm torch: no GPU; torch's own kernels cover every arch of its
build (the device packages carry the ROCm libraries' code)."""
_ARCHS = {archs!r}
def is_available():
    return False
def device_count():
    return 0
def get_arch_list():
    return list(_ARCHS)
'''


def _blob(size: float, seed: str) -> bytes:
    return random.Random(seed).randbytes(max(1, int(size)))


def _package(
    folder: Path,
    name: str,
    version: str,
    megabytes: float,
    requires: Sequence[str] = (),
    extras: dict[str, list[str]] | None = None,
    module: str = "",
    scale: float = SCALE,
) -> Path:
    """A distribution whose payload is `megabytes` (scaled) of incompressible data under its own module."""
    module = module or "_" + name.replace("-", "_")
    files: dict[str, str | bytes] = {
        f"{module}/__init__.py": f'"""TEST DOUBLE of {name} {version}."""\n',
        f"{module}/payload.bin": _blob(megabytes * MB * scale, f"{name} {version}"),
    }
    requirements = list(requires)
    for extra, wanted in (extras or {}).items():
        requirements += [f'{requirement}; extra == "{extra}"' for requirement in wanted]
    return build_wheel(folder, name, version, files, requires=requirements, provides_extras=list(extras or {}))


def device_mb(gfx: str) -> int:
    return DEVICE_MB.get(gfx, DEFAULT_DEVICE_MB)


@dataclass(frozen=True)
class ThinIndex:
    layout: str
    wheels: list[Path]
    torch_archs: tuple[str, ...]
    device_archs: tuple[str, ...]


def thin_rocm_index(
    folder: Path, layout: str, torch_archs: tuple[str, ...], device_archs: tuple[str, ...], torch: str = "2.14.1", scale: float = SCALE
) -> ThinIndex:
    """The wheels of one thin ROCm 7.14 index: torch (its kernels for `torch_archs`), torchvision (the release the
    compatibility data says was published with it, which the images pin), the rocm meta package,
    rocm-sdk-core/-libraries and the device packages of `device_archs` (the ISAs the index serves), at `scale`
    of the real sizes."""
    release = shipped_compat().torch_release(torch)
    vision = release.companion_version("torchvision", torch) if release else None
    assert vision, f"the compatibility data names no torchvision for torch {torch}"
    local = "rocm7.14" if layout == "pytorch" else "rocm7.14.0"
    version = f"{torch}+{local}"
    rocm_devices = {gfx: f"rocm-sdk-device-{gfx}=={ROCM_RELEASE}" for gfx in device_archs}
    wheels = [
        _package(
            folder,
            "rocm",
            ROCM_RELEASE,
            0.1,
            [f"rocm-sdk-core=={ROCM_RELEASE}"],
            module="rocm_sdk",
            extras={
                "libraries": [f"rocm-sdk-libraries=={ROCM_RELEASE}"],
                **{f"device-{gfx}": [requirement] for gfx, requirement in rocm_devices.items()},
                "device-all": list(rocm_devices.values()),
            },
        ),
        _package(folder, "rocm-sdk-core", ROCM_RELEASE, HOST_MB["rocm-sdk-core"], scale=scale),
        _package(folder, "rocm-sdk-libraries", ROCM_RELEASE, HOST_MB["rocm-sdk-libraries"], [f"rocm-sdk-core=={ROCM_RELEASE}"], scale=scale),
        *(
            _package(folder, f"rocm-sdk-device-{gfx}", ROCM_RELEASE, device_mb(gfx), [f"rocm-sdk-libraries=={ROCM_RELEASE}"], scale=scale)
            for gfx in device_archs
        ),
        companion_double(folder, "torchvision", vision, local, torch),
    ]
    if layout == "pytorch":
        requires, extras = [f"rocm[device-all,libraries]=={ROCM}.*"], {}
    else:
        requires = [f"rocm[libraries]=={ROCM}.*"]
        devices = {gfx: f"amd-torch-device-{gfx}=={version}" for gfx in device_archs}
        extras = {**{f"device-{gfx}": [requirement] for gfx, requirement in devices.items()}, "device-all": list(devices.values())}
        wheels += [_package(folder, f"amd-torch-device-{gfx}", version, AMD_TORCH_DEVICE_MB, [rocm_devices[gfx]], scale=scale) for gfx in device_archs]
    files: dict[str, str | bytes] = {
        "torch/__init__.py": TORCH_DOUBLE.format(local=local, version=version),
        "torch/version.py": VERSION_DOUBLE.format(version=version, cuda=None, hip=HIP),
        "torch/cuda/__init__.py": ROCM_CUDA_DOUBLE.format(archs=list(torch_archs)),
        "torch/lib/libtorch_hip.so": _blob(TORCH_MB[layout] * MB * scale, f"torch {version} {layout}"),
    }
    extra_lines = [f'{requirement}; extra == "{extra}"' for extra, wanted in extras.items() for requirement in wanted]
    wheels.append(build_wheel(folder, "torch", version, files, requires=requires + extra_lines, provides_extras=list(extras)))
    return ThinIndex(layout, wheels, torch_archs, device_archs)


def _runtime(rocm: str) -> str:
    """The HIP version (major.minor) the data says ROCm `rocm`'s torch reports."""
    facts = shipped_compat().backend("rocm", rocm)
    assert facts is not None, f"the compatibility data names no ROCm {rocm}"
    return facts.runtime_version


def amd_layout_index(
    folder: Path, layout: RocmLayout, amd: AmdTargets, rocm: str, torch: str, torch_archs: tuple[str, ...], device_archs: tuple[str, ...], scale: float = SCALE
) -> ThinIndex:
    """The wheels of one of AMD's thin indexes whose extras are torch's (and its companions'), as `layout` describes
    it, for ROCm `rocm` (10.1: versions 10.1.0, torch 2.14.0+rocm10.1.0): torch (host code, requires
    rocm[libraries]), its extras per gfx target of `device_archs` (the layout's arch_extra) and device-all adding
    torch's device packages of that target at each level the layout names; torchvision (the release the data pairs
    with torch) with the same extras adding its companion device packages; the rocm meta package,
    rocm-sdk-core/-libraries, and every device package, each requiring the libraries."""
    release = shipped_compat().torch_release(torch)
    vision = release.companion_version("torchvision", torch) if release else None
    assert vision, f"the compatibility data names no torchvision for torch {torch}"
    sdk = f"{rocm}.0"
    local = layout.local.format(version=rocm)
    version, vision_version = f"{torch}+{local}", f"{vision}+{local}"
    owned: dict[str, dict[str, list[str]]] = {"torch": {}, "torchvision": {}}  # owner -> extra -> requirements
    packages: dict[str, tuple[str, float]] = {}  # distribution -> (version, MB)
    for gfx in device_archs:
        (extra,) = layout.arch_extras(amd, (gfx,))
        for code in layout.device_code(amd, (gfx,), ("torchvision",)):
            for name in code.packages:
                if name.startswith("rocm-sdk-device-"):
                    packages[name] = (sdk, device_mb(gfx))
                else:
                    packages[name] = (version, AMD_TORCH_DEVICE_MB) if code.owner == "torch" else (vision_version, AMD_VISION_DEVICE_MB)
                requirement = f"{name}=={packages[name][0]}"
                for wanted in (extra, layout.all_extra):
                    found = owned[code.owner].setdefault(wanted, [])
                    if requirement not in found:
                        found.append(requirement)
    wheels = [
        _package(folder, "rocm", sdk, 0.1, [f"rocm-sdk-core=={sdk}"], module="rocm_sdk", extras={"libraries": [f"rocm-sdk-libraries=={sdk}"]}),
        _package(folder, "rocm-sdk-core", sdk, HOST_MB["rocm-sdk-core"], scale=scale),
        _package(folder, "rocm-sdk-libraries", sdk, HOST_MB["rocm-sdk-libraries"], [f"rocm-sdk-core=={sdk}"], scale=scale),
        *(_package(folder, name, found, megabytes, [f"rocm-sdk-libraries=={sdk}"], scale=scale) for name, (found, megabytes) in packages.items()),
    ]

    def extra_lines(owner: str) -> list[str]:
        return [f'{requirement}; extra == "{extra}"' for extra, wanted in owned[owner].items() for requirement in wanted]

    wheels.append(
        build_wheel(
            folder,
            "torchvision",
            vision_version,
            {
                "torchvision/__init__.py": f'"""TEST DOUBLE of torchvision."""\n__version__ = "{vision_version}"\n',
                "torchvision/extension.py": VISION_EXTENSION_DOUBLE,
            },
            requires=[f"torch=={version}", *extra_lines("torchvision")],
            provides_extras=list(owned["torchvision"]),
        )
    )
    files: dict[str, str | bytes] = {
        "torch/__init__.py": TORCH_DOUBLE.format(local=local, version=version),
        # HIP as the real one reports it: its own numbering, not ROCm's (ROCm 10.0's torch: HIP 7.15.26333)
        "torch/version.py": VERSION_DOUBLE.format(version=version, cuda=None, hip=f"{_runtime(rocm)}.26500"),
        "torch/cuda/__init__.py": ROCM_CUDA_DOUBLE.format(archs=list(torch_archs)),
        "torch/lib/libtorch_hip.so": _blob(TORCH_MB["amd-multi-arch"] * MB * scale, f"torch {version} {layout.name}"),
    }
    wheels.append(
        build_wheel(folder, "torch", version, files, requires=[f"rocm[libraries]=={rocm}.*", *extra_lines("torch")], provides_extras=list(owned["torch"]))
    )
    return ThinIndex(layout.name, wheels, torch_archs, device_archs)
