"""How a container gets a host's GPUs of one vendor, and what keeps any container from them.

Device nodes, groups, CDI names and the engine's runtime; and what keeps a container from the GPUs whatever its
image.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from buildkit.core.host.fit import Finding
from buildkit.core.shell import USER, pasted
from buildkit.core.vendors import SHM_SIZE, Vendor

if TYPE_CHECKING:
    from collections.abc import Sequence

    from buildkit.core.host.facts import HostFacts

_GROUP_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")  # POSIX portable user and group names


@dataclass(frozen=True)
class GpuAccess:
    """What a container needs to use this host's GPUs of one vendor: the vendor's record applied to the
    host's device nodes, groups, CDI spec and engine. `docker run` flags and the docker SDK's arguments
    both come from it."""

    gpu_request: bool  # NVIDIA without CDI: --gpus all, through the NVIDIA container runtime
    devices: tuple[str, ...]  # device nodes that exist here (raw flags)
    groups: tuple[str, ...]  # the groups that may open them
    security_options: tuple[str, ...]
    shm_size: str = SHM_SIZE
    cdi_devices: tuple[str, ...] = ()  # CDI names (nvidia.com/gpu=all), where a spec exists and the engine takes them

    def docker_flags(self) -> list[str]:
        flags = ["--gpus", "all"] if self.gpu_request else []
        for device in (*self.cdi_devices, *self.devices):
            flags += ["--device", device]
        for group in self.groups:
            flags += ["--group-add", group]
        for option in self.security_options:
            flags += ["--security-opt", option]
        return [*flags, "--shm-size", self.shm_size]


def run_words(cli: str, flags: Sequence[str], reference: str, command: Sequence[str] = (), interactive: bool = False) -> list[str]:
    """`docker run` (or `podman run`) of an image with its GPU flags (GpuAccess.docker_flags): what `buildkit run`
    runs and the nightly's page prints for a GPU it was asked about."""
    return [cli, "run", "--rm", *(["-it"] if interactive else []), *flags, reference, *command]


NO_GPU_ACCESS = GpuAccess(False, (), (), ())
# Rootless podman: the container's user keeps the host user's own supplementary groups (render, video) only
# with this, and podman takes it alone, never beside other --group-add values.
KEEP_GROUPS = "keep-groups"


def gpu_access(vendor: Vendor, host: HostFacts) -> GpuAccess:
    """The access a container gets to this host's GPUs of `vendor`; shared memory only when it has none."""
    if vendor.name not in host.vendors():
        return NO_GPU_ACCESS
    spec, engine = host.cdi_spec(vendor), host.engine
    cdi = spec is not None and engine is not None and engine.takes_cdi
    if cdi:
        devices: tuple[str, ...] = ()
    else:
        present = {"/dev/kfd": host.kfd is not None, "/dev/dri": bool(host.render_nodes)}
        devices = tuple(node for node in vendor.device_nodes if present.get(node, False))
    opened = cdi or bool(devices)
    groups: tuple[str, ...] = ()
    if opened and vendor.groups:  # AMD: the image's non-root user opens /dev/kfd and the render nodes through groups
        if engine is not None and engine.kind == "podman" and engine.rootless:
            groups = (KEEP_GROUPS,)
        else:
            groups = vendor.groups + ((str(host.amd_group_id),) if host.amd_group_id is not None else ())  # often `render`,
            # whose gid differs between distributions
    # --gpus goes through Docker's NVIDIA runtime; podman has none (access_findings says what it needs instead)
    gpu_request = vendor.gpu_request and not cdi and not _podman(host)
    return GpuAccess(gpu_request, devices, groups, vendor.security_options if opened else (), cdi_devices=(f"{vendor.cdi_kind}=all",) if cdi else ())


def _podman(host: HostFacts) -> bool:
    return host.engine is not None and host.engine.kind == "podman"


