"""The nightly's site as values: the pair matrix, a page per row of it, the chooser and the charts, made from the
planned targets and what the documents of tonight's run (and the previous nightly's) say about them.

An image's facts are on its row's page (a torch release, a Python and a flavor: the CUDA images and their ROCm
twins side by side), so what the images of a row share is written once: the page itself, why they would run on
the CPU on the other vendor's GPUs, the supply-chain checks, package lists and missing documents they have alike.
What images of many rows share is written once for the whole site and referred to: the package lists most images
of a kind have (core/site/packages.py), the Kubernetes GPU request and node affinity of a backend
(core/site/placements.py), and the images holding a layer, named as the group they make (core/site/holders.py).

Pages are split so none grows with the matrix beyond a bound: the pair matrix is on the index up to
MATRIX_PER_PAGE images, else on pages of at most that many images (one torch release after another); a row's
page holds at most ROW_PAGE_IMAGES images, each with at most PACKAGES_SHOWN packages and SHARERS_SHOWN sharers
of a layer named. Nothing here is HTML: the templates (buildkit/ui/site/) turn these values into pages,
escaping every one of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from packaging.version import Version

from buildkit.core.release.layer_sharing import BuiltLayer, node_costs
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
    tag_of,
)
from buildkit.core.site.diff import PackageDiff, package_diff
from buildkit.core.site.evidence import Evidence
from buildkit.core.site.holders import Holders, Sharing
from buildkit.core.site.packages import BaseList, Kind, PackageList, base_lists, package_lists
from buildkit.core.site.placements import Placement, Placements
from buildkit.core.vendors import VENDORS, of_vendor
from buildkit.errors import printable

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Mapping, Sequence

    from buildkit.core.compat.facts import Compat
    from buildkit.core.render.planned import PlannedImage
    from buildkit.core.targets.plan import Target

MATRIX_PER_PAGE = 300  # images in one page of the pair matrix (the default matrix's 132 fit on the index)
ROW_PAGE_IMAGES = 12  # images on one row's page (the default matrix's rows have up to 10: CUDA 12.6 to 13.0, ROCm 7.2 and 7.14's families)
PACKAGES_SHOWN = 1500  # packages an image's part of a page lists (beyond its base list), and a base list; its SBOM has them all
SHARERS_SHOWN = 2  # images named beside a layer they share when they make no group; the rest counted
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
    holders: Holders  # the other images of the site holding it


@dataclass(frozen=True)
class ImageEntry:
    """One image's part of its row's page."""

    target: Target
    fingerprint: str
    page: str  # its row's page, relative to the site's root
    evidence: Evidence
    smoke: Verdict
    gpu_test: Verdict
    floating: tuple[str, ...]  # floating tag names: those the reports moved, else those the plan would move
    floating_moved: bool
    twins: tuple[Target, ...]
    docker: str
    podman: str
    placement: str  # the link to its Job's GPU request and node affinity; "" but for runtime images
    pull: tuple[Item, ...]  # what a node pulls to run it: into an empty node, holding its cheapest twin, yesterday's nightly
    layers: tuple[LayerRow, ...]
    previous: Evidence | None
    diff: PackageDiff | None  # None: no SBOM of both nights
    packages: tuple[PackageList, ...]  # per ecosystem, against its kind's base list

    @property
    def href(self) -> str:
        return f"{self.page}#{self.target.id}"

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

    @property
    def missing(self) -> tuple[str, ...]:
        """The documents of it the site was not given."""
        lacking = {
            "report": not self.evidence.status,
            "SBOM": not self.packages,
            "verification": not self.evidence.checks,
            "SBOM of the previous nightly": self.diff is None,
        }
        return tuple(what for what, lacks in lacking.items() if lacks)


@dataclass(frozen=True)
class OtherVendor:
    """Why images of a row run on the CPU on the other vendor's GPUs (doctor's finding), said once for those it
    is the same for."""

    gpus: str  # the other vendor: NVIDIA | AMD
    text: str
    images: tuple[ImageEntry, ...]


@dataclass(frozen=True)
class Shared:
    """What several images of a page have alike (a supply-chain check, a package list, the documents it lacks)."""

    item: Any
    images: tuple[ImageEntry, ...]


@dataclass(frozen=True)
class Said:
    """What a page says of its images: once for the images it is the same for, else for each its own."""

    shared: tuple[Shared, ...]
    own: Mapping[str, tuple[Any, ...]]  # target id -> what no other image of the page shares


@dataclass(frozen=True)
class MatrixRow:
    torch: str
    python: str
    flavor: str
    pair: str
    images: tuple[ImageEntry, ...]  # NVIDIA's first, newest backend first


@dataclass(frozen=True)
class RowPage:
    """A row of the pair matrix (or a part of a long one), its images side by side."""

    path: str
    title: str
    row: MatrixRow
    images: tuple[ImageEntry, ...]
    other_vendor: tuple[OtherVendor, ...]
    checks: Said  # of Check
    packages: Said  # of PackageList
    missing: Said  # of the tuple of documents an image lacks

    @property
    def placed(self) -> tuple[tuple[str, tuple[ImageEntry, ...]], ...]:
        """Each Kubernetes placement of the page's runtime images (its link) and the images placed so, in the page's order."""
        found: dict[str, list[ImageEntry]] = {}
        for image in self.images:
            if image.placement:
                found.setdefault(image.placement, []).append(image)
        return tuple((link, tuple(images)) for link, images in found.items())


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
    pages: tuple[RowPage, ...]
    matrix: tuple[MatrixPage, ...]  # one with path "" when the whole matrix is on the index
    chooser: Chooser
    sizes: BarChart | None
    hand_written: BarChart
    counts: Counts
    notes: tuple[str, ...]
    bases: tuple[BaseList, ...]  # the package lists images refer to
    placements: tuple[Placement, ...]  # the GPU requests and node affinities images refer to

    @property
    def inline_matrix(self) -> MatrixPage | None:
        return self.matrix[0] if len(self.matrix) == 1 and not self.matrix[0].path else None

    @property
    def images(self) -> tuple[ImageEntry, ...]:
        return tuple(image for page in self.pages for image in page.images)


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


def _version(text: str) -> float:
    """A sortable number for a version (2.14.1 -> 2.0141): versions of one kind compare right; bad ones sort last."""
    try:
        release = Version(text).release
    except ValueError:
        return -1.0
    number: float = sum(part / 100**index for index, part in enumerate(release[:4]))  # (int ** int is typed Any: a power may be a float)
    return number


def _rows(targets: Sequence[Target]) -> list[tuple[tuple[str, str, str], list[Target]]]:
    """The pair matrix's rows (torch, Python, flavor), newest first, runtime first; in each NVIDIA's images first,
    newest backend first."""
    groups: dict[tuple[str, str, str], list[Target]] = {}
    for target in targets:
        groups.setdefault((target.torch, target.python, target.flavor), []).append(target)
    rank = {vendor.name: index for index, vendor in enumerate(VENDORS)}
    for members in groups.values():
        members.sort(key=lambda t: (rank[t.vendor], -_version(t.backend_version), t.family))
    return sorted(groups.items(), key=lambda row: (-_version(row[0][0]), -_version(row[0][1]), row[0][2] != RUNTIME, row[0][2]))


def _parts(members: Sequence[Target]) -> list[Sequence[Target]]:
    return [members[start : start + ROW_PAGE_IMAGES] for start in range(0, len(members), ROW_PAGE_IMAGES)]


def _row_path(row: tuple[str, str, str], part: int, parts: int) -> str:
    """images/2.15.0-py3.12-runtime.html: a row's values are parts of its images' tags (the matrix's grammar), a
    safe file name as they are."""
    torch, python, flavor = row
    return f"images/{torch}-py{python}-{flavor}{f'-{part}' if parts > 1 else ''}.html"


def _row_title(row: tuple[str, str, str], part: int, parts: int) -> str:
    torch, python, flavor = row
    return f"torch {torch} · Python {python} · {flavor}" + (f", part {part} of {parts}" if parts > 1 else "")


def _sizes(images: Sequence[ImageEntry]) -> BarChart | None:
    """Image size per GPU family: the runtime images of the newest torch releases with sizes, one Python each."""
    sized = [image for image in images if image.target.flavor == RUNTIME and image.evidence.size]
    groups = []
    for torch in sorted({image.target.torch for image in sized}, key=Version, reverse=True)[:3]:
        of_torch = [image for image in sized if image.target.torch == torch]
        python = max({image.target.python for image in of_torch}, key=Version)
        chosen = sorted(
            (image for image in of_torch if image.target.python == python),
            key=lambda i: (-of_vendor(i.target.vendor).routing_rank, -_version(i.target.backend_version), i.target.family),
        )
        groups.append((f"torch {torch}, Python {python}", [Item(image.backend, image.evidence.size or 0, image.target.vendor) for image in chosen]))
    return bar_chart("Image size per GPU family", "The size of each runtime image, by the GPUs it is built for.", groups)


def _hand_written() -> BarChart:
    groups = [
        (scenario, [Item("hand-written Dockerfile", by_hand * 1_000_000, "hand"), Item("buildkit", ours * 1_000_000, "nvidia")])
        for scenario, by_hand, ours in HAND_WRITTEN
    ]
    chart = bar_chart("What a node pulls, against a hand-written image", f"Measured by {HAND_WRITTEN_SOURCE}.", groups)
    assert chart is not None  # the groups are constants
    return chart


@dataclass(frozen=True)
class _Context:
    """What every image's part is made with: the matrix's compatibility data, the documents of both nights, the
    images that hold each layer, each vendor's run lines up to the image (run --print's), the package lists
    and node affinities images refer to."""

    compat: Compat
    today: Mapping[str, Evidence]
    previous: Mapping[str, Evidence]
    gpus: tuple[GpuModel, ...]
    sharing: Sharing
    lines: Mapping[str, tuple[str, str]]  # vendor -> docker and podman lines without the image
    bases: Mapping[tuple[str, Kind], BaseList]  # (ecosystem, kind of image) -> its base list
    placements: Placements

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
            lines[vendor.name] = (
                run_prefix("docker", vendor.name, model_host(model, compat)),
                run_prefix("podman", vendor.name, model_host(model, compat, PODMAN)),
            )
    packages = {target.id: today[target.id].packages for target in targets if target.id in today}
    return _Context(
        compat, today, previous, gpus, Sharing(targets, holders, SHARERS_SHOWN), lines, base_lists(targets, packages, PACKAGES_SHOWN), Placements(compat)
    )


def _layer_rows(target: Target, evidence: Evidence, twins: Sequence[Target], sharing: Sharing) -> tuple[LayerRow, ...]:
    twin_ids = [twin.id for twin in twins]
    return tuple(
        LayerRow(layer, sharing.of(layer.digest, target, twin_ids) if layer.size >= SHARED_LAYER_MIN else Holders("", (), 0)) for layer in evidence.layers
    )


def _entry(item: PlannedImage, twins: tuple[Target, ...], page: str, context: _Context) -> ImageEntry:
    target = item.target
    evidence = context.evidence(target)
    before = context.previous.get(target.id)
    floating, moved = _floating(target, evidence)
    docker, podman = context.lines.get(target.vendor, ("docker run --rm -it", "podman run --rm -it"))
    reference = command_line(target.tags[0])
    return ImageEntry(
        target=target,
        fingerprint=item.fingerprint,
        page=page,
        evidence=evidence,
        smoke=smoke_verdict(evidence),
        gpu_test=gpu_verdict(evidence),
        floating=floating,
        floating_moved=moved,
        twins=twins,
        docker=f"{docker} {reference}",
        podman=f"{podman} {reference}",
        placement=context.placements.of(target) if target.flavor == RUNTIME else "",
        pull=_pull(target, evidence, twins, before, context),
        layers=_layer_rows(target, evidence, twins, context.sharing),
        previous=before,
        diff=package_diff(before.packages, evidence.packages) if before and before.packages and evidence.packages else None,
        packages=package_lists(target, evidence.packages, evidence.os_name, context.bases, PACKAGES_SHOWN),
    )


def _pull(target: Target, evidence: Evidence, twins: Sequence[Target], before: Evidence | None, context: _Context) -> tuple[Item, ...]:
    """What a node pulls to run the image: into an empty node, holding its cheapest twin, holding yesterday's
    nightly (bytes of the layers it lacks, compared only with layers measured alike)."""
    if not evidence.layers:
        return ()
    kind = target.vendor
    items = [Item("into an empty node", sum(layer.size for layer in evidence.layers), kind)]
    held = [(twin, found) for twin in twins if (found := context.evidence(twin)).layers and found.layers_compressed == evidence.layers_compressed]
    if held:
        twin, found = min(held, key=lambda pair: _fetched(evidence.layers, pair[1].layers))
        items.append(Item(f"holding its twin, {backend_label(twin)}", _fetched(evidence.layers, found.layers), kind))
    if before is not None and before.layers and before.layers_compressed == evidence.layers_compressed:
        items.append(Item("holding yesterday's nightly", _fetched(evidence.layers, before.layers), kind))
    return tuple(items)


def _said(images: Sequence[ImageEntry], items: Callable[[ImageEntry], Sequence[Hashable]]) -> Said:
    """Each item several images of a page have, once; and each image's others."""
    found: dict[Hashable, list[ImageEntry]] = {}
    for image in images:
        for item in items(image):
            found.setdefault(item, []).append(image)
    shared = tuple(Shared(item, tuple(members)) for item, members in found.items() if len(members) > 1)
    said = {entry.item for entry in shared}
    return Said(shared, {image.target.id: tuple(item for item in items(image) if item not in said) for image in images})


