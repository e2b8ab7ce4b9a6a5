"""Reading the host's GPUs from what the kernel exposes, no vendor tool required.

PCI devices under /sys/bus/pci/devices (vendor 0x10de NVIDIA, 0x1002 AMD; display and processing-
accelerator classes), AMD gfx targets from /sys/class/kfd/kfd/topology/nodes/*/properties, driver versions
from /sys/module/amdgpu/version and /proc/driver/nvidia/version, and the device nodes under /dev with who
may open them, and the CDI specs in /etc/cdi and /var/run/cdi (adapters/cdi.py). nvidia-smi adds names and
compute capabilities where it is installed. Everything is read below a configurable root, so tests point it
at fixture trees.

A host tree can also be a mounted root or a fixture made by hand, so nothing read from it is trusted: only
regular files are read, each up to MAX_FILE_BYTES (a FIFO or a link to /dev/zero cannot hang or flood a
command), and a value that does not parse is left out with a note saying which file said what.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from buildkit.adapters import cdi
from buildkit.adapters.files.inputs import NotReadable, read_regular
from buildkit.core.host.amd_environment import VARIABLES
from buildkit.core.host.facts import CdiSpec, DeviceNode, EngineFacts, Gpu, HostFacts
from buildkit.core.vendors import BY_CDI_KIND, BY_PCI_ID
from buildkit.errors import Problem, UserError, printable
from buildkit.image.gpu_guard import gfx_name  # one definition for the host and the guard inside images

if TYPE_CHECKING:
    from buildkit.core.compat.amd_targets import Bundle
    from buildkit.core.compat.facts import Compat

GPU_CLASS_PREFIXES = ("0x03", "0x12")  # display controllers, processing accelerators
_NVIDIA_VERSION_RE = re.compile(r"Kernel Module(?: for \S+)?\s+([0-9]+(?:\.[0-9]+)+)")
MAX_FILE_BYTES = 64 * 1024  # sysfs attributes are one page at most; /etc/group of a large site fits too
_NUMBER_RE = re.compile(r"[0-9]{1,12}")  # kfd properties are unsigned decimals; more digits than this is garbage
_DRIVER_RE = re.compile(r"[0-9A-Za-z.+_-]{1,64}")
_DEVICE_ID_RE = re.compile(r"0x[0-9a-f]{4}")
_COMPUTE_CAP_RE = re.compile(r"[0-9]{1,2}\.[0-9]")
_PCI_ADDRESS_RE = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")


@dataclass(frozen=True)
class Identity:
    """Who would open the device nodes: the current user unless a test says otherwise."""

    uid: int
    gids: frozenset[int]

    @classmethod
    def current(cls) -> Identity:
        return cls(os.getuid(), frozenset({os.getgid(), *os.getgroups()}))


class _Tree:
    """Reads files below the host root; what cannot be read or parsed becomes a note, never an exception."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.notes: list[str] = []

    def shown(self, path: Path) -> str:
        try:
            return "/" + str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    def note(self, path: Path, message: str) -> None:
        self.notes.append(f"{printable(self.shown(path))}: {message}")

    def read(self, path: Path, limit: int = MAX_FILE_BYTES) -> str:
        """The file's text, stripped; "" when it is missing (a host without that driver) or unusable (noted)."""
        try:
            data = read_regular(path, limit)
        except NotReadable as error:
            if not error.missing:
                self.note(path, f"{error.reason}; ignored")
            return ""
        return data.decode("utf-8", errors="replace").strip()

    def number(self, path: Path, values: dict[str, str], key: str) -> int | None:
        """A kfd property as a non-negative integer; None (noted) when it is anything else."""
        text = values.get(key, "0")
        if _NUMBER_RE.fullmatch(text):
            return int(text)
        self.note(path, f"{key} {_shown_value(text)} is not a non-negative number; this node is ignored")
        return None


def _shown_value(text: str) -> str:
    return repr(text[:40] + ("…" if len(text) > 40 else ""))


def _check_root(root: Path) -> None:
    """--host-root must be a host's root: a missing path or a file is a mistake, not a host without GPUs."""
    try:
        if not root.exists():
            problem = "no such folder"
        elif not root.is_dir():
            problem = "is not a folder"
        elif not (root / "sys").is_dir():
            problem = "has no sys/ folder, so it is not a host's root (expected its /sys, /proc and /dev below it)"
        else:
            return
    except (OSError, ValueError) as error:
        problem = f"cannot be read: {getattr(error, 'strerror', None) or error}"
    raise UserError(Problem("--host-root", f"{str(root)[:200]}: {problem}"))


