"""`buildkit report --html`: the site's pages from buildkit.core.site's values, through the Jinja templates.

The templates are shipped in the package (buildkit/ui/site/); the pages are written into the output folder as
`render --out` writes its tree.

Every value reaches a page through autoescaping, and text from documents through `shown` as well, which
writes control and bidirectional characters as escapes and shortens what is too long to read (a 10,000-character
tag), so no name, tag or package field can add markup, script or reordered text to a page. The pages load one
stylesheet and one script of their own (no CDN) and forbid everything else (Content-Security-Policy), so the
site works from file:// and from any static host.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import TYPE_CHECKING, Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from buildkit.adapters.files.outputs import OwnedFolder, TreeUpdate, update_tree
from buildkit.core.site.chooser import backend_label
from buildkit.core.site.placements import PATH as PLACEMENTS
from buildkit.errors import printable
from buildkit.ui.views import human_size, plain_yaml

if TYPE_CHECKING:
    from pathlib import Path

    from buildkit.core.site.model import ImageEntry, Site

MANIFEST = ".buildkit-site.json"
STATIC = ("site.css", "chooser.js")


def shown(value: Any, limit: int = 120) -> str:
    """Text from a document as the page shows it: control and bidi characters escaped, at most `limit` long."""
    return printable(str(value), limit)


def short_digest(digest: str) -> str:
    """sha256:0123456789ab… as the page names a digest (its whole value in the element's title)."""
    algorithm, _, value = digest.partition(":")
    return shown(f"{algorithm}:{value[:12]}" if value else digest or "—", 40)


def link(image: ImageEntry, here: str) -> str:
    """The link to an image's part of the site from a row's page: on that page by its anchor alone."""
    return f"{'' if image.page == here else image.page.rpartition('/')[2]}#{image.target.id}"


@lru_cache(maxsize=1)
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("buildkit.ui", "site"),
        autoescape=True,
        undefined=StrictUndefined,
        extensions=["jinja2.ext.do"],
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(shown=shown, size=human_size, digest=short_digest, backend=backend_label, yaml=lambda value: plain_yaml(value, flow=True).rstrip())
    env.globals["link"] = link
    env.policies["json.dumps_kwargs"] = {"sort_keys": True, "separators": (",", ":")}  # tojson, the chooser's data: compact
    return env


def site_files(site: Site) -> dict[str, bytes]:
    """Every file of the site by its path below the output folder."""
    env = environment()

    def page(template: str, **context: Any) -> bytes:
        return env.get_template(template).render(site=site, **context).encode("utf-8")

    files = {"index.html": page("index.html.j2", root="")}
    for part in site.matrix:
        if part.path:
            files[part.path] = page("matrix.html.j2", root="../", part=part)
    images = {image.target.id: image for image in site.images}
    for row in site.pages:
        files[row.path] = page("row.html.j2", root="../", row_page=row, site_images=images)
    for base in site.bases:
        files[base.path] = page("packages.html.j2", root="../", base=base)
    if site.placements:
        files[PLACEMENTS] = page("kubernetes.html.j2", root="")
    static = resources.files("buildkit.ui").joinpath("site")
    files.update({name: static.joinpath(name).read_bytes() for name in STATIC})
    return files


@dataclass(frozen=True)
class WrittenSite:
    files: int
    bytes: int
    largest: tuple[str, int]  # the largest page and its size
    update: TreeUpdate


def write_site(site: Site, out: Path) -> WrittenSite:
    """The site into `out` (created if needed): each file whole or not at all, files of an earlier site the
    new one no longer has removed, anything else in the folder left alone."""
    files = site_files(site)
    update = update_tree(OwnedFolder(out, MANIFEST, "buildkit report --html", "--html"), files)
    largest = max(files.items(), key=lambda item: len(item[1]))
    return WrittenSite(len(files), sum(len(data) for data in files.values()), (largest[0], len(largest[1])), update)
