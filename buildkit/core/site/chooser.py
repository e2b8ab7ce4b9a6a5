"""The page's chooser: a GPU, a torch release and a Python to the one image that fits, with its run lines.

No decision is made here: each GPU the compatibility data names becomes a model host with that one GPU (its
driver loaded, its device nodes open, a driver new enough for every CUDA version the data knows), and
buildkit.core.host.routing routes it exactly as `buildkit run --print` routes a real host; the flags come from
the same GpuAccess, and why the other vendor's twin would run on the CPU is doctor's own finding about it.
Every (GPU arch, torch, Python) is decided here once, so the page's script only looks the answer up.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from packaging.version import Version

from buildkit.core.host.access import gpu_access, run_words
from buildkit.core.host.facts import CdiDevice, CdiSpec, DeviceNode, EngineFacts, Gpu, HostFacts
from buildkit.core.host.routing import Routing, assess, route
from buildkit.core.labels import ImageIdentity
from buildkit.core.shell import Expansion, command_line
from buildkit.core.targets.plan import Plan, Target
from buildkit.core.vendors import NVIDIA, VENDORS, of_vendor

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from buildkit.core.compat.facts import Compat
    from buildkit.core.host.fit import Finding

RUNTIME = "runtime"  # the flavor routing picks
# The torch releases the chooser offers, newest first: its answers grow with releases times Pythons times GPU archs, and
# the index page must stay small however long a matrix's history; older releases are in the pair matrix.
CHOOSER_RELEASES = 12
# The model AMD host's render group: a host's own gid differs between distributions, so the page prints the
# shell word that reads it (the group owning /dev/kfd) wherever routing's flags carry this number.
MODEL_RENDER_GID = 4_242_424
HOST_RENDER_GID = Expansion('"$(stat -c %g /dev/kfd)"')
# The engines the page writes lines for: Docker (NVIDIA through its runtime, --gpus) and rootless podman,
# which reaches NVIDIA GPUs through the CDI spec nvidia-ctk writes (routing's podman-without-cdi finding).
DOCKER = None  # the engine not asked: routing's lines for any Docker
PODMAN = EngineFacts("podman", rootless=True)


@dataclass(frozen=True)
class GpuModel:
    """A GPU product the compatibility data names: its PCI table (`[gpus.*]`) and the gfx targets' products."""

    vendor: str
    name: str
    arch: str  # sm_90, gfx942

    @property
    def key(self) -> str:
        """What the chooser decides on: GPUs of one vendor and arch route alike."""
        return f"{self.vendor}:{self.arch}"

    @property
    def label(self) -> str:
        return f"{self.name} ({self.arch})"


def gpu_models(compat: Compat) -> tuple[GpuModel, ...]:
    """Every GPU product the data names with its arch, each name once, NVIDIA first, then by name."""
    found: dict[tuple[str, str], GpuModel] = {}
    for vendor in VENDORS:
        for facts in compat.gpu_names.get(vendor.name, {}).values():
            if facts.get("name") and facts.get("arch"):
                found.setdefault((vendor.name, facts["name"].lower()), GpuModel(vendor.name, facts["name"], facts["arch"]))
    for arch, target in compat.gfx_targets.items():
        for product in target.products:
            found.setdefault(("amd", product.lower()), GpuModel("amd", product, arch))
    rank = {vendor.name: -vendor.routing_rank for vendor in VENDORS}
    return tuple(sorted(found.values(), key=lambda gpu: (rank[gpu.vendor], gpu.name.lower())))


def newest_driver(compat: Compat) -> str:
    """An NVIDIA driver that runs every CUDA version the data knows (the newest minimum it lists)."""
    versions = [Version(v) for facts in compat.backends.values() for v in (facts.driver_min, facts.driver_toolkit) if v]
    return str(max(versions)) if versions else "999"


def model_host(gpu: GpuModel, compat: Compat, engine: EngineFacts | None = DOCKER) -> HostFacts:
    """A host with this one GPU, its driver loaded and its device nodes open to the user."""
    device = Gpu(gpu.vendor, "0000:01:00.0", "", gpu.name, gpu.arch)
    if gpu.vendor == NVIDIA.name:
        node = DeviceNode("/dev/nvidia0", "", 0, True)
        cdi = (CdiSpec("/etc/cdi/nvidia.yaml", NVIDIA.cdi_kind, (CdiDevice("all", (node.path,)), CdiDevice("0", (node.path,)))),)
        return HostFacts(
            gpus=(device,),
            nvidia_driver=newest_driver(compat),
            nvidia_nodes=(node,),
            cdi_specs=cdi if engine is not None and engine.kind == "podman" else (),
            engine=engine,
        )
    kfd, render = (DeviceNode(path, "render", MODEL_RENDER_GID, True) for path in ("/dev/kfd", "/dev/dri/renderD128"))
    return HostFacts(gpus=(device,), amdgpu_loaded=True, kfd=kfd, render_nodes=(render,), engine=engine)