def _other_vendor(images: Sequence[ImageEntry], context: _Context) -> tuple[OtherVendor, ...]:
    """Doctor's finding about each image on a host with only the other vendor's GPUs, the image's own name in it
    said as "it" (or "each" for several), so images it is the same for share it."""
    found: dict[tuple[str, str, bool], list[ImageEntry]] = {}
    for image in images:
        finding = on_other_vendor(image.target, image.twins, context.gpus, context.compat)
        if finding is None:
            continue
        other = next(vendor for vendor in VENDORS if vendor.name != image.target.vendor)
        reference = tag_of(image.target)
        named = finding.title.startswith(reference)
        found.setdefault((other.display, finding.title[len(reference) :] if named else finding.title, named), []).append(image)
    return tuple(
        OtherVendor(gpus, (("it" if len(members) == 1 else "each") if named else "") + text, tuple(members)) for (gpus, text, named), members in found.items()
    )


def _row_page(path: str, title: str, row: MatrixRow, images: Sequence[ImageEntry], context: _Context) -> RowPage:
    return RowPage(
        path,
        title,
        row,
        tuple(images),
        _other_vendor(images, context),
        _said(images, lambda image: image.evidence.checks),
        _said(images, lambda image: image.packages),
        _said(images, lambda image: (image.missing,) if image.missing else ()),
    )


