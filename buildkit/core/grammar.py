"""Strict grammars for every value that can reach a Dockerfile.

A matrix is data a team edits, so each value that ends up in rendered text (versions, requirements, image
references, arch names, URLs, names) is checked here first: nothing a matrix says can inject shell or
Dockerfile syntax. Each check returns None when the value is fine, or what was expected.

Every pattern must match the WHOLE string (re.fullmatch): Python's `$` also matches before a final
newline, so `^...$` with re.match lets "libnuma1\n" through, and a newline is how a value would add a
Dockerfile instruction.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

# distribution/reference grammar (the one Docker and registries enforce), without the digest-only form.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?)"
_TAG = r"[A-Za-z0-9_][A-Za-z0-9._-]{0,127}"
_REPOSITORY_RE = re.compile(rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*")
_IMAGE_RE = re.compile(rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::{_TAG})?(?:@sha256:[a-f0-9]{{64}})?")
_REGISTRY_RE = re.compile(_DOMAIN)
TAG_RE = re.compile(_TAG)

# Components of at most 4 digits: every real torch, CUDA and ROCm version fits, and no 5,000-digit "version"
# reaches int() (which refuses more than 4,300 digits) or a tag.
_RELEASE_RE = re.compile(r"[0-9]{1,4}(?:\.[0-9]{1,4}){1,2}")
_PYTHON_RE = re.compile(r"3\.[0-9]{1,2}")
_NAME_RE = re.compile(r"[a-z][a-z0-9-]{0,31}")
_USER_RE = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_DEBIAN_PACKAGE_RE = re.compile(r"[a-z0-9][a-z0-9+.-]{1,99}")
# What a requirement may contain once packaging has normalised it: no spaces, quotes, $, ;, |, & or newlines.
_SAFE_REQUIREMENT_RE = re.compile(r"[A-Za-z0-9._\-\[\],<>=!~*+]{1,200}")
_SAFE_URL_RE = re.compile(r"[A-Za-z0-9._~:/?#\[\]@!&'()*+,;=%-]{1,2000}")

CUDA_ARCH_RE = re.compile(r"[0-9]{1,2}\.[0-9](?:\+PTX)?")
# an LLVM gfx target, and rocm-bootstrap's names of a target's variants (gfx1250-strict, gfx1250's A0 stepping)
ROCM_ARCH_RE = re.compile(r"gfx[0-9a-f]{3,4}(?:-[a-z]{1,12})?")


def release_version(value: str) -> str | None:
    """A plain release such as 2.14.1 or 13.0 (no local tag, no pre-release)."""
    if not isinstance(value, str) or not _RELEASE_RE.fullmatch(value):
        return "a release version such as 2.14.1 or 13.0"
    canonical = str(Version(value))
    if canonical != value:  # 2.14.01 would be the same release as 2.14.1 under other tags
        return f"a release version written as {canonical}"
    return None


def python_version(value: str) -> str | None:
    if not isinstance(value, str) or not _PYTHON_RE.fullmatch(value):
        return 'a Python version such as "3.12"'
    return None


def requirement(value: str) -> str | None:
    """A PEP 508 requirement by name and version only: no URL, no environment marker."""
    expected = 'a pip requirement such as "numpy>=2" or "einops==0.8.1" (name, extras, version; no URL or marker)'
    if not isinstance(value, str) or not _SAFE_REQUIREMENT_RE.fullmatch(value):
        return expected  # checked before parsing: the text itself reaches the Dockerfile
    try:
        parsed = Requirement(value)
    except InvalidRequirement:
        return expected
    if parsed.url or parsed.marker:
        return expected
    return None


_SAFE_PIN_RE = re.compile(r"[A-Za-z0-9._\-\[\],<>=!~*+ ;\"'()]{1,300}")


def pin(value: str) -> str | None:
    """A requirement a torch wheel states, with its environment marker where it has one (a recorded fact,
    never installed as written): cuda-bindings<14,>=13.0.3; python_version < "3.15"."""
    expected = "a pip requirement with an optional marker such as 'triton~=3.9.0; python_version < \"3.16\"' (no URL)"
    if not isinstance(value, str) or not _SAFE_PIN_RE.fullmatch(value):
        return expected
    try:
        parsed = Requirement(value)
    except InvalidRequirement:
        return expected
    return expected if parsed.url else None


def image_reference(value: str) -> str | None:
    if not isinstance(value, str) or len(value) > 255 or not _IMAGE_RE.fullmatch(value):
        return 'an image reference such as "nvidia/cuda:13.0.3-cudnn-devel-ubuntu24.04" (lowercase name, optional :tag)'
    return None


def registry(value: str) -> str | None:
    if not isinstance(value, str) or not _REGISTRY_RE.fullmatch(value):
        return 'a registry host such as "ghcr.io" or "localhost:5000"'
    return None


def repository(value: str) -> str | None:
    if not isinstance(value, str) or not _REPOSITORY_RE.fullmatch(value):
        return 'a repository path such as "team/pytorch" (lowercase letters, digits, separators . _ -)'
    return None


def tag(value: str) -> str | None:
    if not isinstance(value, str) or not TAG_RE.fullmatch(value):
        return "an OCI tag: [A-Za-z0-9_][A-Za-z0-9._-]{0,127}, at most 128 characters"
    return None


def http_url(value: str) -> str | None:
    expected = "an http(s) URL without credentials or spaces (give credentials with --pip-conf or --index-url)"
    if not isinstance(value, str) or not _SAFE_URL_RE.fullmatch(value):
        return expected
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        return expected
    return None


def name(value: str) -> str | None:
    if not isinstance(value, str) or not _NAME_RE.fullmatch(value):
        return "a lowercase name: a letter, then letters, digits or -, at most 32 characters"
    return None


_BUNDLE_RE = re.compile(r"gfx[0-9a-z_]{1,14}")


def bundle(value: str) -> str | None:
    """A bundle of AMD's packaging hierarchy, as rocm-bootstrap names it: gfx942, gfx9_4, gfx115x, gfx12."""
    if not isinstance(value, str) or not _BUNDLE_RE.fullmatch(value):
        return 'a bundle of AMD\'s hierarchy such as "gfx942", "gfx9_4" or "gfx115x"'
    return None