def _group_names(tree: _Tree) -> dict[int, str]:
    names = {}
    for line in tree.read(tree.root / "etc/group").splitlines():
        parts = line.split(":")
        if len(parts) >= 3 and _NUMBER_RE.fullmatch(parts[2]):
            names[int(parts[2])] = printable(parts[0], 64)  # shown only: a name from the file, escapes and all
    return names


def _node(tree: _Tree, path: Path, identity: Identity, groups: dict[int, str]) -> DeviceNode | None:
    shown = tree.shown(path)
    if not shown.isprintable():  # the path becomes a `docker run --device` argument: escaping it would name another
        tree.note(path, "is not a plain device name (control characters); ignored")
        return None
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
    return DeviceNode(shown, groups.get(info.st_gid, ""), info.st_gid, accessible)


def _kfd_archs(tree: _Tree) -> dict[str, str]:
    """PCI address -> gfx target, for every GPU node of the kfd topology (CPU nodes report 0)."""
    archs = {}
    for properties in sorted((tree.root / "sys/class/kfd/kfd/topology/nodes").glob("*/properties")):
        values = dict(line.split(maxsplit=1) for line in tree.read(properties).splitlines() if len(line.split()) == 2)
        target = tree.number(properties, values, "gfx_target_version")
        if not target:
            continue
        location, domain = tree.number(properties, values, "location_id"), tree.number(properties, values, "domain")
        if location is None or domain is None or domain > 0xFFFFFFFF or location > 0xFFFF:
            if location is not None and domain is not None:
                tree.note(properties, "location_id or domain is out of range for a PCI address; this node is ignored")
            continue
        name = gfx_name(target)
        if name is None:
            tree.note(properties, f"gfx_target_version {target} is not a gfx target version (such as 90402 for gfx942); the GPU's arch is unknown")
            continue
        address = f"{domain:04x}:{location >> 8:02x}:{(location >> 3) & 0x1F:02x}.{location & 0x7}"
        archs[address] = name
    return archs