def _matrix(rows: Sequence[MatrixRow], images: int) -> tuple[MatrixPage, ...]:
    if images <= MATRIX_PER_PAGE:
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


def build_site(planned: Sequence[PlannedImage], compat: Compat, today: Mapping[str, Evidence], previous: Mapping[str, Evidence], generated: str) -> Site:
    """The site for the planned targets, tonight's documents (`today`, by target) and the previous nightly's."""
    targets = [item.target for item in planned]
    by_pair: dict[str, list[Target]] = {}
    for target in targets:
        if target.pair:
            by_pair.setdefault(target.pair, []).append(target)
    rows = _rows(targets)
    # each row's pages: (path, title, its targets)
    parts = {
        key: [(_row_path(key, number, len(split)), _row_title(key, number, len(split)), part) for number, part in enumerate(split, 1)]
        for key, members in rows
        for split in [_parts(members)]
    }
    paths = {target.id: path for split in parts.values() for path, _, part in split for target in part}
    context = _context(targets, compat, today, previous)
    entries = {
        item.target.id: _entry(
            item, tuple(t for t in by_pair.get(item.target.pair or "", ()) if t.vendor != item.target.vendor), paths[item.target.id], context
        )
        for item in planned
    }
    matrix_rows = [MatrixRow(*key, next((t.pair for t in members if t.pair), "") or "", tuple(entries[t.id] for t in members)) for key, members in rows]
    pages = [
        _row_page(path, title, matrix_row, [entries[target.id] for target in part], context)
        for matrix_row, (key, _) in zip(matrix_rows, rows)
        for path, title, part in parts[key]
    ]
    images = list(entries.values())
    outside = sorted(set(today) - set(entries))
    notes: tuple[str, ...] = ()
    if outside:  # ids from documents: shown as text, whatever they hold
        notes = (
            f"{len(outside)} image(s) of the documents are not targets of this matrix and are left out: "
            f"{', '.join(printable(name, 80) for name in outside[:3])}{' …' if len(outside) > 3 else ''}",
        )
    counts = Counts(
        images=len(images),
        pairs=len(by_pair),
        reported=sum(1 for image in images if image.target.id in today),
        smoke_passed=sum(1 for image in images if image.smoke.state == "passed"),
        smoke_failed=sum(1 for image in images if image.smoke.state == "failed"),
        gpu_signed=sum(1 for image in images if image.gpu_test.state == "signed"),
    )
    facts = {
        image.target.id: {"smoke": [image.smoke.state, image.smoke.text], "gpu": [image.gpu_test.state, image.gpu_test.text], "size": image.evidence.size}
        for image in images
        if image.target.id in today
    }
    bases = tuple({base.path: base for base in context.bases.values()}.values())
    return Site(
        generated,
        tuple(sorted({target.image_name for target in targets})),
        tuple(pages),
        _matrix(matrix_rows, len(images)),
        chooser(targets, compat, {image.target.id: image.href for image in images}, facts),
        _sizes(images),
        _hand_written(),
        counts,
        notes,
        tuple(sorted(bases, key=lambda base: base.path)),
        context.placements.placements(),
    )
