"""CDI specs: the files a GPU toolkit writes so engines can hand a container its devices by name.

A spec (CDI, cncf-tags/container-device-interface SPEC.md) is JSON or YAML with a `kind`
(`nvidia.com/gpu`, `amd.com/gpu`), `devices` each with a `name` and `containerEdits.deviceNodes` (each a
`path` in the container and, where it differs, the `hostPath`), and spec-wide `containerEdits`. Engines read
them from /etc/cdi and /var/run/cdi (the spec's default directories); `nvidia-ctk cdi generate` and
`amd-ctk cdi generate` write them.

The files sit on a host tree anyone may have edited, so nothing in them is trusted: only regular files up
to MAX_SPEC_BYTES are read (adapters/host.py's reader), at most MAX_SPECS files and MAX_TOTAL_BYTES in all
(a folder of specs planted to cost minutes of parsing costs a second), no more than MAX_DEVICES devices with
MAX_NODES nodes each are looked at, so YAML aliases repeating one big list cannot multiply the work, and a
document nested thousands deep is no spec rather than a RecursionError.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from buildkit.core.host.facts import CdiDevice

SPEC_DIRS = ("etc/cdi", "var/run/cdi")
SUFFIXES = (".json", ".yaml", ".yml")
MAX_SPEC_BYTES = 1024 * 1024  # nvidia-ctk's spec for an 8-GPU host is a few tens of KB
MAX_SPECS = 16  # a host has one spec per device vendor (nvidia.yaml, amd.json), perhaps one per toolkit version
MAX_TOTAL_BYTES = 4 * 1024 * 1024
MAX_DEVICES = 1024
MAX_NODES = 64
_NODE_RE = re.compile(r"/dev/[A-Za-z0-9._/-]{1,200}")
_KIND_RE = re.compile(r"[a-z0-9.-]{1,100}/[a-z0-9._-]{1,100}")


class NotASpec(ValueError):
    """Why a file in a CDI directory is not a spec buildkit can read."""


def _mapping(value: object, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise NotASpec(f"{what} is not a mapping")
    return value


def _nodes(edits: object, what: str) -> tuple[str, ...]:
    nodes = _mapping(edits, what).get("deviceNodes") or []
    if not isinstance(nodes, list):
        raise NotASpec(f"{what}.deviceNodes is not a list")
    paths = []
    for node in nodes[:MAX_NODES]:
        node = _mapping(node, f"a node of {what}")
        path = node.get("hostPath") or node.get("path")
        if not isinstance(path, str) or not _NODE_RE.fullmatch(path) or "/../" in path or path.endswith("/.."):
            raise NotASpec(f"a device node of {what} is not a path below /dev")
        paths.append(path)
    return tuple(paths)


def parse_spec(text: str, json_file: bool) -> tuple[str, tuple[CdiDevice, ...], tuple[str, ...]]:
    """(kind, devices, the spec-wide device nodes) of a spec's text; NotASpec says why it is none."""
    try:
        data = json.loads(text) if json_file else yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except RecursionError:
        raise NotASpec("nested too deeply to be a spec") from None
    except (ValueError, yaml.YAMLError) as error:
        raise NotASpec(f"not {'JSON' if json_file else 'YAML'} ({str(error).splitlines()[0][:120]})") from None
    data = _mapping(data, "the file")
    kind = data.get("kind")
    if not isinstance(kind, str) or not _KIND_RE.fullmatch(kind):
        raise NotASpec("its kind is missing or not vendor.com/class")
    listed = data.get("devices") or []
    if not isinstance(listed, list):
        raise NotASpec("devices is not a list")
    devices = []
    for index, device in enumerate(listed[:MAX_DEVICES]):
        device = _mapping(device, f"devices[{index}]")
        name = device.get("name")
        if not isinstance(name, (str, int)) or not re.fullmatch(r"[A-Za-z0-9_.:-]{1,200}", str(name)):
            raise NotASpec(f"devices[{index}] has no name CDI accepts")
        devices.append(CdiDevice(str(name), _nodes(device.get("containerEdits"), f"devices[{index}].containerEdits")))
    return kind, tuple(devices), _nodes(data.get("containerEdits"), "containerEdits")
