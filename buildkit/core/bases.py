"""What buildkit knows of the base images it builds on.

The environment Docker's official Python images set, so that an image on one of them can be assembled with the
layers that are the same under every Python at its bottom.

A container engine unpacks each layer of an image on top of all the layers below it, and keeps the result
under the chain of them (OCI image-spec's ChainID; containerd's unpacker applies a layer again when the
snapshot of its chain is missing). An image FROM python:3.12-slim has that Python's files at its bottom, so a
node holding the Python 3.13 image unpacks every layer of the 3.12 one again, the CUDA libraries included,
although it fetches none of their blobs. Assembled from `scratch`, the image starts with the layers that are
the same under every Python (the vendor's libraries: core/install_plan.py) and takes the files of its base,
its tools and its OS packages (the shared stage) as one layer above them: a node unpacks those libraries once
for every Python of a stack. What FROM would have inherited from the base, its environment, is written out
from what is known here; a base buildkit knows nothing of keeps FROM, and its layers stay at the bottom.
"""

from __future__ import annotations

import functools

from buildkit.core.reference import ImageReference

# Docker's official Python images (docker-library/python, e.g. 3.12/slim-bookworm/Dockerfile, read): FROM
# debian:<suite>-slim, `ENV PATH /usr/local/bin:$PATH` over Debian's default PATH, `ENV LANG C.UTF-8` (kept, its
# comment says, because removing it broke many users: docker-library/python#570). Their GPG_KEY, PYTHON_VERSION
# and PYTHON_SHA256 name and verify the source of their own build of Python; an image assembled on them does
# not carry those three.
OFFICIAL_PYTHON_ENVIRONMENT = (
    ("PATH", "/usr/local/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
    ("LANG", "C.UTF-8"),
)
_DOCKER_HUB = ("", "docker.io", "index.docker.io", "registry-1.docker.io")
_OFFICIAL_PYTHON = ("python", "library/python")
# Variants of the official image that are not Debian's: torch's manylinux wheels need glibc (not alpine's musl),
# and Windows images run no Linux wheel at all.
_OTHER_SYSTEMS = ("alpine", "windowsservercore", "nanoserver")


@functools.lru_cache(1024)  # a matrix names a few bases, for thousands of targets
def base_environment(reference: str) -> tuple[tuple[str, str], ...] | None:
    """The environment the image named by `reference` sets, where buildkit knows it (an official Debian-based
    Python image, by tag or pinned digest); None for any other base."""
    parsed = ImageReference.parse(reference)
    if parsed is None or parsed.registry not in _DOCKER_HUB or parsed.repository not in _OFFICIAL_PYTHON:
        return None
    if any(system in parsed.tag for system in _OTHER_SYSTEMS):
        return None
    return OFFICIAL_PYTHON_ENVIRONMENT