def access_findings(host: HostFacts, vendor: Vendor, access: GpuAccess) -> list[Finding]:
    """What keeps any container from this host's GPUs of `vendor` with `access`, whatever its image."""
    findings: list[Finding] = []
    rootless = host.engine is not None and host.engine.rootless
    if "/dev/dri" in vendor.device_nodes and not host.render_nodes:
        findings.append(
            Finding(True, "render-node-missing", "no /dev/dri/renderD* node for the AMD GPU", "load the amdgpu driver; the render node appears with it")
        )
    for node in [n for n in (host.kfd, *host.render_nodes, *host.nvidia_nodes) if n is not None and not n.accessible]:
        group = node.group or str(node.gid)
        # The name comes from the host's /etc/group and can be anything, shell syntax included: the command
        # names a group by a portable name (POSIX's characters) or else by its number, which usermod takes too.
        member_of = node.group if _GROUP_NAME_RE.fullmatch(node.group) else str(node.gid)
        add_to_groups = pasted("sudo", "usermod", "-aG", f"{member_of},video", USER)
        if rootless:  # the container's user is this user: it opens the node with this user's groups or not at all
            findings.append(
                Finding(
                    True,
                    "device-permission",
                    f"{node.path} is not readable and writable by this user (owned by group {group}), and a rootless engine's containers open it as this user",
                    f"{add_to_groups} and log in again",
                )
            )
        else:
            findings.append(
                Finding(
                    False,
                    "device-permission",
                    f"{node.path} is not readable and writable by this user (owned by group {group}): torch outside containers cannot use it",
                    f"{add_to_groups} and log in again; containers get it through --group-add (buildkit run adds it)",
                )
            )
    if vendor.gpu_request and not access.cdi_devices and _podman(host):
        # podman attaches NVIDIA GPUs through CDI (NVIDIA's AI Workbench guide, "Podman"); without a spec a container
        # gets none: `podman run --gpus all` gave no device nodes there (NVIDIA/nvidia-container-runtime#190)
        findings.append(
            Finding(
                True,
                "podman-without-cdi",
                f"podman hands {vendor.display} GPUs to containers through CDI only, and this host has no CDI spec for {vendor.cdi_kind}",
                f"write one: `{vendor.cdi_generate}`",
            )
        )
    engine = host.engine
    if access.gpu_request and engine is not None and engine.runtimes is not None and "nvidia" not in engine.runtimes:
        findings.append(
            Finding(
                True,
                "nvidia-runtime-missing",
                "the Docker engine has no NVIDIA container runtime, so --gpus cannot hand it the GPU",
                "install nvidia-container-toolkit, then `sudo nvidia-ctk runtime configure --runtime=docker` and restart dockerd "
                f"(or write a CDI spec, `{vendor.cdi_generate}`, for an engine that takes CDI names)",
            )
        )
    findings += _cdi_findings(host, vendor, access)
    return findings


def _cdi_findings(host: HostFacts, vendor: Vendor, access: GpuAccess) -> list[Finding]:
    spec = host.cdi_spec(vendor)
    if spec is None:
        return []
    findings: list[Finding] = []
    used = bool(access.cdi_devices)
    if spec.missing_nodes:
        shown = ", ".join(spec.missing_nodes[:4]) + (" and more" if len(spec.missing_nodes) > 4 else "")
        findings.append(
            Finding(
                used,
                "cdi-stale",
                f"the CDI spec {spec.path} names device nodes this host does not have ({shown}): it is stale"
                + (", and the engine refuses a container that asks for them" if used else ""),
                f"write it again: `{vendor.cdi_generate}`",
            )
        )
    listed, present = len(spec.gpu_devices), len(host.gpus_of(vendor.name))
    if listed < present:
        findings.append(
            Finding(
                False,
                "cdi-missing-gpus",
                f"the CDI spec {spec.path} lists {listed} of this host's {present} "
                f"{vendor.display} GPUs: containers that ask for {vendor.cdi_kind}=all get only those",
                f"write it again: `{vendor.cdi_generate}`",
            )
        )
    engine = host.engine
    if engine is not None and not engine.takes_cdi:
        enable = (
            "upgrade to Docker 28.2 or newer (CDI on by default), or turn on its CDI feature "
            '(`"features": {"cdi": true}` in /etc/docker/daemon.json, Docker 25 and newer)'
        )
        findings.append(
            Finding(
                False,
                "cdi-unused",
                f"a CDI spec for {vendor.cdi_kind} exists ({spec.path}), but "
                f"{engine.describe()} does not take CDI device names, so buildkit hands it the device nodes itself",
                enable,
            )
        )
    elif engine is None:
        findings.append(
            Finding(
                False,
                "cdi-engine-unknown",
                f"a CDI spec for {vendor.cdi_kind} exists ({spec.path}), but the engine "
                "was not asked (--host-root), so buildkit cannot tell whether it takes CDI device names",
                "name it with --engine docker:VERSION, podman or podman-rootless",
            )
        )
    return findings
