"""What an image's GPU guard (buildkit/image/gpu_guard.py) knows about the image: rendered from its target.

The guard runs inside the image, where neither the matrix nor the labels can be read cheaply at every
interpreter start, so the build writes this beside it: the image's vendor and backend, its reference, its
pair and its twins (with arch lists where it has several of one vendor, the ROCm family images, for the guard
to name the one carrying the host's gfx target; core/plan.py's _link_twins). Everything comes from the target,
so its fingerprint covers it.
"""

from __future__ import annotations

import json

from buildkit.core.plan import Target

GUARD_ENV = "BUILDKIT_GPU_GUARD"  # what gpu_guard.ENV reads: warn (default), strict, off


_COMPACT = json.JSONEncoder(sort_keys=True, separators=(",", ":"))  # made once: json.dumps makes one per call


def guard_config(target: Target) -> str:
    """The guard's config as compact JSON: one shell-quoted argument of the template's install step."""
    return _COMPACT.encode({
        "vendor": target.vendor,
        "backend": target.backend_label,
        "reference": f"{target.image_name}:{target.tag_names[0]}",  # its immutable tag (tags[0])
        "pair": target.pair or "",
        "twins": [{"vendor": twin.vendor, "reference": twin.reference, **({"archs": list(twin.archs)} if twin.archs else {})}
                  for twin in target.twins],
    })
