"""`buildkit render`: the rendered Dockerfiles as a readable tree, one folder per target.

dist/<torch>/<backend><version>/py<python>/<flavor>/ holds Dockerfile, build-args.env, target.json (tags,
labels, build args, fingerprint) and buildkit/ (the scripts its RUN steps mount: the folder is the build
context), and dist/plan.json lists every target, like NVIDIA's generated tree.
The folder is written through safe_files: dist/.buildkit-render.json lists what render wrote, so a narrower
re-render removes the targets plan.json no longer lists, and nothing else of the folder is ever touched.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from buildkit.adapters.files.outputs import OwnedFolder, update_tree
from buildkit.app.targets import target_json
from buildkit.core.render.planned import SUPPORT_DIR, Rendered

MANIFEST = ".buildkit-render.json"


@dataclass(frozen=True)
class RenderedTree:
    folders: tuple[Path, ...]  # one per target
    removed: tuple[str, ...]  # files of an earlier render that this plan no longer lists


def target_folder(item: Rendered) -> PurePosixPath:
    target = item.target
    backend = f"{target.backend}{target.backend_version}" + (f"-{target.family}" if target.family else "")
    return PurePosixPath(target.torch, backend, f"py{target.python}", target.flavor)


def tree_files(rendered: tuple[Rendered, ...]) -> dict[str, bytes]:
    """Every file of the tree, by path relative to the output folder."""
    files = {}
    for item in rendered:
        folder = target_folder(item)
        files[str(folder / "Dockerfile")] = item.dockerfile.encode("utf-8")
        files[str(folder / "build-args.env")] = "".join(f"{name}={value}\n" for name, value in item.build_args.items()).encode("utf-8")
        files[str(folder / "target.json")] = (json.dumps(target_json(item), indent=2) + "\n").encode("utf-8")
        files.update({str(folder / SUPPORT_DIR / name): data for name, data in item.support.items()})
    files["plan.json"] = (json.dumps([target_json(i) for i in rendered], indent=2) + "\n").encode("utf-8")
    return files


def write_tree(rendered: tuple[Rendered, ...], out: Path) -> RenderedTree:
    update = update_tree(OwnedFolder(out, MANIFEST, "buildkit render"), tree_files(rendered))
    return RenderedTree(tuple(out / target_folder(item) for item in rendered), update.removed)
