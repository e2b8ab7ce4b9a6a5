"""`buildkit render`: the rendered Dockerfiles as a readable tree, one folder per target.

dist/<torch>/<backend><version>/py<python>/<flavor>/ holds Dockerfile, build-args.env and target.json
(tags, labels, build args, fingerprint), and dist/plan.json lists every target, like NVIDIA's generated tree.
"""

from __future__ import annotations

import json
from pathlib import Path

from buildkit.core.render import Rendered
from buildkit.app.targets import target_json


def target_dir(out: Path, item: Rendered) -> Path:
    target = item.target
    return out / target.torch / f"{target.backend}{target.backend_version}" / f"py{target.python}" / target.flavor


def write_tree(rendered: tuple[Rendered, ...], out: Path) -> list[Path]:
    written = []
    for item in rendered:
        folder = target_dir(out, item)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "Dockerfile").write_text(item.dockerfile, encoding="utf-8")
        (folder / "build-args.env").write_text(
            "".join(f"{name}={value}\n" for name, value in item.build_args.items()), encoding="utf-8"
        )
        (folder / "target.json").write_text(json.dumps(target_json(item), indent=2) + "\n", encoding="utf-8")
        written.append(folder)
    out.mkdir(parents=True, exist_ok=True)
    (out / "plan.json").write_text(json.dumps([target_json(i) for i in rendered], indent=2) + "\n", encoding="utf-8")
    return written
