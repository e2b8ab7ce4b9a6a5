"""`buildkit report --html`: the site of a matrix and a run's documents, through the real CLI.

The documents are written by the functions the real commands write them with (testkit.site_documents); the
chooser is held to `buildkit run --print` on the same host trees; bad documents are one message and nothing
written; hostile values are escaped; a 10,000-target matrix is split into pages none of which is over 2 MB.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from buildkit.app.targets import Choices, select_targets
from buildkit.core.release.layer_sharing import BuiltLayer
from buildkit.core.site.charts import LABEL_WIDTH, WIDTH, Item, bar_chart
from buildkit.core.site.chooser import CHOOSER_RELEASES, GpuModel, chooser, gpu_models
from buildkit.core.site.diff import package_diff
from buildkit.core.site.evidence import Evidence, gather
from buildkit.core.site.holders import Sharing
from buildkit.core.site.model import PAGE_LIMIT
from buildkit.core.site.packages import base_lists, package_lists
from buildkit.core.site.placements import Placements
from buildkit.core.supply_chain.sbom import Package
from testkit import hosts
from testkit import site_documents as documents

PAIR = ["--select", "torch=2.14.1", "--select", "python=3.12"]  # 2.14.1's Python 3.12 images of the default matrix


def planned(*selectors: str):
    return select_targets(Choices(selectors=selectors)).plan()


def write(folder: Path, name: str, document: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(json.dumps(document))
    return folder / name


@pytest.fixture
def run_documents(tmp_path):
    """Tonight's documents of 2.14.1 / Python 3.12: a build report (one ROCm image failed), SBOMs and
    verifications of the others; and the previous nightly's (numpy older, pillow since removed)."""
    items = planned("torch=2.14.1", "python=3.12")
    failed = next(i.target.id for i in items if i.target.vendor == "amd" and i.target.backend_version == "7.2" and i.target.flavor == "runtime")
    today, before = tmp_path / "tonight", tmp_path / "previous"
    write(today, "report.json", documents.build_report([i.target for i in items], failed=[failed], day="2"))
    write(before, "report.json", documents.build_report([i.target for i in items], day="1"))
    for item in items:
        if item.target.id != failed:
            write(today / "sbom", f"{item.target.id}.json", documents.sbom(item, day="2"))
            write(today / "verify", f"{item.target.id}.json", documents.verification(item, day="2"))
        write(before / "sbom", f"{item.target.id}.json", documents.sbom(item, day="1"))
        write(before / "verify", f"{item.target.id}.json", documents.verification(item, day="1"))
    return items, today, before, failed


def page_text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def image_part(site: Path, target_id: str) -> str:
    """An image's part of the site, as the index links to it: its section of its row's page."""
    found = re.search(f'href="(images/[^"#]+)#{re.escape(target_id)}"', page_text(site / "index.html"))
    assert found, f"the index does not link {target_id}"
    page = page_text(site / found.group(1))
    start = page.index(f'<section id="{target_id}">')
    return page[start : page.index("</section>", start)]


# --- the command ---------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_site_of_a_run(cli, tmp_path, run_documents):
    items, today, before, failed = run_documents
    out = tmp_path / "site"
    result = cli("report", "--html", out, *PAIR, "--from", today, "--previous", before)
    assert result.code == 0, result.err
    assert f"into {out}/" in result.out
    for item in items:  # every image is listed, and has its part of its row's page
        assert f'<h2 class="{item.target.vendor}">' in image_part(out, item.target.id)
    cuda = next(i for i in items if i.target.vendor == "nvidia" and i.target.flavor == "runtime" and i.target.pair)
    page = image_part(out, cuda.target.id)
    assert '<span class="b signed"' in page and "H100 SXM5 80GB (sm_90)" in page  # its signed GPU test, and where it ran
    assert "upgraded <code>numpy</code> <del>2.3.5</del> → <ins>2.4.0</ins>" in page  # since the previous nightly
    assert "removed <code>pillow</code>" in page
    assert "holding yesterday&#39;s nightly" in page and "holding its twin" in page  # what a node pulls
    assert "docker run --rm -it --gpus all --shm-size 8g " + cuda.target.tags[0] in page
    assert f"<code>torch</code>&nbsp;2.14.1+cu{cuda.target.backend_version.replace('.', '')}" in page  # its own packages
    row = page_text(out / "images" / "2.14.1-py3.12-runtime.html")
    # what the row's images have alike is said once: the failed image has no verification
    assert row.count("verified with cosign.pub") == 1 and "verified with cosign.pub (every image here but ROCm 7.2)" in row
    assert re.search(r"Not on NVIDIA GPUs</strong> \(ROCm 7\.14 mi200, [^)]*\): each is a ROCm image and this host has only NVIDIA GPUs", row)
    kube = re.search(r'href="\.\./(kubernetes\.html#[^"]+)">CUDA', row)
    assert kube and "nvidia.com/gpu: 1" in page_text(out / kube.group(1).partition("#")[0])  # its GPU request, once for its backend
    base = re.search(r'of <a href="\.\./(packages/deb-[0-9]+\.html)">the list most ', row)
    assert base and "<code>libnuma1</code> 2.0.16-1" in page_text(out / base.group(1))  # the Debian packages the images share, once
    broken = image_part(out, failed)
    assert '<span class="b failed"' in broken and "pip could not install torch==2.14.1" in broken
    assert not list(out.rglob("*.tmp*"))


