"""TEST DOUBLES of published torch artifacts: PyPI's PEP 691 JSON pages and wheels whose METADATA and
version modules carry the published fields, served on 127.0.0.1 with byte ranges, as PyPI's file host and
download.pytorch.org serve them.

The field values below are copies of the published wheels' (read from PyPI on 2026-12-03 with range
requests: METADATA and torch/version.py of torch-2.15.0-cp312-cp312-manylinux_2_28_x86_64.whl,
torchvision-0.29.2-py3-none-manylinux_2_28_x86_64.whl and torchaudio-2.11.1-py3-none-manylinux_2_28_x86_64.whl;
ROCm 7.14's requirement from pytorch/pytorch #193979's pip log). A release that does not exist yet (2.16.0)
is the 2.15.0 one with its versions moved on, and says so in its file names' dates only: nothing here is
a real 2.16 fact.
"""

from __future__ import annotations

import io
import json
import re
import zipfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from testkit.local_http import QuietHandler, serve, stop_serving

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler

# torch-2.15.0's Requires-Dist on Linux (PyPI), the backend libraries first
TORCH_2_15_CUDA_PINS = (
    'cuda-toolkit[cublas,cudart,cufft,cufile,cupti,cusolver,cusparse,nvjitlink,nvrtc,nvtx]==13.2.2; platform_system == "Linux"',
    'cuda-bindings<14,>=13.0.3; platform_system == "Linux" and python_version < "3.15"',
    'nvidia-cudnn-cu13==9.26.0.51; platform_system == "Linux"',
    'nvidia-cusparselt-cu13==0.8.1; platform_system == "Linux"',
    'nvidia-nccl-cu13==2.30.7; platform_system == "Linux"',
    'nvidia-nvshmem-cu13==3.7.2; platform_system == "Linux"',
    'triton~=3.9.0; platform_system == "Linux" and python_version < "3.16"',
)
TORCH_COMMON = (
    "filelock",
    "typing-extensions>=4.13.0",
    "setuptools>=77.0.3",
    "sympy>=1.13.3",
    "networkx>=2.5.1",
    "jinja2",
    "fsspec>=0.8.5",
    'optree>=0.13.0; extra == "optree"',
)
ROCM_THIN_PINS = ("rocm[device-all,libraries]=={version}.*",)  # torch +rocm7.14 on PyTorch's index (pytorch/pytorch #193979)
# Copies of the tables in PyPI's wheels (torch/cuda/__init__.py, read by byte ranges on 2026-12-06), with the
# lines around them: torch-2.13.0-cp312-cp312-manylinux_2_28_x86_64.whl and torch-2.11.0-cp312-... (the same in
# their aarch64 wheels).
TABLE_2_13 = """
# TORCH_CUDA_ARCH_LIST for PyTorch releases
PYTORCH_RELEASES_CODE_CC: dict[str, dict[str, set[int]]] = {
    "12.6": {
        "x86_64": {50, 60, 70, 75, 80, 86, 90},
        "aarch64": {80, 90},
    },
    "12.9": {
        "x86_64": {75, 80, 86, 90, 100, 120},
        "aarch64": {80, 90, 100, 120},
    },
    "13.0": {
        "x86_64": {75, 80, 86, 90, 100, 120},
        "aarch64": {80, 90, 100, 110, 120},
    },
    "13.2": {
        "x86_64": {75, 80, 86, 90, 100, 120},
        "aarch64": {80, 90, 100, 110, 120},
    },
}


def _host_arch_key() -> str:
    machine = platform.machine().lower()
"""
TABLE_2_11 = """
# TORCH_CUDA_ARCH_LIST for PyTorch releases
PYTORCH_RELEASES_CODE_CC: dict[str, set[int]] = {
    "12.6": {50, 60, 70, 80, 86, 90},
    "12.8": {70, 80, 86, 90, 100, 120},
    "13.0": {75, 80, 86, 90, 100, 110, 120},
}
"""
_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def wheel_bytes(filename: str, metadata: str, files: dict[str, str] | None = None) -> bytes:
    """A wheel (a zip) with the given METADATA and files, and padding, so a range reader must seek in it."""
    name, version = filename.split("-")[:2]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as wheel:
        wheel.writestr(f"{name}/padding.bin", bytes(range(256)) * 2048)  # 512 KiB, stored before the metadata as real wheels do
        for path, text in (files or {}).items():
            wheel.writestr(path, text)
        wheel.writestr(f"{name}-{version.split('+')[0]}.dist-info/METADATA", metadata)
        wheel.writestr(f"{name}-{version.split('+')[0]}.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: buildkit-tests\nRoot-Is-Purelib: false\n")
    return buffer.getvalue()


