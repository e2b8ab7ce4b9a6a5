"""The wheels this machine already has, found through its pip configuration (never hard-coded paths).

pip's `extra-index-url` entries that are file:// simple indexes and its `find-links` folders are read;
tests serve what they hold on 127.0.0.1 so builds install real torch without the internet.
"""

from __future__ import annotations

import base64
import hashlib
import re
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

from packaging.version import Version

from buildkit.adapters.index.wheel_index import default_package_index

if TYPE_CHECKING:
    from testkit.wheel_index import WheelIndex

_HREF_RE = re.compile(r'href="([^"#]+)')


def _pip_config() -> dict[str, str]:
    result = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True)
    values = {}
    for line in result.stdout.splitlines():
        key, _, value = line.partition("=")
        values[key.split(".", 1)[-1].strip()] = value.strip().strip("'\"")
    return values


def local_wheels() -> list[Path]:
    config = _pip_config()
    wheels: dict[str, Path] = {}
    for url in config.get("extra-index-url", "").split() + config.get("index-url", "").split():
        parts = urlsplit(url)
        if parts.scheme != "file":
            continue
        root = Path(unquote(parts.path))
        for page in root.glob("*/index.html"):
            for href in _HREF_RE.findall(page.read_text(errors="replace")):
                path = (page.parent / unquote(href)).resolve()
                if path.suffix == ".whl" and path.exists():
                    wheels.setdefault(path.name, path)
    for folder in config.get("find-links", "").split():
        for path in Path(folder).glob("*.whl"):
            wheels.setdefault(path.name, path)
    return sorted(wheels.values())


def as_backend_build(wheel: Path, local: str, cache: Path, git_version: str = "") -> Path:
    """The same wheel as PyTorch's own index names it: torch-2.14.1 from PyPI (the CUDA 13.0 build, with no
    local version) as torch-2.14.1+cu130, the file name, METADATA and dist-info folder renamed and RECORD
    rewritten, so an index on 127.0.0.1 mirrors download.pytorch.org/whl/cu130/. Made once per machine.
    `git_version`: the commit torch/version.py names instead of its own (the same release built again, as
    a nightly builds the next day: one file differs, every other byte is the same)."""
    name, version = wheel.name.split("-")[:2]
    folder = cache / f"git-{git_version}" if git_version else cache
    target = folder / wheel.name.replace(f"-{version}-", f"-{version}+{local}-", 1)
    if target.exists():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    old_info, new_info = f"{name}-{version}.dist-info/", f"{name}-{version}+{local}.dist-info/"
    partial = target.with_suffix(".partial")
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as copy:
        records = []
        for info in source.infolist():
            if info.filename == old_info + "RECORD":
                continue
            data = source.read(info)
            if info.filename == old_info + "METADATA":
                data = re.sub(rb"(?m)^Version: .*$", f"Version: {version}+{local}".encode(), data, count=1)
            if git_version and info.filename == f"{name}/version.py":
                data = re.sub(rb"(?m)^git_version = .*$", f"git_version = '{git_version}'".encode(), data, count=1)
            renamed = new_info + info.filename[len(old_info) :] if info.filename.startswith(old_info) else info.filename
            copy.writestr(zipfile.ZipInfo(renamed, info.date_time) if info.is_dir() else _info_like(info, renamed), data)
            if not info.is_dir():
                digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                records.append(f"{renamed},sha256={digest},{len(data)}")
        records.append(f"{new_info}RECORD,,")
        copy.writestr(new_info + "RECORD", "\n".join(records) + "\n")
    partial.rename(target)
    return target


def _info_like(info: zipfile.ZipInfo, name: str) -> zipfile.ZipInfo:
    copy = zipfile.ZipInfo(name, info.date_time)
    copy.external_attr, copy.compress_type = info.external_attr, zipfile.ZIP_DEFLATED
    return copy


def default_index() -> str:
    """The index this machine's pip uses when none is configured: pip's own default, never written here."""
    configured = _pip_config().get("index-url", "").split()
    return configured[0] if configured else default_package_index()


