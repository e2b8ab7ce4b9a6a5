"""What an image's GPU guard (buildkit/image/gpu_guard.py) knows about the image: rendered from its target.

The guard runs inside the image, where neither the matrix nor the labels can be read cheaply at every
interpreter start, so the build writes this beside it: the image's vendor and backend, its reference, its
pair and its twins (with arch lists where it has several of one vendor, the ROCm family images, for the guard
to name the one carrying the host's gfx target, with that image's bundle of AMD's hierarchy and its family:
the image cannot ask rocm-bootstrap; core/targets/plan.py's _link_twins). Everything comes from the target, so its
fingerprint covers it.
"""

from __future__ import annotations

import functools
import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from buildkit.core.targets.plan import Target, Twin

GUARD_ENV = "BUILDKIT_GPU_GUARD"  # what gpu_guard.ENV reads: warn (default), strict, off


_COMPACT = json.JSONEncoder(sort_keys=True, separators=(",", ":"))  # made once: json.dumps makes one per call
_STRING = json.encoder.encode_basestring_ascii  # a JSON string, as _COMPACT writes one


def guard_config(target: Target) -> str:
    """The guard's config as compact JSON with sorted keys: one shell-quoted argument of the template's install
    step. Written out around its values (every target of a matrix has one: encoding the whole object each time
    costs a plan more than the rest of its labels), its twins encoded once per distinct list."""
    return (
        f'{{"backend":{_STRING(target.backend_label)},"pair":{_STRING(target.pair or "")},'
        f'"reference":{_STRING(f"{target.image_name}:{target.tag_names[0]}")},'  # its immutable tag (tags[0])
        f'"twins":{_twins(target.twins)},"vendor":{_STRING(target.vendor)}}}'
    )


@functools.lru_cache(4096)
def _twins(twins: tuple[Twin, ...]) -> str:
    return _COMPACT.encode(
        [
            {
                "vendor": twin.vendor,
                "reference": twin.reference,
                **({"archs": list(twin.archs)} if twin.archs else {}),
                **({"bundle": twin.bundle, "family": twin.bundle_family} if twin.bundle else {}),
            }
            for twin in twins
        ]
    )
