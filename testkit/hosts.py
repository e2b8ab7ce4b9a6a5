"""Fixture host trees modelled on real sysfs/procfs/dev layouts, for detection without the hardware.

Each function writes what the kernel exposes on such a host below `root`: PCI functions with vendor,
device and class, the kfd topology (AMD), driver versions, device nodes (plain files with the nodes' modes)
and /etc/group. Nothing here is a GPU; read_host() reads these files exactly as it reads the real ones.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

RENDER_GID, VIDEO_GID = 109, 44


def _write(path: Path, text: str, mode: int | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    if mode is not None:
        os.chmod(path, mode)


def _pci(root: Path, address: str, vendor: str, device: str, klass: str) -> None:
    folder = root / "sys/bus/pci/devices" / address
    for name, value in (("vendor", vendor), ("device", device), ("class", klass)):
        _write(folder / name, value + "\n")


def _location_id(address: str) -> int:
    bus, rest = address.split(":")[1:]
    device, function = rest.split(".")
    return (int(bus, 16) << 8) | (int(device, 16) << 3) | int(function)


def _base(root: Path) -> None:
    _write(root / "etc/group", f"root:x:0:\nvideo:x:{VIDEO_GID}:\nrender:x:{RENDER_GID}:\n")
    _pci(root, "0000:00:1f.6", "0x8086", "0x15bc", "0x020000")  # an Intel NIC: never a GPU


def amd_host(root: Path, gpus: list[tuple[str, str, str, int]], kfd: bool = True, driver: str = "6.10.5") -> Path:
    """gpus: (pci address, device id, class, gfx_target_version)."""
    _base(root)
    _write(root / "sys/class/kfd/kfd/topology/nodes/0/properties", "cpu_cores_count 64\ngfx_target_version 0\nlocation_id 0\n")
    for index, (address, device, klass, target) in enumerate(gpus, start=1):
        _pci(root, address, "0x1002", device, klass)
        if kfd:
            _write(
                root / f"sys/class/kfd/kfd/topology/nodes/{index}/properties",
                f"simd_count 304\ngfx_target_version {target}\nlocation_id {_location_id(address)}\ndomain 0\n",
            )
            _write(root / f"dev/dri/renderD{127 + index}", "", 0o660)
    if kfd:
        _write(root / "sys/module/amdgpu/version", driver + "\n")
        _write(root / "dev/kfd", "", 0o660)
    return root


def nvidia_host(root: Path, gpus: list[tuple[str, str]], driver: str = "580.126.20") -> Path:
    """gpus: (pci address, device id)."""
    _base(root)
    for index, (address, device) in enumerate(gpus):
        _pci(root, address, "0x10de", device, "0x030200")
        _write(root / f"dev/nvidia{index}", "", 0o666)
    _write(
        root / "proc/driver/nvidia/version",
        f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {driver}  Release Build  (dvs-builder@U16-I3-B03-4-3)\n"
        "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n",
    )
    _write(root / "dev/nvidiactl", "", 0o666)
    _write(root / "dev/nvidia-uvm", "", 0o666)
    return root


def mi300x(root: Path) -> Path:
    return amd_host(root, [(f"0000:{bus}:00.0", "0x74a1", "0x120000", 90402) for bus in ("0c", "22")])


def rx7900xtx(root: Path) -> Path:
    amd_host(root, [("0000:03:00.0", "0x744c", "0x030000", 110000)])
    _pci(root, "0000:03:00.1", "0x1002", "0xab30", "0x040300")  # its HDMI audio function: not a GPU
    return root


def rx7800xt(root: Path) -> Path:
    return amd_host(root, [("0000:03:00.0", "0x747e", "0x030000", 110001)])


def h100(root: Path, driver: str = "580.126.20") -> Path:
    return nvidia_host(root, [("0000:17:00.0", "0x2330")], driver)


def mixed(root: Path) -> Path:
    nvidia_host(root, [("0000:17:00.0", "0x2330"), ("0000:31:00.0", "0x2330")])
    amd_host(root, [("0000:4a:00.0", "0x74a1", "0x120000", 90402)])
    return root


def amd_without_kfd(root: Path) -> Path:
    return amd_host(root, [("0000:03:00.0", "0x744c", "0x030000", 110000)], kfd=False)


def no_gpu(root: Path) -> Path:
    _base(root)
    return root


def rdna3_laptop(root: Path) -> Path:
    """A Ryzen 7040 laptop: its Radeon 780M iGPU is gfx1103 (kfd 110003), the only GPU."""
    return amd_host(root, [("0000:c4:00.0", "0x15bf", "0x030000", 110003)])


def v100(root: Path, driver: str = "580.126.20") -> Path:
    return nvidia_host(root, [("0000:3b:00.0", "0x1db4")], driver)


def with_environment(root: Path, **variables: str) -> Path:
    """The host's /etc/environment (what pam_env sets for every login), with these variables."""
    _write(root / "etc/environment", "".join(f'{name}="{value}"\n' for name, value in variables.items()))
    return root


def nvidia_cdi_spec(root: Path, gpus: int, name: str = "etc/cdi/nvidia.yaml") -> Path:
    """What `nvidia-ctk cdi generate` writes (its layout, trimmed to the device nodes): one device per GPU by
    index and by UUID, and `all`; the control nodes in the spec-wide edits."""
    devices = []
    for index in range(gpus):
        for device_name in (str(index), f"GPU-{index:08d}-1111-2222-3333-444455556666"):
            devices.append(f'- name: "{device_name}"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia{index}\n')
    all_nodes = "".join(f"    - path: /dev/nvidia{index}\n" for index in range(gpus))
    devices.append(f"- name: all\n  containerEdits:\n    deviceNodes:\n{all_nodes}")
    _write(
        root / name,
        "---\ncdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n"
        + "".join(devices)
        + "containerEdits:\n  env:\n  - NVIDIA_VISIBLE_DEVICES=void\n  deviceNodes:\n  - path: /dev/nvidiactl\n"
        "  - path: /dev/nvidia-uvm\n",
    )
    return root


def amd_cdi_spec(root: Path, render_nodes: list[int]) -> Path:
    """What `amd-ctk cdi generate` writes to /etc/cdi/amd.json: amd.com/gpu=N with /dev/kfd and its render node."""
    devices = [
        {"name": str(index), "containerEdits": {"deviceNodes": [{"path": "/dev/kfd"}, {"path": f"/dev/dri/renderD{minor}"}]}}
        for index, minor in enumerate(render_nodes)
    ]
    devices.append(
        {"name": "all", "containerEdits": {"deviceNodes": [{"path": "/dev/kfd"}] + [{"path": f"/dev/dri/renderD{minor}"} for minor in render_nodes]}}
    )
    _write(root / "etc/cdi/amd.json", json.dumps({"cdiVersion": "0.6.0", "kind": "amd.com/gpu", "devices": devices}, indent=1))
    return root
