"""Where the shipped default matrix, templates and compatibility data live.

In a wheel they sit inside the package (buildkit/_bundled); in a source checkout or an editable install
they are read from the repository root, where teams see and fork them.
"""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from buildkit.core.compat.facts import Compat, compat_from_data
from buildkit.core.matrix.text import tomllib  # the one switch to tomli on Python 3.10
from buildkit.core.render.planned import SUPPORT_FILES

__all__ = ["builtin_templates_dir", "compat_data", "default_matrix_path", "shipped_compat", "tomllib"]

PACKAGE_DIR = Path(__file__).resolve().parents[2]  # the buildkit package
COMPAT_DATA = PACKAGE_DIR / "data" / "compat.toml"  # shipped inside the package in every install


def _bundled_root() -> Path:
    bundled = PACKAGE_DIR / "_bundled"
    return bundled if bundled.is_dir() else PACKAGE_DIR.parent


def default_matrix_path() -> Path:
    return _bundled_root() / "matrix.toml"


def builtin_templates_dir() -> Path:
    return _bundled_root() / "templates"


@lru_cache(maxsize=1)
def compat_data() -> dict[str, Any]:
    with open(COMPAT_DATA, "rb") as handle:
        data: dict[str, Any] = tomllib.load(handle)  # typed here: mypy checks as Python 3.10, where tomli may be absent
        return data


@lru_cache(maxsize=1)
def shipped_compat() -> Compat:
    """The shipped compatibility data as lookups (a matrix's own [compat] overrides come on top of it)."""
    return compat_from_data(compat_data())


@lru_cache(maxsize=1)
def image_support_files() -> dict[str, bytes]:
    """The image-side scripts (buildkit/image) that every build context carries, by file name."""
    package = resources.files("buildkit.image")
    return {name: package.joinpath(name).read_bytes() for name in SUPPORT_FILES}
