"""The default matrix kept in step with the compatibility data.

A new torch release gets its stack the day compat check reads it, so merging compat check's change is the only
hand edit a release needs.

Each [[torch]] entry pins the newest release of its minor; a minor newer than every entry gets an entry of
its own, at the top, built from the data: the default Pythons it has wheels for, its confirmed CUDA and
ROCm versions that the matrix can build (a thin-wheel ROCm version whose index's device packages the data does
not know for the matrix's families is left out, and the entry says so), and the pair (PyPI's CUDA build, else
the newest confirmed CUDA; the newest ROCm PyTorch's own index serves, else the newest).
Pure: matrix text and compatibility data in, matrix text out (tomlkit keeps comments and layout).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import tomlkit
import tomlkit.items
from packaging.version import Version

from buildkit.core.upstream.check import TomlTable, spaced
from buildkit.core.vendors import BACKENDS

if TYPE_CHECKING:
    from collections.abc import Sequence

    from buildkit.core.compat.facts import Compat, TorchRelease


def propose_matrix(text: str, compat: Compat, default_python: Sequence[str], default_companions: Sequence[str]) -> str:
    document = tomlkit.parse(text)
    entries = document.get("torch")
    if entries is None or not hasattr(entries, "append"):
        return text
    pinned = {}
    for entry in entries:
        version = str(entry.get("version", ""))
        release = compat.torch_release(version) if version else None
        if release is None:
            continue
        pinned[release.minor] = version
        newest = release.newest_release
        if newest and Version(newest) > Version(version):
            entry["version"] = newest
        _unblock_companions(entry, release, str(entry["version"]), default_companions)
    newest_pinned = max((Version(minor) for minor in pinned), default=None)
    families = tuple(str(name) for name in document.get("rocm_families", []))
    for minor in sorted(compat.torch, key=Version):
        release = compat.torch[minor]
        if newest_pinned is None or Version(minor) <= newest_pinned or not release.newest_release:
            continue
        entries.insert(0, new_entry(compat, release, default_python, default_companions, families))
    return spaced(tomlkit.dumps(document))


def _unblock_companions(entry: TomlTable, release: TorchRelease, version: str, default_companions: Sequence[str]) -> None:
    """`companions = []` was written while the companions of this release were unknown: once the data knows
    them, the entry takes the default companions again."""
    if "companions" in entry and list(entry["companions"]) == [] and all(release.companion_version(name, version) for name in default_companions):
        del entry["companions"]


def confirmed(compat: Compat, release: TorchRelease, backend: str) -> list[str]:
    """The backend versions a release has wheels for, less those the data marks unconfirmed."""
    return [v for v in release.backends[backend] if f"{backend} {v}" not in release.unconfirmed and compat.backend(backend, v) is not None]


def unbuildable(compat: Compat, release: TorchRelease, backend: str, version: str, families: Sequence[str]) -> list[str]:
    """The gfx targets a thin-wheel ROCm image of this release would carry (the families' targets among its
    archs, or all of them) that its index has no device package for, as the data knows them ([gfx] sdk_rocm)."""
    facts = compat.backend(backend, version)
    if facts is None or compat.layout_of(facts) is None:
        return []
    archs = compat.wheel_archs(release.minor, backend, version).archs
    known = [name for name in families if name in compat.families]
    carried = {gfx for name in known for gfx in compat.families[name].gfx if gfx in archs} if known else set(archs)
    return sorted(gfx for gfx in carried if gfx not in compat.device_archs(version))


def _on_pytorch_index(compat: Compat, backend: str, version: str) -> bool:
    facts = compat.backend(backend, version)
    layout = compat.layout_of(facts) if facts else None
    return not (layout and layout.index)


def new_entry(
    compat: Compat, release: TorchRelease, default_python: Sequence[str], default_companions: Sequence[str], families: Sequence[str] = ()
) -> tomlkit.items.Table:
    version = release.newest_release or ""
    entry = tomlkit.table()
    entry["version"] = version
    pythons = [p for p in default_python if p in release.python]
    if pythons != list(default_python):
        entry["python"] = pythons
    if not all(release.companion_version(name, version) for name in default_companions):
        entry["companions"] = []
        entry["companions"].comment("its companions are not published yet (compat check adds them when they are)")
    pair = {}
    published = release.published.get(version)
    for backend in BACKENDS:
        offered = confirmed(compat, release, backend)
        left_out = {v: unbuildable(compat, release, backend, v, families) for v in offered}
        versions = [v for v in offered if not left_out[v]]
        entry[backend] = versions
        skipped = [f"{backend} {v} (no device package known for {', '.join(gfx)})" for v, gfx in left_out.items() if gfx]
        if skipped:
            entry[backend].comment(f"left out: {'; '.join(skipped)}")
        if not versions:
            if not skipped:
                entry[backend].comment(f"no confirmed {backend} wheels for torch {release.minor} yet: its images are left out")
            continue
        pypi = published.pypi.split() if published and published.pypi else []
        own_index = [v for v in versions if _on_pytorch_index(compat, backend, v)] or versions
        pair[backend] = pypi[1] if pypi and pypi[0] == backend and pypi[1] in versions else max(own_index, key=Version)
    if len(pair) == len(BACKENDS):
        entry["pair"] = tomlkit.inline_table()
        entry["pair"].update(pair)
    return entry
