"""Rendering: a target and its templates -> Dockerfile text, build args and the image fingerprint.

Templates are found through a Jinja loader the caller supplies (team directories first, then the built-in
ones); StrictUndefined turns a misspelt variable into an error instead of an empty string in a Dockerfile.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass, field
from typing import Mapping

import jinja2

from buildkit.core.plan import LABEL_PREFIX, Target, labels
from buildkit.core.source import GB_PER_JOB, SOURCE_FLAVOR
from buildkit.errors import Problem, UserError

FINGERPRINT_SCHEMA = 1
FINGERPRINT_LABEL = f"{LABEL_PREFIX}fingerprint"


@dataclass(frozen=True)
class Rendered:
    target: Target
    template: str
    dockerfile: str
    build_args: Mapping[str, str]
    labels: Mapping[str, str]  # without provenance (created, revision); the fingerprint label included
    fingerprint: str
    context_files: Mapping[str, bytes] = field(default_factory=dict)


def template_name(flavor: str) -> str:
    return f"{flavor}.Dockerfile.j2"


def build_args(target: Target) -> dict[str, str]:
    """The values the vendor-specific part of a template takes as ARGs (shown by `render`, passed by `build`)."""
    if target.flavor == SOURCE_FLAVOR:
        vision = next((c.split("==")[1] for c in target.companions if c.startswith("torchvision==")), "")
        return {
            "PYTORCH_REF": f"v{target.torch}",
            "TORCHVISION_REF": f"v{vision}" if vision else "",
            "PYTORCH_ROCM_ARCH": ";".join(target.archs),
            "MAX_JOBS": str(target.max_jobs) if target.max_jobs else "",
        }
    args = {"TORCH_INDEX_URL": target.index_url, "TORCH_REQUIREMENT": target.torch_requirement}
    if target.channel == "nightly":
        # PIP_PRE lets pip take dev builds; the date makes each day's nightly a new fingerprint
        args.update({"PIP_PRE": "1", "NIGHTLY_DATE": target.channel_date})
    return args


def fingerprint(
    dockerfile: str, args: Mapping[str, str], base_image: str, image_labels: Mapping[str, str], context: Mapping[str, bytes]
) -> str:
    """sha256 over everything that determines the image; the same inputs give the same hex on any machine.

    Each field goes in as a length-prefixed name and value, in a fixed order, so no two different inputs
    produce the same text to hash.
    """
    fields = [
        ("dockerfile", dockerfile),
        ("base_image", base_image),
        *((f"arg:{key}", value) for key, value in sorted(args.items())),
        *((f"label:{key}", value) for key, value in sorted(image_labels.items())),
        *((f"context:{key}", hashlib.sha256(data).hexdigest()) for key, data in sorted(context.items())),
    ]
    text = f"buildkit-fingerprint/{FINGERPRINT_SCHEMA}" + "".join(f"\n{name}:{len(value)}:{value}" for name, value in fields)
    return hashlib.sha256(text.encode()).hexdigest()


def make_environment(loader: jinja2.BaseLoader) -> jinja2.Environment:
    environment = jinja2.Environment(
        loader=loader,
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # Dockerfiles, not HTML; every value is grammar-checked before it gets here
        keep_trailing_newline=True,
        auto_reload=False,  # one run renders many targets from templates that do not change under it
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["shell_quote"] = shlex.quote
    return environment


class Renderer:
    def __init__(self, loader: jinja2.BaseLoader, source: str):
        self.environment = make_environment(loader)
        self.source = source
        self._templates: dict[str, jinja2.Template] = {}

    def _template(self, name: str, target: Target) -> jinja2.Template:
        if name not in self._templates:
            try:
                self._templates[name] = self.environment.get_template(name)
            except jinja2.TemplateNotFound:
                raise UserError(Problem(
                    "templates", f"no template {name} for flavor {target.flavor!r} (target {target.id}); "
                    "add it to your template_dir or use a built-in flavor (runtime, devel)",
                )) from None
            except jinja2.TemplateSyntaxError as error:
                raise UserError(Problem(error.filename or name, f"template syntax error: {error.message}", line=error.lineno)) from None
        return self._templates[name]

    def render(self, target: Target) -> Rendered:
        name = template_name(target.flavor)
        args = build_args(target)
        try:
            text = self._template(name, target).render(target=target, build_args=args, gb_per_job=GB_PER_JOB, template=name)
        except jinja2.UndefinedError as error:
            raise UserError(Problem(name, f"template uses an undefined value: {error.message} (target {target.id})")) from None
        image_labels = labels(target, self.source)
        digest = fingerprint(text, args, target.base_image, image_labels, {})
        return Rendered(
            target=target,
            template=name,
            dockerfile=text,
            build_args=args,
            labels={**image_labels, FINGERPRINT_LABEL: digest},
            fingerprint=digest,
        )
