"""Kubernetes manifests for a pair's twins: one Job per image, placed only on nodes whose GPUs it has code for.

Each workload asks for its vendor's GPUs, through the device plugin's extended resource (`nvidia.com/gpu`,
`amd.com/gpu`) or, with DRA, a ResourceClaimTemplate of the vendor's DeviceClass (`gpu.nvidia.com`,
`gpu.amd.com`; core/vendors.py names the sources). Node affinity comes from the image's arch list and the
labels the vendors' node labellers publish:

- NVIDIA GPU Feature Discovery (NVIDIA/k8s-device-plugin internal/lm: resource.go newArchitectureLabels,
  nvml.go newVersionLabeler): `nvidia.com/gpu.compute.major` / `.minor` (the compute capability) and
  `nvidia.com/cuda.runtime-version.major` (the newest CUDA the driver runs). A term per group of archs, the
  same rule as core/host/fit.arch_covered: SASS for M.m runs on major M from minor m, PTX on any newer major;
  the driver term asks for the image's CUDA major (a driver of that major runs every minor of it).
- the AMD node labeller (ROCm/k8s-device-plugin cmd/k8s-node-labeller/main.go createLabels): on a node whose
  GPUs share one value, `amd.com/gpu.family` (the kernel's family name: AI, NV, GC_11_0_0...) and
  `amd.com/gpu.device-id` (the PCI device id, lowercase hex without 0x); no label names the gfx target. A
  family whose every known gfx target the image carries is selected by family; the image's other targets by
  the device ids the compatibility data lists for them (a node mixing GPUs gets neither label, so it is
  never selected for a GPU the image may lack).

The pod runs as the image's non-root user (UID from the matrix) with no privilege escalation and no
capabilities, and with BUILDKIT_GPU_GUARD=strict, so a pod that lands on the wrong GPUs fails at once
instead of training on the CPU.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from buildkit.core.compat.facts import AMD64, Compat
from buildkit.core.render.guard import GUARD_ENV
from buildkit.core.vendors import AMD, of_vendor

if TYPE_CHECKING:
    from buildkit.core.targets.plan import Target

DRA_API = "resource.k8s.io/v1"  # DRA's stable API (Kubernetes 1.34)
NVIDIA_MAJOR, NVIDIA_MINOR = "nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor"
NVIDIA_CUDA_MAJOR = "nvidia.com/cuda.runtime-version.major"
AMD_FAMILY, AMD_DEVICE_ID = "amd.com/gpu.family", "amd.com/gpu.device-id"
NODE_ARCH = "kubernetes.io/arch"
PAIR_LABEL, TARGET_LABEL = "buildkit.dev/pair", "buildkit.dev/target"
DEFAULT_COMMAND = ("python", "-c", "import torch; assert torch.cuda.is_available(), 'no GPU'; print(torch.cuda.get_device_name(0))")
_LABEL_VALUE_RE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?")
MAX_NAME = 63  # a Job's name becomes its pods' job-name label value
KubeObject = dict[str, Any]  # a Kubernetes object (or a part of one) as its JSON document: nested maps and lists of any shape
Expression = dict[str, str | list[str]]  # a node selector requirement: key, operator and, for most operators, values
Term = list[Expression]  # a node selector term: its expressions ANDed


@dataclass(frozen=True)
class KubeOptions:
    name: str = "pytorch"  # prefix of every object's name
    gpus: int = 1
    dra: bool = False
    command: tuple[str, ...] = ()  # the container's command; () runs the GPU check DEFAULT_COMMAND


@dataclass(frozen=True)
class Manifests:
    objects: tuple[KubeObject, ...]
    notes: tuple[str, ...]


def _expression(key: str, operator: str, *values: object) -> Expression:
    expression: Expression = {"key": key, "operator": operator}
    if values:
        expression["values"] = [str(value) for value in values]
    return expression


def nvidia_terms(archs: tuple[str, ...], cuda_major: int) -> list[Term]:
    """Node selector terms (each a list of expressions, ANDed; the terms ORed) for GPUs the archs run on."""
    driver = _expression(NVIDIA_CUDA_MAJOR, "Gt", cuda_major - 1)
    lowest: dict[int, int] = {}
    ptx: list[int] = []
    for arch in archs:
        major, minor = (int(part) for part in arch.removesuffix("+PTX").split("."))
        lowest[major] = min(lowest.get(major, minor), minor)
        if arch.endswith("+PTX"):
            ptx.append(major)
    terms = []
    whole = sorted(major for major, minor in lowest.items() if minor == 0)
    if whole:
        terms.append([_expression(NVIDIA_MAJOR, "In", *whole), driver])
    for major, minor in sorted(lowest.items()):
        if minor:
            terms.append([_expression(NVIDIA_MAJOR, "In", major), _expression(NVIDIA_MINOR, "Gt", minor - 1), driver])
    if ptx:
        terms.append([_expression(NVIDIA_MAJOR, "Gt", min(ptx)), driver])
    return terms


def amd_terms(archs: tuple[str, ...], compat: Compat) -> tuple[list[Term], list[str]]:
    """Node selector terms for AMD GPUs of these gfx targets, and the targets no label can select."""
    members: dict[str, set[str]] = {}
    for name, target in compat.gfx_targets.items():
        if target.amdgpu_family:
            members.setdefault(target.amdgpu_family, set()).add(name)
    families = sorted(family for family, names in members.items() if names <= set(archs))
    rest = [arch for arch in archs if (compat.gfx_targets.get(arch) is None or compat.gfx_targets[arch].amdgpu_family not in families)]
    ids = {arch: sorted(pci.removeprefix("0x") for pci, facts in compat.gpu_names.get(AMD.name, {}).items() if facts.get("arch") == arch) for arch in rest}
    device_ids = sorted({pci for found in ids.values() for pci in found})
    terms = []
    if families:
        terms.append([_expression(AMD_FAMILY, "In", *families)])
    if device_ids:
        terms.append([_expression(AMD_DEVICE_ID, "In", *device_ids)])
    return terms, [arch for arch in rest if not ids[arch]]


def _slug(text: str) -> str:
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", text.lower())).strip("-")


def object_name(prefix: str, target: Target) -> str:
    """`<prefix>-<target id>` as a DNS label; shortened with a hash of the full name when too long."""
    name = _slug(f"{prefix}-{target.id}")
    if len(name) <= MAX_NAME:
        return name
    return f"{name[: MAX_NAME - 9].rstrip('-')}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def _labels(target: Target, name: str) -> dict[str, str]:
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": target.vendor}
    for key, value in ((PAIR_LABEL, target.pair or ""), (TARGET_LABEL, target.id)):
        if _LABEL_VALUE_RE.fullmatch(value):  # label values: 63 characters of [A-Za-z0-9._-]; a longer id is left out
            labels[key] = value
    return labels


def _affinity(target: Target, compat: Compat) -> tuple[KubeObject | None, list[str]]:
    notes: list[str] = []
    terms: list[Term] = []
    for platform in target.platforms:
        archs = target.archs if platform == AMD64 else (target.arm64_archs or target.archs)
        if target.vendor_record.k8s_affinity == "gfd":
            found = nvidia_terms(archs, int(target.backend_version.split(".")[0]))
        else:
            found, unplaced = amd_terms(archs, compat)
            notes += [
                f"no node label names {arch} alone (the AMD labeller publishes family and device id, and the "
                f"compatibility data lists no device id for it): nodes with it are not selected; add its PCI ids to "
                f'[gpus.amd] with arch = "{arch}"'
                for arch in unplaced
            ]
        terms += [[_expression(NODE_ARCH, "In", platform.split("/")[1]), *term] for term in found]
    if not terms:
        notes.append(
            f"no node label identifies the GPUs of its arch list ({' '.join(target.archs)}): "
            "the workload has no node affinity and may land on GPUs it has no code for"
        )
        return None, notes
    required = {"nodeSelectorTerms": [{"matchExpressions": term} for term in terms]}
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}, notes


def workload(target: Target, image: str, options: KubeOptions, compat: Compat) -> tuple[list[KubeObject], list[str]]:
    """The Job for one image (and its ResourceClaimTemplate with DRA), and what to say about them."""
    vendor = of_vendor(target.vendor)
    name = object_name(options.name, target)
    labels = _labels(target, name)
    container: KubeObject = {
        "name": "pytorch",
        "image": image,
        "command": list(options.command or DEFAULT_COMMAND),
        "env": [{"name": GUARD_ENV, "value": "strict"}],
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    pod: KubeObject = {
        "restartPolicy": "Never",
        "containers": [container],
        "tolerations": [{"key": vendor.k8s_resource, "operator": "Exists", "effect": "NoSchedule"}],
    }
    notes: list[str] = []
    if target.user is not None:
        uid = target.user.uid
        pod["securityContext"] = {"runAsNonRoot": True, "runAsUser": uid, "runAsGroup": uid}
    else:
        notes.append("the image runs as root (run_as_root = true in the matrix): no runAsNonRoot")
    objects: list[KubeObject] = []
    if options.dra:
        claim = f"{name[: MAX_NAME - 4].rstrip('-')}-gpu"
        objects.append(
            {
                "apiVersion": DRA_API,
                "kind": "ResourceClaimTemplate",
                "metadata": {"name": claim, "labels": labels},
                "spec": {
                    "spec": {
                        "devices": {
                            "requests": [
                                {"name": "gpu", "exactly": {"deviceClassName": vendor.dra_device_class, "allocationMode": "ExactCount", "count": options.gpus}}
                            ]
                        }
                    }
                },
            }
        )
        pod["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": claim}]
        container["resources"] = {"claims": [{"name": "gpu"}]}
    else:
        container["resources"] = {"limits": {vendor.k8s_resource: options.gpus}}
    affinity, affinity_notes = _affinity(target, compat)
    if affinity:
        pod["affinity"] = affinity
    objects.append(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "labels": labels},
            "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": labels}, "spec": pod}},
        }
    )
    return objects, notes + affinity_notes


def manifests(targets: tuple[Target, ...], images: dict[str, str], options: KubeOptions, compat: Compat) -> Manifests:
    """Every twin's workload, NVIDIA first; `images` maps each target id to the reference the pod pulls. A note
    that holds for several workloads (family images all running as root) is said once, naming them."""
    objects: list[KubeObject] = []
    about: dict[str, list[str]] = {}  # note -> the targets it is about
    ordered = sorted(targets, key=lambda t: (-t.vendor_record.routing_rank, t.id))
    for target in ordered:
        found, said = workload(target, images[target.id], options, compat)
        objects += found
        for note in said:
            about.setdefault(note, []).append(target.id)
    notes = [f"{'every workload of the pair' if len(ids) == len(ordered) > 1 else ', '.join(ids)}: {note}" for note, ids in about.items()]
    return Manifests(tuple(objects), tuple(notes))
