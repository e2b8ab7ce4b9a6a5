"""Strict grammars for every value that can reach a Dockerfile.

A matrix is data a team edits, so each value that ends up in rendered text (versions, requirements, image
references, arch names, URLs, names) is checked here first: nothing a matrix says can inject shell or
Dockerfile syntax. Each check returns None when the value is fine, or what was expected.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import InvalidVersion, Version

# distribution/reference grammar (the one Docker and registries enforce), without the digest-only form.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?)"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}"
_REPOSITORY_RE = re.compile(rf"^(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*$")
_IMAGE_RE = re.compile(rf"^(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::{_TAG})?(?:@sha256:[a-f0-9]{{64}})?$")
_REGISTRY_RE = re.compile(rf"^{_DOMAIN}$")
TAG_RE = re.compile(rf"^{_TAG}$")

_RELEASE_RE = re.compile(r"^[0-9]+(?:\.[0-9]+){1,2}$")
_PYTHON_RE = re.compile(r"^3\.[0-9]{1,2}$")
_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
_USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_DEBIAN_PACKAGE_RE = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
# What a requirement may contain once packaging has normalised it: no spaces, quotes, $, ;, |, & or newlines.
_SAFE_REQUIREMENT_RE = re.compile(r"^[A-Za-z0-9._\-\[\],<>=!~*+]+$")
_SAFE_URL_RE = re.compile(r"^[A-Za-z0-9._~:/?#\[\]@!&'()*+,;=%-]+$")

CUDA_ARCH_RE = re.compile(r"^[0-9]+\.[0-9]+(?:\+PTX)?$")
ROCM_ARCH_RE = re.compile(r"^gfx[0-9a-f]{3,4}$")


def release_version(value: str) -> str | None:
    """A plain release such as 2.14.1 or 13.0 (no local tag, no pre-release)."""
    if not isinstance(value, str) or not _RELEASE_RE.match(value):
        return "a release version such as 2.14.1 or 13.0"
    try:
        Version(value)
    except InvalidVersion:  # pragma: no cover - the regex admits only valid versions
        return "a release version such as 2.14.1"
    return None


def python_version(value: str) -> str | None:
    if not isinstance(value, str) or not _PYTHON_RE.match(value):
        return 'a Python version such as "3.12"'
    return None


def requirement(value: str) -> str | None:
    """A PEP 508 requirement by name and version only: no URL, no environment marker."""
    expected = 'a pip requirement such as "numpy>=2" or "einops==0.8.1" (name, extras, version; no URL or marker)'
    if not isinstance(value, str):
        return expected
    try:
        parsed = Requirement(value)
    except InvalidRequirement:
        return expected
    if parsed.url or parsed.marker or not _SAFE_REQUIREMENT_RE.match(str(parsed)):
        return expected
    return None


def image_reference(value: str) -> str | None:
    if not isinstance(value, str) or len(value) > 255 or not _IMAGE_RE.match(value):
        return 'an image reference such as "nvidia/cuda:13.0.3-cudnn-devel-ubuntu24.04" (lowercase name, optional :tag)'
    return None


def registry(value: str) -> str | None:
    if not isinstance(value, str) or not _REGISTRY_RE.match(value):
        return 'a registry host such as "ghcr.io" or "localhost:5000"'
    return None


def repository(value: str) -> str | None:
    if not isinstance(value, str) or not _REPOSITORY_RE.match(value):
        return 'a repository path such as "team/pytorch" (lowercase letters, digits, separators . _ -)'
    return None


def tag(value: str) -> str | None:
    if not isinstance(value, str) or not TAG_RE.match(value):
        return "an OCI tag: [A-Za-z0-9_][A-Za-z0-9._-]{0,127}, at most 128 characters"
    return None


def http_url(value: str) -> str | None:
    expected = "an http(s) URL without credentials or spaces (give credentials with --pip-conf or --index-auth)"
    if not isinstance(value, str) or not _SAFE_URL_RE.match(value):
        return expected
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        return expected
    return None


def name(value: str) -> str | None:
    if not isinstance(value, str) or not _NAME_RE.match(value):
        return "a lowercase name: a letter, then letters, digits or -, at most 32 characters"
    return None


def user_name(value: str) -> str | None:
    if not isinstance(value, str) or not _USER_RE.match(value):
        return "a Unix user name: lowercase letters, digits, _ or -, starting with a letter or _"
    return None


def debian_package(value: str) -> str | None:
    if not isinstance(value, str) or not _DEBIAN_PACKAGE_RE.match(value):
        return 'a Debian package name such as "libnuma1"'
    return None


def tag_prefix(value: str) -> str | None:
    if value == "":
        return None
    if not isinstance(value, str) or not TAG_RE.match(value):
        return 'a tag prefix such as "team-" (letters, digits, . _ -)'
    return None