def _nvidia_smi() -> dict[str, tuple[str, str]]:
    """PCI address -> (name, sm_XY) from nvidia-smi, when it is installed."""
    tool = shutil.which("nvidia-smi")
    if not tool:
        return {}
    try:
        result = subprocess.run(
            [tool, "--query-gpu=pci.bus_id,name,compute_cap", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found = {}
    for line in result.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 3:
            address = parts[0].lower()[-12:]  # 00000000:17:00.0 -> 0000:17:00.0
            # compute_cap is "9.0"; an old driver prints "[N/A]" (arch unknown, not a crash later)
            arch = "sm_" + parts[2].replace(".", "") if _COMPUTE_CAP_RE.fullmatch(parts[2]) else ""
            found[address] = (printable(parts[1], 100), arch)
    return found


def _cdi_specs(tree: _Tree) -> tuple[CdiSpec, ...]:
    """The GPU vendors' CDI specs below the root, each with the device nodes it names that /dev lacks."""
    specs = []
    files: list[Path] = []
    for folder in cdi.SPEC_DIRS:
        try:
            files += sorted(path for path in (tree.root / folder).iterdir() if path.suffix in cdi.SUFFIXES)
        except OSError:
            continue  # no such folder: no toolkit wrote a spec here
    if len(files) > cdi.MAX_SPECS:
        tree.note(
            files[cdi.MAX_SPECS],
            f"and {len(files) - cdi.MAX_SPECS} more CDI specs are not read: at most {cdi.MAX_SPECS} are (a host has one per GPU vendor); remove the stale ones",
        )
    budget = cdi.MAX_TOTAL_BYTES
    for path in files[: cdi.MAX_SPECS]:
        text = tree.read(path, cdi.MAX_SPEC_BYTES)
        if not text:
            continue
        size = len(text.encode())
        if size > budget:  # parsing is the cost: 4 MB of YAML take seconds
            tree.note(path, f"not read: with the CDI specs before it, it is over {cdi.MAX_TOTAL_BYTES >> 20} MB, all that is read")
            continue
        budget -= size
        try:
            kind, devices, common = cdi.parse_spec(text, path.suffix == ".json")
        except cdi.NotASpec as error:
            tree.note(path, f"not a CDI spec buildkit can read: {error}; ignored")
            continue
        if kind not in BY_CDI_KIND:
            continue  # another kind of device: not a GPU of ours
        nodes = dict.fromkeys([*common, *(node for device in devices for node in device.nodes)])
        missing = tuple(node for node in nodes if not os.path.lexists(tree.root / node.lstrip("/")))
        specs.append(CdiSpec(printable(tree.shown(path)), kind, devices, tuple(printable(node) for node in missing)))
    return tuple(specs)


def _environment(tree: _Tree, live: bool) -> tuple[tuple[str, str], ...]:
    """The variables that change which gfx target AMD's tools see (ROCM_BOOTSTRAP_*, HSA_OVERRIDE_GFX_VERSION): this
    process's own on the live host; a host tree's /etc/environment (where pam_env sets them for every login)."""
    if live:
        values = dict(os.environ)
    else:
        values = {}
        for line in tree.read(tree.root / "etc/environment").splitlines():
            key, found, value = line.strip().removeprefix("export ").partition("=")
            if found:
                values[key.strip()] = value.strip().strip("\"'")
    return tuple((name, printable(values[name], 200)) for name in VARIABLES if values.get(name))


def read_host(compat: Compat, root: Path = Path("/"), identity: Identity | None = None, engine: EngineFacts | None = None) -> HostFacts:
    _check_root(root)
    tree = _Tree(root)
    identity = identity or Identity.current()
    groups = _group_names(tree)
    kfd_archs = _kfd_archs(tree)
    smi = _nvidia_smi() if root == Path("/") else {}
    gpus = []
    for device in sorted((root / "sys/bus/pci/devices").glob("*")):
        if not _PCI_ADDRESS_RE.fullmatch(device.name):
            tree.note(device, "is not named as a PCI address (such as 0000:17:00.0); ignored")
            continue
        vendor_record = BY_PCI_ID.get(tree.read(device / "vendor").lower())
        if vendor_record is None or not tree.read(device / "class").lower().startswith(GPU_CLASS_PREFIXES):
            continue
        vendor = vendor_record.name
        device_id = tree.read(device / "device").lower()
        if not _DEVICE_ID_RE.fullmatch(device_id):
            tree.note(device / "device", f"{_shown_value(device_id)} is not a PCI device id (such as 0x74a1); shown as unknown")
            device_id = "unknown"
        known = compat.gpu_names.get(vendor, {}).get(device_id, {})
        name, arch = known.get("name", f"{vendor} device {device_id}"), known.get("arch", "")
        chain: tuple[Bundle, ...] = ()
        if vendor_record.arch_from_kfd:
            arch = kfd_archs.get(device.name, "")
            chain = compat.amd.chain(arch)[1:]  # its sub-family and family (rocm-bootstrap's)
        elif device.name in smi:
            name, arch = smi[device.name]
        gpus.append(Gpu(vendor, device.name, device_id, name, arch, tuple(b.key for b in chain), chain[0].display_name if chain else ""))
    nvidia_version = _NVIDIA_VERSION_RE.search(tree.read(root / "proc/driver/nvidia/version"))
    amdgpu_driver = tree.read(root / "sys/module/amdgpu/version")
    if amdgpu_driver and not _DRIVER_RE.fullmatch(amdgpu_driver):
        tree.note(root / "sys/module/amdgpu/version", f"{_shown_value(amdgpu_driver)} is not a driver version; ignored")
        amdgpu_driver = ""
    environment = _environment(tree, root == Path("/"))
    dev = root / "dev"

    def node(path: Path) -> DeviceNode | None:
        return _node(tree, path, identity, groups)

    return HostFacts(
        gpus=tuple(gpus),
        nvidia_driver=nvidia_version.group(1) if nvidia_version else "",
        amdgpu_driver=amdgpu_driver,
        amdgpu_loaded=(root / "sys/module/amdgpu").is_dir(),
        kfd=node(dev / "kfd"),
        render_nodes=tuple(n for n in map(node, sorted((dev / "dri").glob("renderD*"))) if n),
        nvidia_nodes=tuple(n for n in map(node, sorted(dev.glob("nvidia*"))) if n and not n.path.endswith("-caps")),
        cdi_specs=_cdi_specs(tree),
        engine=engine,
        notes=tuple(tree.notes),
        environment=environment,
    )