def test_the_matrix_alone_is_a_site(cli, tmp_path):
    out = tmp_path / "site"
    result = cli("report", "--html", out, "--select", "torch=2.13.0")
    assert result.code == 0, result.err
    assert "No report of a run was given" in page_text(out / "index.html")


@pytest.mark.parametrize(
    "content, says",
    [
        ("{not json", "is not JSON (line 1, column 2)"),
        ('{"targets": []}', "is not a build or publish report"),
        ("[1, 2]", "its JSON is not an object"),
        ('{"engine": "x", "targets": [{"id": "a", "size": "big"}]}', "targets[0].size: expected a whole number of bytes, got 'big'"),
        ('{"engine": "x", "targets": [{"id": "a", "smoke": {"passed": "yes"}}]}', "targets[0].smoke.passed: expected true or false"),
        ('{"bomFormat": "CycloneDX", "components": []}', "an SBOM of an image without the dev.buildkit.target label"),
    ],
    ids=["truncated", "unknown-shape", "not-an-object", "wrong-type", "wrong-bool", "foreign-sbom"],
)
def test_a_corrupt_document_is_named_and_nothing_is_written(cli, tmp_path, content, says):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "report.json").write_text(content)
    result = cli("report", "--html", tmp_path / "site", *PAIR, "--from", tmp_path / "docs")
    assert result.code == 2
    assert result.err.count("\n") == 1 and result.err.startswith(f"error: {tmp_path / 'docs' / 'report.json'}"), result.err
    assert says in result.err
    assert not (tmp_path / "site").exists()


def test_a_missing_document_is_named(cli, tmp_path):
    result = cli("report", "--html", tmp_path / "site", *PAIR, "--from", tmp_path / "publish.json")
    assert result.code == 2 and result.err.count("\n") == 1
    assert f"--from: {tmp_path / 'publish.json'}: no such file or folder" in result.err
    assert not (tmp_path / "site").exists()


@pytest.mark.slow
def test_the_folder_is_written_as_render_writes_its_tree(cli, tmp_path):
    """Each file whole (never half-written), a foreign file in the way refused before anything is written, and
    the pages an earlier site had that this one has not removed, nothing else."""
    out = tmp_path / "site"
    assert cli("report", "--html", out, "--select", "torch=2.14.1").code == 0
    (out / "notes.txt").write_text("mine")
    assert cli("report", "--html", out, *PAIR).code == 0
    assert (out / "notes.txt").read_text() == "mine"
    pages = {path.name for path in (out / "images").iterdir()}
    assert pages == {f"2.14.1-py3.12-{item.target.flavor}.html" for item in planned("torch=2.14.1", "python=3.12")}
    (out / "images" / "2.14.1-py3.11-runtime.html").write_text("someone's own page")
    result = cli("report", "--html", out, "--select", "torch=2.14.1")
    assert result.code == 2 and "2.14.1-py3.11-runtime.html" in result.err
    assert (out / "images" / "2.14.1-py3.11-runtime.html").read_text() == "someone's own page"