def metadata_text(name: str, version: str, requires_python: str, requires: tuple[str, ...]) -> str:
    return (
        f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\nRequires-Python: {requires_python}\n"
        + "".join(f"Requires-Dist: {line}\n" for line in requires)
        + "\nThe description, which compat check never reads.\n"
    )


def torch_version_module(version: str, local: str) -> str:
    """torch/version.py as torch's wheels write it (2.15.0's on PyPI: __version__ = '2.15.0+cu132', cuda = '13.2')."""
    cuda = f"'{int(local[2:-1])}.{local[-1]}'" if local.startswith("cu") else "None"
    hip = f"'{local[4:]}.0'" if local.startswith("rocm") else "None"
    return (
        "from typing import Optional\n\n__all__ = ['__version__', 'debug', 'cuda', 'git_version', 'hip', 'rocm', 'xpu']\n"
        f"__version__ = '{version}+{local}'\ndebug = False\ncuda: Optional[str] = {cuda}\ngit_version = 'test-double'\n"
        f"hip: Optional[str] = {hip}\nrocm: Optional[str] = None\nxpu: Optional[str] = None\n"
    )


@lru_cache(maxsize=512)
def torch_wheel(filename: str, requires_python: str = ">=3.11", build: str = "cu132") -> bytes:
    """A torch wheel double: its METADATA pins what the variant in its local version pins (PyPI's names have
    none: `build` is the one PyPI serves, CUDA 13.2 for 2.15.0, 13.0 for 2.14.1)."""
    version = filename.split("-")[1]
    release, _, local = version.partition("+")
    local = local or build
    pins = (
        TORCH_2_15_CUDA_PINS
        if local.startswith("cu")
        else tuple(p.format(version=local[4:]) for p in ROCM_THIN_PINS)
        if local.startswith(("rocm7.14", "rocm10"))
        else ()
    )
    metadata = metadata_text("torch", release, requires_python, (*TORCH_COMMON[:7], *pins, TORCH_COMMON[7]))
    return wheel_bytes(filename, metadata, {"torch/version.py": torch_version_module(release, local)})


def companion_wheel(filename: str, torch_requirement: str, requires_python: str = ">=3.10") -> bytes:
    """torchvision and torchaudio doubles: torchvision 0.29.2's METADATA says `Requires-Dist: torch (>=2.14.0)`."""
    name, version = filename.split("-")[:2]
    requires = ("numpy", torch_requirement, "pillow (!=8.3.*,>=5.3.0)") if name == "torchvision" else (torch_requirement,)
    return wheel_bytes(
        filename,
        metadata_text(name, version, requires_python, requires),
        {f"{name}/version.py": f"__version__ = '{version}+cu132'\ngit_version = 'test-double'\n"},
    )