def run_prefix(cli: str, vendor: str, host: HostFacts) -> str:
    """The command line `buildkit run --print` gives on such a host, up to the image (the page appends each
    image's quoted reference), the render group read on the reader's own host."""
    words = run_words(cli, gpu_access(of_vendor(vendor), host).docker_flags(), "", interactive=True)[:-1]
    return command_line(*(HOST_RENDER_GID if word == str(MODEL_RENDER_GID) else word for word in words))


@dataclass(frozen=True)
class Decision:
    target: Target | None
    findings: tuple[Finding, ...]  # without a target, why none fits; with one, what routing noted (never blocking)


def decide(gpu: GpuModel, targets: Sequence[Target], compat: Compat, python: str) -> tuple[Decision, HostFacts]:
    host = model_host(gpu, compat)
    routing: Routing = route(host, Plan(tuple(targets), ()), compat, python)
    return Decision(routing.target, tuple(f for f in routing.findings if f.blocking == (routing.target is None))), host


def backend_label(target: Target) -> str:
    """ROCm 7.14 mi300, CUDA 13.0: how the page names an image's backend."""
    label = of_vendor(target.vendor).backend_label(target.backend_version)
    return f"{label} {target.family}" if target.family else label


def tag_of(target: Target) -> str:
    """The immutable tag alone: the page names the repository once."""
    return target.tag_names[0]


# Placeholders of the chooser's texts, which the page's script fills: doctor says the same of every image of a
# vendor but for their names, so its text is in the page's data once.
IMAGE, TWIN = "{image}", "{twin}"


def cpu_finding(host: HostFacts, compat: Compat, twin: Target) -> Finding:
    """Doctor's finding about `twin` on a host whose GPUs the chosen image uses: it would run on the CPU there,
    the two images' tags as the placeholders TWIN and IMAGE."""
    return assess(host, compat, TWIN, ImageIdentity.of_target(twin), IMAGE)[0]


# Routing's notes the chooser shows by their fix alone, with this phrase: their own text lists every target
# passed over, which the page's matrix shows anyway.
PHRASES = {"newer-images-passed-over": "newer images of the matrix do not fit this GPU, so an older one is picked"}


# An image of the page's data is a list of these, in this order (the data names them once, as "fields"): its
# link is pages[page] + "#" + id; its reference refs[ref] + id, or refs[ref[0]] + ref[1] where its tag is no id;
# cpu [text, fix] names why its twin (its tag) runs on the CPU with the chosen image's GPUs; smoke and gpu are
# [state, text] verdicts and size its bytes, where the night's documents say.
IMAGE_FIELDS = ("id", "page", "ref", "vendor", "backend", "twin", "cpu", "smoke", "gpu", "size")


@dataclass(frozen=True)
class Chooser:
    gpus: tuple[GpuModel, ...]
    torches: tuple[str, ...]  # newest first
    pythons: dict[str, tuple[str, ...]]  # per torch, newest first
    data: dict[str, Any]  # for the page's script (JSON): images, decisions, texts

    @property
    def empty(self) -> bool:
        return not self.torches

    def image(self, index: int) -> dict[str, Any]:
        """An image of the data as the page's script reads it: its fields by name, its link and reference whole."""
        image = dict(zip(self.data["fields"], self.data["images"][index]))
        ref = image["ref"]
        image["ref"] = self.data["refs"][ref] + image["id"] if isinstance(ref, int) else self.data["refs"][ref[0]] + ref[1]
        image["href"] = f"{self.data['pages'][image['page']]}#{image['id']}"
        return image


class _Texts:
    """Each text once in the page's data: decisions and images name them by index."""

    def __init__(self) -> None:
        self.items: dict[str, int] = {}

    def index(self, text: str) -> int:
        return self.items.setdefault(text, len(self.items))

    def finding(self, finding: Finding) -> list[int]:
        return [self.index(PHRASES.get(finding.code, finding.title)), self.index(finding.fix)]


