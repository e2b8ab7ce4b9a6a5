"""The image fingerprint: sha256 over everything that determines an image, the same on any machine.

The renderer hashes what determines the Dockerfile (the sources of the templates it is rendered from, the support
files, the install plan) instead of its text, so `plan` never renders; FINGERPRINT_SCHEMA changes whenever what is
hashed changes, so an old fingerprint never matches a new image by accident.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import TYPE_CHECKING, Any

from buildkit.core.targets.plan import Target

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

FINGERPRINT_SCHEMA = 5


def fingerprint(target: Target, templates: str, args: Mapping[str, str], image_labels: Mapping[str, str], target_text: str | None = None) -> str:
    """sha256 over everything that determines the image: the digest of the template sources the target's
    Dockerfile is rendered from, every field of the target (base image and its digest, packages, user, ...),
    the build args and the labels. The same inputs give the same hex on any machine.

    Each part is the repr of plain data (strings, numbers, tuples, frozen records, dicts), which escapes newlines,
    so the parts joined by newlines can be told apart and no two different inputs hash the same text. The build
    args and labels are dicts in the order their code writes them, the same on every machine (sorting them cost
    a plan more than hashing). `target_text`: repr(target), where the caller has it.
    """
    text = "\n".join(
        (
            f"buildkit-fingerprint/{FINGERPRINT_SCHEMA}",
            templates,
            repr(target) if target_text is None else target_text,
            repr(dict(args)),
            repr(dict(image_labels)),
        )
    )
    return hashlib.sha256(text.encode()).hexdigest()


_TARGET_FIELDS = tuple(field.name for field in dataclasses.fields(Target))


def _repr_function() -> Callable[[Target, Callable[[Any], str]], str]:
    """repr(target) as the dataclass writes it, one f-string, with the tuples and records targets share (not their
    own tags and twins) read through `shared` (a cache of their reprs)."""
    own = {"tag_names", "twins"}
    parts = [
        f"{name}={{target.{name}!r}}"
        if name in own or dataclasses.fields(Target)[index].type in ("str", "int", "bool", "str | None")
        else f"{name}={{shared(target.{name})}}"
        for index, name in enumerate(_TARGET_FIELDS)
    ]
    namespace: dict[str, Any] = {}
    exec(f'def target_repr(target, shared):\n    return f"Target({", ".join(parts)})"\n', namespace)
    target_repr: Callable[[Target, Callable[[Any], str]], str] = namespace["target_repr"]
    return target_repr


target_repr = _repr_function()