def send_ranged(handler: BaseHTTPRequestHandler, data: bytes | Path) -> None:
    """200 with the whole body, or 206 with the bytes of one `Range: bytes=a-b` / `bytes=-n`; a Path is read
    for the range asked only (a real wheel is hundreds of MB)."""
    size = data.stat().st_size if isinstance(data, Path) else len(data)
    asked = _RANGE.match(handler.headers.get("Range", ""))
    if asked is None:
        start, end, status = 0, size - 1, 200
    elif asked.group(1) == "":
        start, end, status = max(size - int(asked.group(2)), 0), size - 1, 206
    else:
        start, end, status = int(asked.group(1)), min(int(asked.group(2)) if asked.group(2) else size - 1, size - 1), 206
    handler.send_response(status)
    if status == 206:
        handler.send_header("Content-Range", f"bytes {start}-{end}/{size}")
    handler.send_header("Content-Length", str(end - start + 1))
    handler.end_headers()
    if isinstance(data, Path):
        with open(data, "rb") as source:
            source.seek(start)
            left = end - start + 1
            while left > 0 and (chunk := source.read(min(left, 1 << 20))):
                handler.wfile.write(chunk)
                left -= len(chunk)
    else:
        handler.wfile.write(data[start : end + 1])


@dataclass
class PublishedFile:
    filename: str
    uploaded: str  # 2026-10-28T15:16:25Z
    requires_python: str
    data: bytes


@dataclass
class PypiDouble:
    """PyPI's simple API for a few projects: PEP 691 JSON when asked for it (with upload-time, PEP 700), and
    each file, with ranges. `requests` records every path asked."""

    projects: dict[str, list[PublishedFile]]
    requests: list[str] = field(default_factory=list)
    ranges: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        double = self

        class Handler(QuietHandler):
            def do_GET(self) -> None:
                double.requests.append(self.path)
                if self.headers.get("Range"):
                    double.ranges.append(self.headers["Range"])
                double._serve(self)

        self._handler = Handler

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/simple"

    def start(self) -> PypiDouble:
        self.server = serve(self._handler)
        return self

    def stop(self) -> None:
        stop_serving(self.server)

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        parts = [p for p in handler.path.split("?")[0].split("/") if p]
        if len(parts) == 2 and parts[0] == "simple" and parts[1] in self.projects:
            document = {
                "meta": {"api-version": "1.1"},
                "name": parts[1],
                "files": [
                    {
                        "filename": f.filename,
                        "url": f"/files/{parts[1]}/{f.filename}",
                        "hashes": {},
                        "requires-python": f.requires_python,
                        "size": len(f.data),
                        "upload-time": f.uploaded,
                        "yanked": False,
                    }
                    for f in self.projects[parts[1]]
                ],
            }
            body = json.dumps(document).encode()
            handler.send_response(200)
            handler.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
            return None
        if len(parts) == 3 and parts[0] == "files" and parts[1] in self.projects:
            found = next((f for f in self.projects[parts[1]] if f.filename == parts[2]), None)
            if found is not None:
                return send_ranged(handler, found.data)
        handler.send_response(404)
        handler.send_header("Content-Length", "0")
        handler.end_headers()
        return None


def torch_release_files(release: str, day: str, pythons: tuple[str, ...], requires_python: str, build: str = "cu132") -> list[PublishedFile]:
    """A torch release as PyPI publishes it: one CUDA wheel per CPython per Linux platform (and macOS, which compat check leaves out)."""
    files = []
    for python in pythons:
        cp = "cp" + python.replace(".", "")
        for platform in ("manylinux_2_28_x86_64", "manylinux_2_28_aarch64", "macosx_14_0_arm64"):
            name = f"torch-{release}-{cp}-{cp}-{platform}.whl"
            files.append(PublishedFile(name, f"{day}T15:16:25Z", requires_python, torch_wheel(name, requires_python, build)))
    return files


def companion_files(name: str, release: str, day: str, torch_requirement: str) -> list[PublishedFile]:
    """torchvision/torchaudio as 0.29.2 and 2.11.1 are published: one py3-none wheel per platform."""
    return [
        PublishedFile(
            f"{name}-{release}-py3-none-{platform}.whl",
            f"{day}T15:21:34Z",
            ">=3.10",
            companion_wheel(f"{name}-{release}-py3-none-{platform}.whl", torch_requirement),
        )
        for platform in ("manylinux_2_28_x86_64", "manylinux_2_28_aarch64")
    ]
