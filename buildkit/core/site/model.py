"""The nightly's site as values: the pair matrix, one page per image, the chooser and the charts.

They are made from the planned targets and what the documents of tonight's run (and the previous nightly's) say
about them.

Pages are split so none grows with the matrix beyond a bound: the pair matrix is on the index up to
MATRIX_PER_PAGE images, else on pages of at most that many images (one torch release after another); an image
page shows at most PACKAGES_SHOWN packages and SHARERS_SHOWN sharers of a layer. Nothing here is HTML: the
templates (buildkit/ui/site/) turn these values into pages, escaping every one of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from packaging.version import Version

from buildkit.core.compat.facts import Compat
from buildkit.core.host.fit import Finding
from buildkit.core.host.kube import KubeOptions, workload
from buildkit.core.release.layer_sharing import BuiltLayer, node_costs
from buildkit.core.render.planned import PlannedImage
from buildkit.core.shell import command_line
from buildkit.core.site.charts import BarChart, Item, bar_chart
from buildkit.core.site.chooser import (
    PODMAN,
    RUNTIME,
    Chooser,
    GpuModel,
    backend_label,
    chooser,
    gpu_models,
    model_host,
    on_other_vendor,
    run_prefix,
)
from buildkit.core.site.diff import PackageDiff, package_diff
from buildkit.core.site.evidence import Evidence
from buildkit.core.supply_chain.sbom import Package
from buildkit.core.targets.plan import Target
from buildkit.core.vendors import VENDORS, of_vendor
from buildkit.errors import printable

MATRIX_PER_PAGE = 300  # images in one page of the pair matrix (the default matrix's 132 fit on the index)
PACKAGES_SHOWN = 1500  # packages listed on an image page; its SBOM has them all
SHARERS_SHOWN = 2  # images named beside a layer they share; the rest counted
# A layer this small (the empty layer every image has, a step that wrote a few files) costs a node nothing worth
# naming the images that share it.
SHARED_LAYER_MIN = 32 * 1024
PAGE_LIMIT = 2 * 1024 * 1024  # bytes: no page of the site is larger (the splits above keep them far below)

# Measured by bench.side_by_side on 2026-12-05 (docs/benchmarks.md, run 2, the run of record): the real CUDA 13.0
# runtime image written by hand (one pip layer, gzip) and built by buildkit, megabytes the registry stores of
# the layers each pull fetches.
HAND_WRITTEN_SOURCE = "bench.side_by_side, 2026-12-05: the CUDA 13.0 runtime image (torch 2.14.1, Python 3.11)"
HAND_WRITTEN = (
    ("into an empty node", 3_408, 3_039),
    ("holding yesterday's nightly (only torch changed)", 3_325, 508),
    ("holding the Python 3.13 image", 3_408, 930),
)


@dataclass(frozen=True)
class Verdict:
    """A badge: state (a CSS class: passed, signed, failed, not-run, unknown), its short text and why."""

    state: str
    text: str
    detail: str = ""


@dataclass(frozen=True)
class LayerRow:
    layer: BuiltLayer
    sharers: tuple[str, ...]  # the other images of the site holding it (the twin first), at most SHARERS_SHOWN
    more: int  # how many more hold it


@dataclass(frozen=True)
class ImagePage:
    target: Target
    fingerprint: str
    path: str  # relative to the site's root
    evidence: Evidence
    smoke: Verdict
    gpu_test: Verdict
    floating: tuple[str, ...]  # floating tag names: those the reports moved, else those the plan would move
    floating_moved: bool
    twins: tuple[Target, ...]
    other_vendor: Finding | None  # why it runs on the CPU on the other vendor's GPUs
    docker: str
    podman: str
    kube: Mapping  # its Job's container and placement (core/host/kube.py), as `buildkit kube` writes them; {} but for runtime images
    layers: tuple[LayerRow, ...]
    pull: BarChart | None
    previous: Evidence | None
    diff: PackageDiff | None  # None: no SBOM of both nights
    python_packages: tuple[Package, ...]
    os_packages: tuple[Package, ...]
    packages_left_out: int

    @property
    def vendor(self) -> str:
        return of_vendor(self.target.vendor).display

    @property
    def backend(self) -> str:
        return backend_label(self.target)

    @property
    def changed(self) -> str:
        """The day the image last changed (its created label), YYYY-MM-DD; "" when no document says."""
        return self.evidence.created[:10]


@dataclass(frozen=True)
class MatrixRow:
    torch: str
    python: str
    flavor: str
    pair: str
    images: tuple[ImagePage, ...]  # NVIDIA's first, newest backend first


@dataclass(frozen=True)
class MatrixPage:
    path: str  # "" for the part shown on the index
    title: str
    rows: tuple[MatrixRow, ...]


@dataclass(frozen=True)
class Counts:
    images: int
    pairs: int
    reported: int
    smoke_passed: int
    smoke_failed: int
    gpu_signed: int


@dataclass(frozen=True)
class Site:
    generated: str
    repositories: tuple[str, ...]
    images: tuple[ImagePage, ...]
    matrix: tuple[MatrixPage, ...]  # one with path "" when the whole matrix is on the index
    chooser: Chooser
    sizes: BarChart | None
    hand_written: BarChart
    counts: Counts
    notes: tuple[str, ...]

    @property
    def inline_matrix(self) -> MatrixPage | None:
        return self.matrix[0] if len(self.matrix) == 1 and not self.matrix[0].path else None


def image_path(target: Target) -> str:
    """A target id is a tag name (the matrix's grammar): a safe file name as it is."""
    return f"images/{target.id}.html"


def smoke_verdict(evidence: Evidence) -> Verdict:
    if evidence.smoke is True:
        return Verdict("passed", "passed", evidence.kernels or f"the {evidence.status or 'last'} report says so")
    if evidence.smoke is False:
        return Verdict("failed", "failed", evidence.error or evidence.status)
    if evidence.status:
        return Verdict("failed" if evidence.status == "failed" else "unknown", evidence.status, evidence.error)
    return Verdict("unknown", "—", "")


def gpu_verdict(evidence: Evidence) -> Verdict:
    """Signed (a passing GPU test attestation whose signature was checked), passed (one not checked, or kernels
    that ran on the build host's GPU), failed (the smoke test failed), else not run."""
    if evidence.gpu_tests:
        if evidence.signatures_checked:
            return Verdict("signed", "signed", evidence.gpu_tests[0])
        return Verdict("passed", "passed", f"{evidence.gpu_tests[0]} (signature not checked)")
    if evidence.smoke is True and evidence.kernels.startswith("ran"):
        return Verdict("passed", "passed", f"kernels {evidence.kernels} in the build; no signed record")
    if evidence.smoke is False or evidence.kernels == "failed":
        return Verdict("failed", "failed", evidence.error or evidence.kernels)
    check = evidence.check("gpu test")
    if check is None and not evidence.status:
        return Verdict("unknown", "—", "")  # no document says anything of its GPU test
    return Verdict("not-run", "not run", check.detail if check else evidence.kernels or "no GPU test in the documents")


def _floating(target: Target, evidence: Evidence) -> tuple[tuple[str, ...], bool]:
    """Floating tag names the reports say point at the image, else those the plan would move (not moved)."""
    moved = tuple(tag.rpartition(":")[2] for tag in evidence.tags if tag.rpartition(":")[2] != target.tag_names[0])
    return (moved, True) if moved else (target.tag_names[1:], False)


def _fetched(layers: Sequence[BuiltLayer], held: Sequence[BuiltLayer]) -> int:
    """What a node holding `held` fetches to add `layers`: every layer it lacks."""
    cost = node_costs({"image": list(layers), "held": list(held)})["image"]
    return cost[0].fetched_bytes if cost else sum(layer.size for layer in layers)


def _pull_chart(target: Target, evidence: Evidence, twins: Sequence[tuple[Target, Evidence]], previous: Evidence | None) -> BarChart | None:
    if not evidence.layers:
        return None
    kind = target.vendor
    items = [Item("into an empty node", sum(layer.size for layer in evidence.layers), kind)]
    held = [(twin, found) for twin, found in twins if found.layers and found.layers_compressed == evidence.layers_compressed]
    if held:
        cheapest = min(held, key=lambda pair: _fetched(evidence.layers, pair[1].layers))
        items.append(Item(f"holding its twin, {backend_label(cheapest[0])}",
                          _fetched(evidence.layers, cheapest[1].layers), kind))
    if previous is not None and previous.layers and previous.layers_compressed == evidence.layers_compressed:
        items.append(Item("holding yesterday's nightly", _fetched(evidence.layers, previous.layers), kind))
    what = "compressed, as the registry stores them" if evidence.layers_compressed else "uncompressed, as the engine holds them"
    return bar_chart("What a node pulls to run it", f"Bytes of the layers a node fetches ({what}), by what it already holds.",
                     [("", items)])


def _layer_rows(target: Target, evidence: Evidence, holders: Mapping[str, list[str]], twins: Sequence[Target]) -> tuple[LayerRow, ...]:
    twin_ids = {twin.id for twin in twins}
    rows = []
    for layer in evidence.layers:
        others = [held for held in dict.fromkeys(holders.get(layer.digest, ())) if held != target.id] if layer.size >= SHARED_LAYER_MIN else []
        others.sort(key=lambda held: held not in twin_ids)
        rows.append(LayerRow(layer, tuple(others[:SHARERS_SHOWN]), max(0, len(others) - SHARERS_SHOWN)))
    return tuple(rows)


def _kube(target: Target, compat: Compat) -> Mapping:
    """The Job's container image and GPU request and its node affinity: the lines that place it on its GPUs."""
    objects, _ = workload(target, target.tags[0], KubeOptions(), compat)
    pod = objects[-1]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    placed: dict = {"containers": [{"name": container["name"], "image": container["image"], "resources": container["resources"]}]}
    if "affinity" in pod:
        placed["affinity"] = pod["affinity"]
    return placed


def _matrix(images: Sequence[ImagePage]) -> tuple[MatrixPage, ...]:
    groups: dict[tuple[str, str, str], list[ImagePage]] = {}
    for page in images:
        target = page.target
        groups.setdefault((target.torch, target.python, target.flavor), []).append(page)
    rank = {vendor.name: index for index, vendor in enumerate(VENDORS)}
    rows = [MatrixRow(torch, python, flavor, next((p.target.pair for p in pages if p.target.pair), "") or "",
                      tuple(sorted(pages, key=lambda p: (rank[p.target.vendor], -_version(p.target.backend_version), p.target.family))))
            for (torch, python, flavor), pages in groups.items()]
    rows.sort(key=lambda row: (-_version(row.torch), -_version(row.python), row.flavor != RUNTIME, row.flavor))
    if len(images) <= MATRIX_PER_PAGE:
        return (MatrixPage("", "All images", tuple(rows)),)
    pages: list[MatrixPage] = []
    for torch in dict.fromkeys(row.torch for row in rows):
        parts: list[list[MatrixRow]] = [[]]
        for row in (row for row in rows if row.torch == torch):
            if parts[-1] and sum(len(r.images) for r in parts[-1]) + len(row.images) > MATRIX_PER_PAGE:
                parts.append([])
            parts[-1].append(row)
        for number, part in enumerate(parts, 1):
            suffix = f"-{number}" if len(parts) > 1 else ""
            title = f"torch {torch}" + (f", part {number} of {len(parts)}" if len(parts) > 1 else "")
            pages.append(MatrixPage(f"matrix/torch-{torch}{suffix}.html", title, tuple(part)))
    return tuple(pages)


def _version(text: str) -> float:
    """A sortable number for a version (2.14.1 -> 2.0141): versions of one kind compare right; bad ones sort last."""
    try:
        release = Version(text).release
    except ValueError:
        return -1.0
    return sum(part / 100 ** index for index, part in enumerate(release[:4]))


def _sizes(images: Sequence[ImagePage]) -> BarChart | None:
    """Image size per GPU family: the runtime images of the newest torch releases with sizes, one Python each."""
    sized = [page for page in images if page.target.flavor == "runtime" and page.evidence.size]
    groups = []
    for torch in sorted({page.target.torch for page in sized}, key=Version, reverse=True)[:3]:
        of_torch = [page for page in sized if page.target.torch == torch]
        python = max({page.target.python for page in of_torch}, key=Version)
        chosen = sorted((page for page in of_torch if page.target.python == python),
                        key=lambda p: (-of_vendor(p.target.vendor).routing_rank, -_version(p.target.backend_version), p.target.family))
        groups.append((f"torch {torch}, Python {python}", [Item(page.backend, page.evidence.size or 0, page.target.vendor) for page in chosen]))
    return bar_chart("Image size per GPU family", "The size of each runtime image, by the GPUs it is built for.", groups)


def _hand_written() -> BarChart:
    groups = [(scenario, [Item("hand-written Dockerfile", by_hand * 1_000_000, "hand"), Item("buildkit", ours * 1_000_000, "nvidia")])
              for scenario, by_hand, ours in HAND_WRITTEN]
    chart = bar_chart("What a node pulls, against a hand-written image", f"Measured by {HAND_WRITTEN_SOURCE}.", groups)
    assert chart is not None  # the groups are constants
    return chart


@dataclass(frozen=True)
class _Context:
    """What every image page is made with: the matrix's compatibility data, the documents of both nights, the
    images that hold each layer, and each vendor's run lines up to the image (run --print's)."""

    compat: Compat
    today: Mapping[str, Evidence]
    previous: Mapping[str, Evidence]
    gpus: tuple[GpuModel, ...]
    holders: Mapping[str, list[str]]  # layer digest -> the targets whose layers hold it
    lines: Mapping[str, tuple[str, str]]  # vendor -> docker and podman lines without the image

    def evidence(self, target: Target) -> Evidence:
        return self.today.get(target.id, Evidence(target.id))


def _context(targets: Sequence[Target], compat: Compat, today: Mapping[str, Evidence], previous: Mapping[str, Evidence]) -> _Context:
    holders: dict[str, list[str]] = {}
    for target in targets:
        for layer in today.get(target.id, Evidence(target.id)).layers:
            holders.setdefault(layer.digest, []).append(target.id)
    gpus = gpu_models(compat)
    lines = {}
    for vendor in VENDORS:
        model = next((gpu for gpu in gpus if gpu.vendor == vendor.name), None)
        if model is not None:  # the flags depend on the vendor only, not on which of its GPUs
            lines[vendor.name] = (run_prefix("docker", vendor.name, model_host(model, compat)),
                                  run_prefix("podman", vendor.name, model_host(model, compat, PODMAN)))
    return _Context(compat, today, previous, gpus, holders, lines)


def _image_page(item: PlannedImage, twins: tuple[Target, ...], context: _Context) -> ImagePage:
    target = item.target
    evidence = context.evidence(target)
    before = context.previous.get(target.id)
    floating, moved = _floating(target, evidence)
    packages = evidence.packages[:PACKAGES_SHOWN]
    docker, podman = context.lines.get(target.vendor, ("docker run --rm -it", "podman run --rm -it"))
    reference = command_line(target.tags[0])
    return ImagePage(
        target=target, fingerprint=item.fingerprint, path=image_path(target), evidence=evidence,
        smoke=smoke_verdict(evidence), gpu_test=gpu_verdict(evidence), floating=floating, floating_moved=moved, twins=twins,
        other_vendor=on_other_vendor(target, twins, context.gpus, context.compat), docker=f"{docker} {reference}",
        podman=f"{podman} {reference}", kube=_kube(target, context.compat) if target.flavor == RUNTIME else {},
        layers=_layer_rows(target, evidence, context.holders, twins),
        pull=_pull_chart(target, evidence, [(twin, context.evidence(twin)) for twin in twins], before), previous=before,
        diff=package_diff(before.packages, evidence.packages) if before and before.packages and evidence.packages else None,
        python_packages=tuple(p for p in packages if p.ecosystem == "pypi"), os_packages=tuple(p for p in packages if p.ecosystem == "deb"),
        packages_left_out=len(evidence.packages) - len(packages),
    )


def build_site(planned: Sequence[PlannedImage], compat: Compat, today: Mapping[str, Evidence], previous: Mapping[str, Evidence],
               generated: str) -> Site:
    """The site for the planned targets, tonight's documents (`today`, by target) and the previous nightly's."""
    targets = [item.target for item in planned]
    by_pair: dict[str, list[Target]] = {}
    for target in targets:
        if target.pair:
            by_pair.setdefault(target.pair, []).append(target)
    context = _context(targets, compat, today, previous)
    images = [_image_page(item, tuple(t for t in by_pair.get(item.target.pair or "", ()) if t.vendor != item.target.vendor), context)
              for item in planned]
    outside = sorted(set(today) - {target.id for target in targets})
    notes: tuple[str, ...] = ()
    if outside:  # ids from documents: shown as text, whatever they hold
        notes = (f"{len(outside)} image(s) of the documents are not targets of this matrix and are left out: "
                 f"{', '.join(printable(name, 80) for name in outside[:3])}{' …' if len(outside) > 3 else ''}",)
    counts = Counts(
        images=len(images), pairs=len(by_pair), reported=sum(1 for page in images if page.target.id in today),
        smoke_passed=sum(1 for page in images if page.smoke.state == "passed"),
        smoke_failed=sum(1 for page in images if page.smoke.state == "failed"),
        gpu_signed=sum(1 for page in images if page.gpu_test.state == "signed"),
    )
    pages = {target.id: image_path(target) for target in targets}
    facts = {page.target.id: {"smoke": [page.smoke.state, page.smoke.text], "gpu": [page.gpu_test.state, page.gpu_test.text],
                              "size": page.evidence.size} for page in images if page.target.id in today}
    return Site(generated, tuple(sorted({target.image_name for target in targets})), tuple(images), _matrix(images),
                chooser(targets, compat, pages, facts), _sizes(images), _hand_written(), counts, notes)