def rocm_family(value: str) -> str | None:
    """What rocm_families names: a product family of the compatibility data (mi300) or an AMD bundle (gfx9_4)."""
    if name(value) is None or bundle(value) is None:
        return None
    return 'a ROCm family such as "mi300", or a bundle of AMD\'s hierarchy such as "gfx9_4" or "gfx115x"'


def user_name(value: str) -> str | None:
    if not isinstance(value, str) or not _USER_RE.fullmatch(value):
        return "a Unix user name: lowercase letters, digits, _ or -, starting with a letter or _"
    return None


def debian_package(value: str) -> str | None:
    if not isinstance(value, str) or not _DEBIAN_PACKAGE_RE.fullmatch(value):
        return 'a Debian package name such as "libnuma1"'
    return None


def tag_prefix(value: str) -> str | None:
    if value == "":
        return None
    if not isinstance(value, str) or not TAG_RE.fullmatch(value):
        return 'a tag prefix such as "team-" (letters, digits, . _ -)'
    return None


_CHANNEL_PATH_RE = re.compile(r"(?:[a-z0-9][a-z0-9-]{0,31}/)?")


def channel_path(value: str) -> str | None:
    """A wheel channel's folder under the index: "" (release), "test/", "nightly/"."""
    if not isinstance(value, str) or not _CHANNEL_PATH_RE.fullmatch(value):
        return 'a folder name ending in "/" such as "nightly/", or "" for the index itself'
    return None


_DRIVER_RE = re.compile(r"[0-9]{1,4}(?:\.[0-9]{1,4}){1,3}")


def driver_version(value: str) -> str | None:
    if not isinstance(value, str) or not _DRIVER_RE.fullmatch(value):
        return 'a driver version such as "580.65.06"'
    return None


_OS_RE = re.compile(r"ubuntu[0-9]{2}\.[0-9]{2}|debian(?:[0-9]{2}|sid)")


