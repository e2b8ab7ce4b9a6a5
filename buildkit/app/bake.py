"""`buildkit bake`: export the selection as a docker-bake.json and its build contexts.

For `docker buildx bake` on any builder (a Kubernetes or remote BuildKit fleet), without buildkit there.

The images are the same as `buildkit build`'s (same Dockerfiles, args and labels); what bake does not do
is buildkit's smoke test, tagging rules and reports: run `buildkit test` on what it built.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from buildkit.adapters.build_stamp import created_now, matrix_revision
from buildkit.adapters.files.outputs import OwnedFolder, update_tree
from buildkit.app.targets import Choices, select_targets
from buildkit.core.labels import build_stamp_labels
from buildkit.core.release.bake import bake_document, bake_name, context_folder
from buildkit.core.render.planned import SUPPORT_DIR
from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from pathlib import Path

MANIFEST = ".buildkit-bake.json"


@dataclass(frozen=True)
class BakeExport:
    file: Path
    targets: tuple[str, ...]  # bake target names
    groups: tuple[str, ...]


def export_bake(
    choices: Choices,
    out: Path,
    pip_conf: Path | None = None,
    ca_bundle: Path | None = None,
    network: str | None = None,
    registry_cache: bool = False,
) -> BakeExport:
    selection = select_targets(choices)
    rendered = selection.render()
    secrets = {}
    for secret, path, option in (("pip_conf", pip_conf, "--pip-conf"), ("ca_bundle", ca_bundle, "--ca-bundle")):
        if path is not None:
            if not path.is_file():
                raise UserError(Problem(option, f"{path} is not a file"))
            secrets[secret] = str(path.resolve())
    revision = matrix_revision(choices.matrix)
    document = bake_document(rendered, build_stamp_labels(created_now(), revision), secrets, str(out.resolve()), network, registry_cache)
    files: dict[str, bytes] = {}
    for item in rendered:
        files[f"{context_folder(item)}/Dockerfile"] = item.dockerfile.encode()
        files.update({f"{context_folder(item)}/{SUPPORT_DIR}/{name}": data for name, data in item.support.items()})
    files["docker-bake.json"] = (json.dumps(document, indent=2) + "\n").encode()
    update_tree(OwnedFolder(out, MANIFEST, "buildkit bake"), files)
    return BakeExport(out / "docker-bake.json", tuple(bake_name(item.target.id) for item in rendered), tuple(document["group"]))