def chooser(targets: Sequence[Target], compat: Compat, pages: Mapping[str, str], facts: Mapping[str, Mapping[str, object]] | None = None) -> Chooser:
    """Every decision for the GPUs of the data, the CHOOSER_RELEASES newest torch releases with a runtime image,
    and their Pythons. `pages` maps a target id to its link (a page and the image's anchor on it), `facts` to what
    the page shows beside it (its smoke and GPU tests, its size)."""
    by_torch: dict[str, list[Target]] = {}
    for target in targets:
        if target.flavor == RUNTIME:
            by_torch.setdefault(target.torch, []).append(target)
    torches = tuple(sorted(by_torch, key=Version, reverse=True))[:CHOOSER_RELEASES]
    pythons = {torch: tuple(sorted({t.python for t in by_torch[torch]}, key=Version, reverse=True)) for torch in torches}
    combos = [(torch, python) for torch in torches for python in pythons[torch]]
    answers = _Answers(targets, compat, pages, facts or {})
    rows: dict[str, int] = {}  # GPUs of several archs are often answered alike: each row of answers once
    decisions = {}
    models = gpu_models(compat)
    for gpu in {gpu.key: gpu for gpu in models}.values():
        row = [answers.answer(gpu, by_torch[torch], python) for torch, python in combos]
        decisions[gpu.key] = rows.setdefault(json.dumps(row), len(rows))
    # rows[decisions[gpu key]][i] answers combos[i]: [image index or -1, [[text index, fix index], ...]]
    data = {
        "fields": IMAGE_FIELDS,
        "images": answers.images,
        "pages": list(answers.pages.items),
        "refs": list(answers.refs.items),
        "lines": answers.lines,
        "texts": list(answers.texts.items),
        "decisions": decisions,
        "rows": [json.loads(row) for row in rows],
        "combos": [f"{torch}|{python}" for torch, python in combos],
        "pythons": {torch: list(versions) for torch, versions in pythons.items()},
    }
    return Chooser(models, torches, pythons, data)


class _Answers:
    """The chooser's answers, and each image, text and vendor's run lines they name once."""

    def __init__(self, targets: Sequence[Target], compat: Compat, pages: Mapping[str, str], facts: Mapping[str, Mapping[str, object]]) -> None:
        self.compat, self.links, self.facts = compat, pages, facts
        self.by_pair: dict[str, list[Target]] = {}
        for target in targets:
            if target.pair:
                self.by_pair.setdefault(target.pair, []).append(target)
        self.texts, self.pages, self.refs = _Texts(), _Texts(), _Texts()
        self.indexes: dict[str, int] = {}
        self.images: list[list[object]] = []  # each image's IMAGE_FIELDS
        self.lines: dict[str, dict[str, str]] = {}

    def answer(self, gpu: GpuModel, targets: Sequence[Target], python: str) -> list[object]:
        decision, host = decide(gpu, targets, self.compat, python)
        notes = [self.texts.finding(finding) for finding in decision.findings]
        return [-1 if decision.target is None else self._image(decision.target, gpu, host), notes]

    def _image(self, target: Target, gpu: GpuModel, host: HostFacts) -> int:
        if target.id in self.indexes:
            return self.indexes[target.id]
        twins = [t for t in self.by_pair.get(target.pair or "", ()) if t.vendor != target.vendor]
        self.indexes[target.id] = len(self.images)
        page = self.links.get(target.id, "").partition("#")[0]  # the script adds "#" and the id
        reference = command_line(target.tags[0])
        repository, colon, tag = reference.rpartition(":")  # the repository is the same for most images: once
        prefix = self.refs.index(repository + colon)
        facts = self.facts.get(target.id, {})
        fields = {
            "id": target.id,
            "page": self.pages.index(page),
            "ref": prefix if tag == target.id else [prefix, tag],
            "vendor": target.vendor,
            "backend": backend_label(target),
            "twin": tag_of(twins[0]) if twins else "",
            "cpu": self.texts.finding(cpu_finding(host, self.compat, twins[0])) if twins else 0,
            "smoke": facts.get("smoke"),
            "gpu": facts.get("gpu"),
            "size": facts.get("size"),
        }
        self.images.append([fields[name] for name in IMAGE_FIELDS])
        if target.vendor not in self.lines:
            self.lines[target.vendor] = {
                "docker": run_prefix("docker", target.vendor, host),
                "podman": run_prefix("podman", target.vendor, model_host(gpu, self.compat, PODMAN)),
                "resource": of_vendor(target.vendor).k8s_resource,
            }
        return self.indexes[target.id]


def on_other_vendor(target: Target, twins: Sequence[Target], gpus: Sequence[GpuModel], compat: Compat) -> Finding | None:
    """Doctor's finding about the image on a host with only the other vendor's GPUs: it runs on the CPU there
    (naming its twin where it has one; several family twins are told apart by the host's GPU, so then none)."""
    other = next((gpu for gpu in gpus if gpu.vendor != target.vendor), None)
    if other is None:
        return None
    twin = tag_of(twins[0]) if len(twins) == 1 else None
    return assess(model_host(other, compat), compat, tag_of(target), ImageIdentity.of_target(target), twin)[0]
