"""The planned image: everything about a target's image but its Dockerfile text, and what its template reads.

A plan holds the target's template, build args, labels, install plan and fingerprint (render/fingerprint.py);
every template, buildkit's own or a team's, reads it through template_variables. The build
context's layout (the support folder and its files, the shared and tools stages) is named here, so the
renderer, `render`, `build` and `bake` agree on it.
"""

from __future__ import annotations

import dataclasses
import functools
import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from buildkit.core.install_plan import TorchInstall
from buildkit.core.render.guard import guard_config
from buildkit.core.targets.plan import Target
from buildkit.core.targets.source import GB_PER_JOB, SOURCE_FLAVOR

if TYPE_CHECKING:
    from collections.abc import Mapping

# The stage that ends where a pair's twins diverge (everything below the torch install).
SHARED_STAGE = "shared"
# The base with the venv and its installer, below SHARED_STAGE: torch's resolve and layer stages start from it,
# so they run while the image's OS packages install.
TOOLS_STAGE = "tools"
# The build context carries the image-side scripts (buildkit/image: the installer) in this folder, next to
# the Dockerfile; RUN steps bind-mount it, so no layer holds them. A source build sends a PyTorch checkout
# as its context, so there the folder travels as a named build context instead.
SUPPORT_DIR = "buildkit"
SUPPORT_CONTEXT = "buildkit-support"
SUPPORT_FILES = ("install.py", "gpu_guard.py")
INSTALL_PLAN = "torch-install.json"  # per target, next to the support files: what install.py resolves and installs


@dataclass(frozen=True)
class PlannedImage:
    """Everything about a target's image but its Dockerfile text."""

    target: Target
    template: str
    build_args: Mapping[str, str]
    labels: Mapping[str, str]  # without the build stamp (created, revision); the fingerprint label included
    fingerprint: str
    install: TorchInstall | None = None  # how torch is installed from its index (None: the source flavor builds it)


_PLANNED_GETTER = operator.attrgetter(*(field.name for field in dataclasses.fields(PlannedImage)))


def planned_values(item: PlannedImage) -> tuple[Target, str, Mapping[str, str], Mapping[str, str], str, TorchInstall | None]:
    """A plan's fields in their order, read at C speed: the start of its Rendered's."""
    return _PLANNED_GETTER(item)


@dataclass(frozen=True)
class Rendered(PlannedImage):
    dockerfile: str = ""
    support: Mapping[str, bytes] = dataclasses.field(default_factory=dict)  # SUPPORT_DIR's files, by name (shared: read only)


def support_mount(target: Target, name: str = "") -> str:
    """The RUN mount that shows the support scripts (or only the file `name`) at /buildkit, from the build
    context or, for a source build of a checkout, from the named context. A step that mounts only the file
    it runs keeps its cache key independent of the other files (each target's install plan differs)."""
    return _support_mount(target.source_checkout, name)


@functools.lru_cache(64)  # a few files, for every target
def _support_mount(source_checkout: bool, name: str = "") -> str:
    source = f"{SUPPORT_DIR}/{name}" if name else SUPPORT_DIR
    target_path = f"/{SUPPORT_DIR}/{name}" if name else f"/{SUPPORT_DIR}"
    if source_checkout:
        return f"type=bind,from={SUPPORT_CONTEXT},source={name or '.'},target={target_path}"
    return f"type=bind,source={source},target={target_path}"


# What a template calls as support_file("install.py"): one plain function per kind of build context, not a closure
# made for every target (the shape's tree calls only the variables' own plain functions).
_SUPPORT_FILE = {checkout: (lambda name, checkout=checkout: _support_mount(checkout, name)) for checkout in (False, True)}


def assembled_on_base(planned: PlannedImage) -> bool:
    """Whether the image is assembled from scratch with the layers that are the same under every Python below its
    base's files (core/bases.py): torch goes in in layers, and buildkit knows what the base's configuration sets."""
    return planned.install is not None and bool(planned.install.below_base) and planned.target.base_environment is not None


def template_variables(planned: PlannedImage) -> dict[str, Any]:
    """What every template, built-in or a team's, can read (docs/templates-and-flavors.md's template reference lists each)."""
    target = planned.target
    return {
        "target": target,
        "build_args": planned.build_args,
        "template": planned.template,
        "shared_stage": SHARED_STAGE,
        "tools_stage": TOOLS_STAGE,
        "install": planned.install,
        "assembled": assembled_on_base(planned),
        "support": support_mount(target),
        "support_file": _SUPPORT_FILE[target.source_checkout],
        "gb_per_job": GB_PER_JOB,
        "gpu_guard": guard_config(target),  # the GPU guard's config (core/render/guard.py), one shell-quoted argument
        "labels": planned.labels,  # what describes the image, the fingerprint included; not the build stamp
    }


# What each variable is (template_variables): a type these fix is no guard of a shape (buildkit.core.render.shapes).
VARIABLE_TYPES = {
    "target": Target,
    "build_args": dict[str, str],
    "template": str,
    "shared_stage": str,
    "tools_stage": str,
    "install": TorchInstall | None,
    "assembled": bool,
    "support": str,
    "gb_per_job": int,
    "gpu_guard": str,
    "labels": dict[str, str],
}


def template_name(flavor: str) -> str:
    return f"{flavor}.Dockerfile.j2"


def build_args(target: Target) -> dict[str, str]:
    """The values the vendor-specific part of a template takes as ARGs (shown by `render`, passed by `build`)."""
    if target.flavor == SOURCE_FLAVOR:
        vision = next((c.split("==")[1].split("+")[0] for c in target.companions if c.startswith("torchvision==")), "")
        return {
            "PYTORCH_REF": f"v{target.torch}",
            "TORCHVISION_REF": f"v{vision}" if vision else "",
            "PYTORCH_ROCM_ARCH": ";".join(target.archs),
            "MAX_JOBS": str(target.max_jobs) if target.max_jobs else "",
        }
    args = {"TORCH_INDEX_URL": target.index_url}  # the installer takes torch from here (a mirror may replace it)
    if target.channel == "nightly":
        # PIP_PRE lets pip take dev builds; the date makes each day's nightly a new fingerprint
        args.update({"PIP_PRE": "1", "NIGHTLY_DATE": target.channel_date})
    return args
