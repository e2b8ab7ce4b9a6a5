"""What buildkit knows of base images (core/bases.py): an image is assembled from scratch only on a base whose
environment it can write out."""

from __future__ import annotations

import pytest

from buildkit.core.bases import OFFICIAL_PYTHON_ENVIRONMENT, base_environment


@pytest.mark.parametrize(
    "reference",
    [
        "python:3.12-slim-bookworm",
        "python:3.13-slim-trixie@sha256:" + "a" * 64,  # pinned by matrix.lock
        "docker.io/library/python:3.11",
        "library/python:3.14-bookworm",
        "python@sha256:" + "b" * 64,
    ],
)
def test_docker_s_official_debian_python_images_are_known(reference):
    assert base_environment(reference) == OFFICIAL_PYTHON_ENVIRONMENT
    assert dict(OFFICIAL_PYTHON_ENVIRONMENT)["PATH"].startswith("/usr/local/bin:")  # their Python before Debian's


@pytest.mark.parametrize(
    "reference",
    [
        "python:3.12-alpine",  # musl: no manylinux wheel runs there
        "python:3.12-windowsservercore-ltsc2022",
        "registry.example.com/mirror/python:3.12-slim-bookworm",  # a mirror may set anything
        "ghcr.io/python:3.12",
        "nvidia/cuda:13.0.3-cudnn-devel-ubuntu24.04",
        "team/python:3.12",
        "not a reference",
    ],
)
def test_any_other_base_keeps_from(reference):
    assert base_environment(reference) is None
