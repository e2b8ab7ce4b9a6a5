"""Reading the host's GPUs from what the kernel exposes, no vendor tool required.

PCI devices under /sys/bus/pci/devices (vendor 0x10de NVIDIA, 0x1002 AMD; display and processing-
accelerator classes), AMD gfx targets from /sys/class/kfd/kfd/topology/nodes/*/properties, driver versions
from /sys/module/amdgpu/version and /proc/driver/nvidia/version, and the device nodes under /dev with who
may open them. nvidia-smi adds names and compute capabilities where it is installed. Everything is read
below a configurable root, so tests point it at fixture trees.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path

from buildkit.core.compat import Compat
from buildkit.core.host import DeviceNode, Gpu, HostFacts
from buildkit.core.vendors import BY_PCI_ID

GPU_CLASS_PREFIXES = ("0x03", "0x12")  # display controllers, processing accelerators
_NVIDIA_VERSION_RE = re.compile(r"Kernel Module(?: for \S+)?\s+([0-9]+(?:\.[0-9]+)+)")


@dataclass(frozen=True)
class Identity:
    """Who would open the device nodes: the current user unless a test says otherwise."""

    uid: int
    gids: frozenset[int]

    @classmethod
    def current(cls) -> "Identity":
        return cls(os.getuid(), frozenset({os.getgid(), *os.getgroups()}))


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return ""


def _group_names(root: Path) -> dict[int, str]:
    names = {}
    for line in _read(root / "etc/group").splitlines():
        parts = line.split(":")
        if len(parts) >= 3 and parts[2].isdigit():
            names[int(parts[2])] = parts[0]
    return names


def _node(path: Path, root: Path, identity: Identity, groups: dict[int, str]) -> DeviceNode | None:
    try:
        info = path.stat()
    except OSError:
        return None
    mode = info.st_mode
    if identity.uid == 0:
        accessible = True
    elif info.st_uid == identity.uid:
        accessible = bool(mode & stat.S_IRUSR and mode & stat.S_IWUSR)
    elif info.st_gid in identity.gids:
        accessible = bool(mode & stat.S_IRGRP and mode & stat.S_IWGRP)
    else:
        accessible = bool(mode & stat.S_IROTH and mode & stat.S_IWOTH)
    shown = "/" + str(path.relative_to(root))
    return DeviceNode(shown, groups.get(info.st_gid, ""), info.st_gid, accessible)


def gfx_name(target_version: int) -> str:
    """kfd's gfx_target_version (90402) as an LLVM target (gfx942); 90010 -> gfx90a, 110000 -> gfx1100."""
    major, minor, step = target_version // 10000, (target_version // 100) % 100, target_version % 100
    return f"gfx{major}{minor:x}{step:x}"


def _kfd_archs(root: Path) -> dict[str, str]:
    """PCI address -> gfx target, for every GPU node of the kfd topology (CPU nodes report 0)."""
    archs = {}
    for properties in sorted((root / "sys/class/kfd/kfd/topology/nodes").glob("*/properties")):
        values = dict(line.split(maxsplit=1) for line in _read(properties).splitlines() if len(line.split()) == 2)
        target = int(values.get("gfx_target_version", "0") or 0)
        if not target:
            continue
        location = int(values.get("location_id", "0"))
        domain = int(values.get("domain", "0"))
        address = f"{domain:04x}:{location >> 8:02x}:{(location >> 3) & 0x1F:02x}.{location & 0x7}"
        archs[address] = gfx_name(target)
    return archs


def _nvidia_smi() -> dict[str, tuple[str, str]]:
    """PCI address -> (name, sm_XY) from nvidia-smi, when it is installed."""
    tool = shutil.which("nvidia-smi")
    if not tool:
        return {}
    try:
        result = subprocess.run(
            [tool, "--query-gpu=pci.bus_id,name,compute_cap", "--format=csv,noheader"], capture_output=True, text=True, timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found = {}
    for line in result.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            address = parts[0].lower()[-12:]  # 00000000:17:00.0 -> 0000:17:00.0
            found[address] = (parts[1], "sm_" + parts[2].replace(".", ""))
    return found


def read_host(compat: Compat, root: Path = Path("/"), identity: Identity | None = None,
              engine_runtimes: tuple[str, ...] | None = None) -> HostFacts:
    identity = identity or Identity.current()
    groups = _group_names(root)
    kfd_archs = _kfd_archs(root)
    smi = _nvidia_smi() if root == Path("/") else {}
    gpus = []
    for device in sorted((root / "sys/bus/pci/devices").glob("*")):
        vendor_record = BY_PCI_ID.get(_read(device / "vendor").lower())
        if vendor_record is None or not _read(device / "class").lower().startswith(GPU_CLASS_PREFIXES):
            continue
        vendor = vendor_record.name
        device_id = _read(device / "device").lower()
        known = compat.gpu_names.get(vendor, {}).get(device_id, {})
        name, arch = known.get("name", f"{vendor} device {device_id}"), known.get("arch", "")
        if vendor == "amd":
            arch = kfd_archs.get(device.name, "")
        elif device.name in smi:
            name, arch = smi[device.name]
        gpus.append(Gpu(vendor, device.name, device_id, name, arch))
    nvidia_version = _NVIDIA_VERSION_RE.search(_read(root / "proc/driver/nvidia/version"))
    dev = root / "dev"
    node = lambda path: _node(path, root, identity, groups)  # noqa: E731
    return HostFacts(
        gpus=tuple(gpus),
        nvidia_driver=nvidia_version.group(1) if nvidia_version else "",
        amdgpu_driver=_read(root / "sys/module/amdgpu/version"),
        amdgpu_loaded=(root / "sys/module/amdgpu").is_dir(),
        kfd=node(dev / "kfd"),
        render_nodes=tuple(n for n in map(node, sorted((dev / "dri").glob("renderD*"))) if n),
        nvidia_nodes=tuple(n for n in map(node, sorted(dev.glob("nvidia*"))) if n and not n.path.endswith("-caps")),
        engine_runtimes=engine_runtimes,
    )