def os_name(value: str) -> str | None:
    """A devel base image's OS as the compatibility data names it (read from its tag): ubuntu24.04."""
    if not isinstance(value, str) or not _OS_RE.fullmatch(value):
        return 'an OS such as "ubuntu24.04"'
    return None


_PLATFORM_RE = re.compile(r"linux/(?:amd64|arm64)")


def platform(value: str) -> str | None:
    if not isinstance(value, str) or not _PLATFORM_RE.fullmatch(value):
        return 'a platform: "linux/amd64" or "linux/arm64"'
    return None


def cuda_arch(value: str) -> str | None:
    if not isinstance(value, str) or not CUDA_ARCH_RE.fullmatch(value):
        return 'a CUDA arch such as "9.0" or "12.0+PTX"'
    return None


def rocm_arch(value: str) -> str | None:
    if not isinstance(value, str) or not ROCM_ARCH_RE.fullmatch(value):
        return 'a gfx target such as "gfx942"'
    return None


def gpu_arch(value: str) -> str | None:
    """Either vendor's arch: a CUDA compute capability or a gfx target (a build's list is one vendor's)."""
    if cuda_arch(value) is None or rocm_arch(value) is None:
        return None
    return 'a CUDA arch such as "9.0" or a gfx target such as "gfx942"'


_NOTE_RE = re.compile(r"[A-Za-z0-9 ._:+/-]{1,120}")


def note(value: str) -> str | None:
    """Free text that only reaches reports (an `unconfirmed` fact, a source's name)."""
    if not isinstance(value, str) or not _NOTE_RE.fullmatch(value):
        return "a short note: letters, digits, spaces and . _ : + / -"
    return None


DIGEST_RE = re.compile(r"sha256:[a-f0-9]{64}")
_PACKAGE_VERSION_RE = re.compile(r"[0-9][0-9A-Za-z.+!-]{0,63}")


def package_version(value: str) -> str | None:
    if not isinstance(value, str) or not _PACKAGE_VERSION_RE.fullmatch(value):
        return 'a package version such as "1.0.15"'
    return None


# Sizes as people write them: decimal units (10GB is 10**9 bytes x 10, as registries state their limits) or
# binary ones (GiB); at most 6 digits before the point, so no size is absurdly long text.
_SIZE_RE = re.compile(r"(?P<number>[0-9]{1,6}(?:\.[0-9]{1,3})?) ?(?P<unit>B|kB|KB|MB|GB|TB|KiB|MiB|GiB|TiB)")
_SIZE_UNITS = {"B": 1, "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}


def size(value: str) -> str | None:
    if not isinstance(value, str) or not _SIZE_RE.fullmatch(value):
        return 'a size such as "10GB", "9.5 GiB" or "500MB"'
    return None


def size_bytes(value: str) -> int:
    """The bytes of a size the grammar above accepted."""
    found = _SIZE_RE.fullmatch(value)
    assert found is not None, value
    return round(float(found.group("number")) * _SIZE_UNITS[found.group("unit")])


_DISTRIBUTION_TEMPLATE_RE = re.compile(r"[a-z0-9][a-z0-9._-]{0,80}-\{(?:target|sub_family|family)\}")


def distribution_template(value: str) -> str | None:
    """A distribution or extra name ending in the level of AMD's hierarchy it is cut at, which rocm-bootstrap
    names for each bundle: rocm-sdk-device-{target}, amd-torch-device-{sub_family}, device-{target}."""
    if not isinstance(value, str) or not _DISTRIBUTION_TEMPLATE_RE.fullmatch(value):
        return 'a package name ending in -{target}, -{sub_family} or -{family} (the level of AMD\'s hierarchy it is cut at), such as "rocm-sdk-device-{target}"'
    return None


_LOCAL_TEMPLATE_RE = re.compile(r"[a-z0-9.]{0,20}\{version\}[a-z0-9.]{0,20}")


def local_template(value: str) -> str | None:
    """torch's local version on an index, {version} standing for the backend version (rocm{version}.0)."""
    if not isinstance(value, str) or not _LOCAL_TEMPLATE_RE.fullmatch(value):
        return 'a local version with {version} in it, such as "rocm{version}.0"'
    return None