# --- hostile documents ---------------------------------------------------------------------------------------

BIDI = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: would show "runtime" reversed after it
HOSTILE = f'<script>alert("x")</script>\'"{BIDI}evil'


class _Elements(HTMLParser):
    """Every start tag of a page, and its text, as a browser's parser sees them."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.text.append(data)


@pytest.mark.slow
def test_hostile_documents_render_escaped(cli, tmp_path):
    """Names, tags, errors and package metadata from documents carry markup, quotes, a bidi override and a
    10,000-character tag: each page has only the elements its template writes, and shows them as text."""
    items = planned("torch=2.14.1", "python=3.12")
    report = documents.build_report([i.target for i in items], failed=[items[1].target.id])
    report["targets"][0]["tags"].append("registry.example/team:" + "x" * 10_000)
    report["targets"][0]["tags"].append(f"registry.example/team:{HOSTILE}")
    report["targets"][1]["error"] = HOSTILE
    sbom = documents.sbom(items[0])
    sbom["components"].append({"type": "library", "name": HOSTILE, "version": HOSTILE, "purl": f"pkg:pypi/{HOSTILE}@1"})
    write(tmp_path / "docs", "report.json", report)
    write(tmp_path / "docs", "sbom.json", sbom)
    other = documents.build_report([i.target for i in items])
    other["targets"] = [{**other["targets"][0], "id": HOSTILE}]  # not a target of the matrix: left out, said once
    write(tmp_path / "docs", "stray.json", other)
    out = tmp_path / "site"
    result = cli("report", "--html", out, *PAIR, "--from", tmp_path / "docs")
    assert result.code == 0, result.err
    assert "1 image(s) of the documents are not targets of this matrix" in result.err
    for path in out.rglob("*.html"):
        html = page_text(path)
        assert "<script>alert" not in html and BIDI not in html, path
        assert all(len(line) < 40_000 for line in html.splitlines()), path  # the 10,000-character tag is shortened
        parsed = _Elements()
        parsed.feed(html)
        assert set(parsed.tags) <= {
            "html",
            "head",
            "meta",
            "title",
            "link",
            "body",
            "header",
            "a",
            "span",
            "code",
            "main",
            "h1",
            "h2",
            "h3",
            "p",
            "dl",
            "dt",
            "dd",
            "section",
            "pre",
            "details",
            "summary",
            "table",
            "thead",
            "tbody",
            "tr",
            "th",
            "td",
            "div",
            "ul",
            "li",
            "strong",
            "del",
            "ins",
            "footer",
            "figure",
            "svg",
            "desc",
            "text",
            "g",
            "rect",
            "figcaption",
            "form",
            "label",
            "select",
            "option",
            "optgroup",
            "noscript",
            "script",
        }, path
        assert parsed.tags.count("script") <= 2, path  # the index's data block and chooser.js, nothing else
    first = image_part(out, items[0].target.id)
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;&#39;&#34;\\u202eevil" in first  # shown, escaped, the override written out
    assert "x" * 81 not in first and "x" * 80 + "…" in first
    assert "&lt;script&gt;alert" in image_part(out, items[1].target.id)


def test_a_hostile_matrix_is_refused_before_any_page(cli, tmp_path, team_matrix):
    """Matrix values cannot carry markup at all: validation refuses them (exit 2) and no site is written."""
    path = team_matrix('extends = "default"\n[compat.gfx.gfx942]\nproducts = ["<img src=x onerror=alert(1)>"]\n')
    result = cli("report", "--html", tmp_path / "site", "--matrix", path)
    assert result.code == 2 and "compat.gfx.gfx942.products[0]" in result.err
    assert not (tmp_path / "site").exists()


# --- the chooser: run --print's decision ------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("tree, gpu", [("h100", "nvidia:sm_90"), ("mi300x", "amd:gfx942"), ("rx7900xtx", "amd:gfx1100")])
def test_the_chooser_picks_what_run_print_picks_on_that_host(cli, tmp_path, tree, gpu):
    """For each torch release and Python, the image the page names for a GPU is the one `buildkit run --print`
    starts on a host with that GPU, with the same flags (the page reads the render group on the reader's host)."""
    root = getattr(hosts, tree)(tmp_path / tree)
    site = select_targets(Choices())
    found = chooser(site.targets, site.matrix.compat, {})
    row = found.data["rows"][found.data["decisions"][gpu]]
    checked = 0
    for combo, (image, _) in zip(found.data["combos"], row):
        torch, python = combo.split("|")
        printed = cli("run", "--print", "--host-root", root, "--select", f"torch={torch}", "--python", python)
        if image < 0:
            assert printed.code == 2 and "run refused" in printed.err
            continue
        chosen = found.image(image)
        assert printed.code == 0, printed.err
        words = printed.out.split()
        assert words[-1] == chosen["ref"]
        flags = " ".join(words[:-1]).replace("docker run --rm", "docker run --rm -it")
        page = found.data["lines"][chosen["vendor"]]["docker"]
        assert re.sub(r'"\$\(stat -c %g /dev/kfd\)"', "GID", page) == re.sub(r"--group-add ([0-9]+)( |$)", r"--group-add GID\2", flags)
        checked += 1
    assert checked >= 3


def test_chooser_answers_for_old_and_unknown_gpus():
    """A V100 gets the newest CUDA image that still carries sm_70, with routing's note; a GPU no image carries
    gets no image and routing's reason with its fix."""
    site = select_targets(Choices())
    found = chooser(site.targets, site.matrix.compat, {})
    data = found.data
    combo = data["combos"].index("2.14.1|3.12")
    image, notes = data["rows"][data["decisions"]["nvidia:sm_70"]][combo]
    assert found.image(image)["id"] == "2.14.1-cuda12.6-py3.12-runtime"
    assert [data["texts"][note[0]] for note in notes] == ["newer images of the matrix do not fit this GPU, so an older one is picked"]
    image, _ = data["rows"][data["decisions"]["amd:gfx1103"]][combo]
    assert found.image(image)["id"] == "2.14.1-rocm7.14-rdna3-py3.12-runtime"  # the Radeon 780M: RDNA3's family image
    image, notes = data["rows"][data["decisions"]["amd:gfx1103"]][data["combos"].index("2.13.0|3.12")]  # no 7.14 images of 2.13.0
    assert image == -1 and "no AMD image of the matrix carries gfx1103" in data["texts"][notes[0][0]]
    assert "HSA_OVERRIDE_GFX_VERSION" in " ".join(data["texts"][note[1]] for note in notes)


def test_chooser_offers_the_newest_releases_only():
    items = planned()
    targets = [item.target for item in items]
    found = chooser(targets, select_targets(Choices()).matrix.compat, {})
    assert found.torches == ("2.15.0", "2.14.1", "2.13.0", "2.12.1") and CHOOSER_RELEASES >= 4


def test_gpu_models_come_from_the_compat_data_each_name_once():
    models = gpu_models(select_targets(Choices()).matrix.compat)
    names = [model.name.lower() for model in models]
    assert len(names) == len(set(names))
    assert GpuModel("amd", "Instinct MI300X", "gfx942") in models and GpuModel("nvidia", "GeForce RTX 4090", "sm_89") in models
    assert [model.vendor for model in models] == sorted((model.vendor for model in models), key=lambda vendor: vendor != "nvidia")


# --- pure parts ----------------------------------------------------------------------------------------------


def test_base_lists_hold_what_most_images_of_a_kind_have_each_list_once():
    """A package (name and version) most images of a kind (backend, flavor) have is in its base list; kinds whose
    lists come out the same share one; an image lists what it has beyond it and what of it it lacks."""
    targets = [item.target for item in planned("torch=2.14.1", "python=3.1[12]", "flavor=runtime")]
    cuda = [t for t in targets if t.vendor == "nvidia"]
    rocm = [t for t in targets if t.vendor == "amd"]
    shared = [Package("deb", "libc6", "2.36-9", ""), Package("pypi", "numpy", "2.3.5", "")]
    cudnn = Package("pypi", "nvidia-cudnn-cu13", "9.26.0.51", "")
    packages = {t.id: [*shared, Package("pypi", "torch", t.id, ""), *([cudnn] if t.vendor == "nvidia" else [])] for t in targets}
    packages[cuda[0].id] = [shared[0], Package("pypi", "numpy", "2.4.0", ""), cudnn]  # one CUDA image differs
    bases = base_lists(targets, packages, limit=1500)
    debs, wheels = bases["deb", ("CUDA", "runtime")], bases["pypi", ("CUDA", "runtime")]
    assert debs is bases["deb", ("ROCm", "runtime")] and debs.share == "CUDA and ROCm runtime"  # the same list: one page
    assert wheels.packages == (shared[1], cudnn)  # torch differs per image: in none
    assert bases["pypi", ("ROCm", "runtime")].packages == (shared[1],) and len(rocm) > 1
    pypi, deb = package_lists(cuda[0], packages[cuda[0].id], "Debian 12", bases, limit=1500)
    assert (deb.os, deb.count, deb.own, deb.lacks) == ("Debian 12", 1, (), ())
    assert pypi.own == (Package("pypi", "numpy", "2.4.0", ""),) and pypi.lacks == (shared[1],)
    (alone,) = package_lists(cuda[0], packages[cuda[0].id][:1], "", {}, limit=1500)  # no base list: the whole list
    assert alone.base is None and alone.own == (shared[0],) and alone.left_out == 0
    assert base_lists(targets[:1], packages, limit=1500) == {}  # one image of a kind: nothing to share


def test_layer_holders_are_named_as_the_group_they_make():
    targets = [item.target for item in planned("torch=2.1[45]*", "python=3.1[23]", "flavor=runtime")]
    image = next(t for t in targets if t.id == "2.15.0-cuda13.2-py3.12-runtime")
    twin = next(t for t in targets if t.id == "2.15.0-rocm7.14-mi300-py3.12-runtime")
    same_backend = [t.id for t in targets if (t.vendor, t.backend_version, t.family) == ("nvidia", "13.2", "")]
    same_python = [t.id for t in targets if t.python == "3.12"]
    holders = {
        "cuda": same_backend,
        "os": same_python,
        "pair": [image.id, twin.id],
        "some": [image.id, *[held for held in same_python if held != image.id][:4]],
        "own": [image.id],
    }
    sharing = Sharing(targets, holders, shown=2)
    assert sharing.of("cuda", image, []).group == f"the {len(same_backend) - 1} other CUDA 13.2 images"
    assert sharing.of("os", image, []).group == f"the {len(same_python) - 1} other Python 3.12 images"
    assert sharing.of("pair", image, [twin.id]).named == (twin.id,)  # few: named
    some = sharing.of("some", image, [])
    assert not some.group and len(some.named) == 2 and some.more == 2  # no group of the site: two named, the rest counted
    assert sharing.of("own", image, []).none


def test_placements_are_written_once_per_gpu_request_and_affinity():
    site = select_targets(Choices(selectors=("torch=2.1[45]*", "flavor=runtime")))
    placements = Placements(site.matrix.compat)
    links = {t.id: placements.of(t) for t in site.targets}
    by_backend: dict[str, set[str]] = {}
    for target in site.targets:
        by_backend.setdefault(f"{target.vendor}{target.backend_version}{target.family}", set()).add(links[target.id])
    assert all(len(found) == 1 for found in by_backend.values())  # every image of a backend refers to one placement
    written = placements.placements()
    assert len(written) < len(by_backend) and len({p.anchor for p in written}) == len(written)  # backends alike share one
    assert all(link.startswith("kubernetes.html#") for link in links.values())
    mi300 = next(p for p in written if any(backend == "ROCm 7.14 mi300" for backend, _ in p.uses))
    assert mi300.spec["resources"] == {"limits": {"amd.com/gpu": 1}} and "nodeAffinity" in mi300.spec["affinity"]


def test_package_diff():
    before = [
        Package("pypi", "numpy", "2.3.5", ""),
        Package("pypi", "torch", "2.14.1", ""),
        Package("deb", "libc6", "2.36-9", ""),
        Package("pypi", "pillow", "12.0.0", ""),
        Package("pypi", "odd", "not-a-version", ""),
    ]
    after = [
        Package("pypi", "numpy", "2.4.0", ""),
        Package("pypi", "torch", "2.14.0", ""),
        Package("deb", "libc6", "2.36-9+deb12u10", ""),
        Package("pypi", "uv", "0.9.0", ""),
        Package("pypi", "odd", "other", ""),
    ]
    diff = package_diff(before, after)
    assert [(c.name, c.before, c.after) for c in diff.upgraded] == [("numpy", "2.3.5", "2.4.0")]
    assert [(c.name, c.before, c.after) for c in diff.downgraded] == [("torch", "2.14.1", "2.14.0")]
    assert [c.name for c in diff.changed] == ["libc6", "odd"]  # Debian's order, and versions PEP 440 cannot read
    assert [c.name for c in diff.added] == ["uv"] and [c.name for c in diff.removed] == ["pillow"]
    assert package_diff(after, after).empty


def test_chart_geometry():
    chart = bar_chart("t", "d", [("a", [Item("big", 400, "nvidia"), Item("half", 200, "amd")]), ("", [Item("none", 0, "hand"), Item("l" * 80, 1, "muted")])])
    assert chart is not None
    big, half, none, tiny = chart.bars
    assert big.length + LABEL_WIDTH <= WIDTH and big.value_x + 60 <= WIDTH  # room for "12.3 GiB" after the longest bar
    assert half.length == pytest.approx(big.length / 2, abs=0.1)
    assert none.length == 0 and tiny.length == 1  # a value too small to see still shows
    assert tiny.label.endswith("…") and len(tiny.label) < 40
    assert [heading.text for heading in chart.headings] == ["a"] and big.y > chart.headings[0].y - 20
    assert chart.height >= tiny.y + 24
    assert bar_chart("t", "d", [("a", [])]) is None


def test_later_documents_win_and_tags_gather():
    layer = BuiltLayer("sha256:" + "1" * 64, 5, "torch")
    early = Evidence("t", status="built", smoke=True, size=5, tags=("r/x:a",), layers=(layer,))
    late = Evidence("t", status="failed", smoke=False, tags=("r/x:b",), layers_compressed=True)
    merged = gather([early, late])["t"]
    assert (merged.status, merged.smoke, merged.size, merged.tags) == ("failed", False, 5, ("r/x:a", "r/x:b"))
    assert merged.layers == (layer,) and merged.layers_compressed is False  # said only with layers


# --- scale ---------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_nightly_site_of_the_default_matrix_is_under_500_kb(cli, tmp_path):
    """Issue 43's goal, by the bytes of its files: the default matrix's site from the night's documents as bench.site
    makes them (a publish report, every image's verification and its SBOM of a real image's package counts)."""
    items = planned()
    documents.nightly(tmp_path / "documents", items)
    out = tmp_path / "site"
    result = cli("report", "--html", out, "--from", tmp_path / "documents")
    assert result.code == 0, result.err
    files = [path for path in out.rglob("*") if path.is_file()]  # every file the nightly publishes, the site's manifest too
    assert len(items) == 132 and sum(page_text(path).count("<section id=") for path in (out / "images").iterdir()) == len(items)
    assert "Tonight's documents name 132: 132 passed their smoke test; 132 carry a signed GPU test" in page_text(out / "index.html")
    assert "110 Debian packages" in page_text(out / "images" / "2.15.0-py3.12-runtime.html")  # the SBOMs are on the pages
    by_kind: dict[str, int] = {}
    for path in files:
        kind = path.relative_to(out).parts[0]
        by_kind[kind] = by_kind.get(kind, 0) + path.stat().st_size
    assert sum(by_kind.values()) < 500_000, by_kind


@pytest.mark.slow
def test_ten_thousand_targets_split_into_pages_none_over_two_megabytes(cli, tmp_path):
    from bench.plan_render import write_matrix

    matrix = write_matrix(tmp_path / "matrix", 10_000)
    out = tmp_path / "site"
    result = cli("report", "--html", out, "--matrix", matrix)
    assert result.code == 0, result.err
    pages = list(out.rglob("*.html"))
    assert sum(page_text(path).count("<section id=") for path in (out / "images").iterdir()) == 10_000  # every image has its part
    assert len(list((out / "matrix").iterdir())) >= 10_000 // 300
    largest = max(pages, key=lambda path: path.stat().st_size)
    assert largest.stat().st_size < PAGE_LIMIT, largest
    index = page_text(out / "index.html")
    assert index.count('href="matrix/torch-') == len(list((out / "matrix").iterdir()))