# The distributions of torch 2.14.1's CUDA install whose wheels are built per Python (the rest are py3-none).
PER_PYTHON = ("torch", "torchvision", "triton", "numpy", "pillow", "markupsafe")
RELEASES = {"torch": "2.14.1", "torchvision": "0.29.1"}


def cuda_index(host: str = "127.0.0.1", pythons: tuple[str, ...] = ("3.11",), git_version: str = "") -> WheelIndex | None:
    """This machine's own wheels on a local index, named as PyTorch's index names them (not started):
    /cu130/ holds torch 2.14.1 and torchvision 0.29.1 renamed +cu130 with everything else this machine has, and
    mirrors the projects it lacks from the machine's default index, as download.pytorch.org mirrors torch's
    dependencies; /all/ is every wheel and the uv the images pin, as find-links. None when the machine has no
    such torch wheels. Each Python of `pythons` beyond 3.11 gets the wheels built for it (other_python_wheels);
    `git_version` serves torch built again (as_backend_build)."""
    from buildkit.adapters.files.bundled import shipped_compat
    from testkit.builds import machine_ca_bundle
    from testkit.wheel_index import WheelIndex

    wheels = [*local_wheels(), uv_wheel(shipped_compat().uv)]
    wheels += [wheel for python in pythons if python != "3.11" for wheel in other_python_wheels(python, wheels)]
    tags = tuple(f"{name}-{version}-cp{python.replace('.', '')}" for python in pythons for name, version in RELEASES.items())
    builds = [w for w in wheels if w.name.startswith(tags)]
    if len(builds) != 2 * len(pythons):
        return None
    cache = Path.home() / ".cache" / "buildkit-tests"
    cu130 = [w for w in wheels if w not in builds] + [as_backend_build(w, "cu130", cache, git_version if w.name.startswith("torch-") else "") for w in builds]
    return WheelIndex(
        {"cu130": cu130, "all": wheels}, flat={"all"}, upstream={"cu130": default_index()}, upstream_ca=str(machine_ca_bundle() or "") or True, host=host
    )


def other_python_wheels(python: str, wheels: list[Path]) -> list[Path]:
    """The wheels of PER_PYTHON built for another CPython (3.13), at the versions this machine has for 3.11
    (torch and torchvision at RELEASES), from the machine's own package index, fetched once: a local index
    serving only cp311 wheels of a project mirrors nothing of it for another Python."""
    abi = f"cp{python.replace('.', '')}"
    cache = Path.home() / ".cache" / "buildkit-tests" / abi
    pins = []
    for project in PER_PYTHON:
        found = sorted((w for w in wheels if w.name.lower().startswith(f"{project}-") and "-cp311-" in w.name), key=lambda w: Version(w.name.split("-")[1]))
        version = RELEASES.get(project) or (found[-1].name.split("-")[1] if found else "")
        if version:
            pins.append(f"{project}=={version}")
    present = [next(iter(sorted(cache.glob(f"{pin.split('==')[0]}-{pin.split('==')[1]}-{abi}-*.whl"))), None) for pin in pins]
    if None in present:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--quiet",
                "--no-deps",
                "--only-binary",
                ":all:",
                "--python-version",
                python,
                "--implementation",
                "cp",
                "--platform",
                "manylinux_2_28_x86_64",
                "--dest",
                str(cache),
                *pins,
            ],
            check=True,
            capture_output=True,
            timeout=1800,
        )
        present = [next(iter(sorted(cache.glob(f"{pin.split('==')[0]}-{pin.split('==')[1]}-{abi}-*.whl"))), None) for pin in pins]
    return [path for path in present if path is not None]


def uv_wheel(version: str) -> Path:
    """uv's wheel for this machine (the release images pin), from the machine's own package index, fetched once:
    test indexes serve it as a team's mirror of PyPI would."""
    cache = Path.home() / ".cache" / "buildkit-tests" / f"uv-{version}"
    found = sorted(cache.glob(f"uv-{version}-*.whl"))
    if not found:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:", "--dest", str(cache), f"uv=={version}"],
            check=True,
            capture_output=True,
            timeout=600,
        )
        found = sorted(cache.glob(f"uv-{version}-*.whl"))
    return found[0]
