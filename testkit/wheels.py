"""TEST DOUBLES for torch builds: tiny wheels that stand in for torch's CUDA and ROCm wheels.

No ROCm wheel can be had on this machine (and a real CUDA torch is 5 GB), so pair tests install these.
They carry what the smoke test and the build read: `torch.__version__` with its local tag and
`torch.version.cuda` / `torch.version.hip`, plus a `torch.cuda` that reports no GPU.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

TORCH_DOUBLE = '''"""TEST DOUBLE of torch ({local}); not PyTorch."""
from . import version, cuda  # noqa: F401
__version__ = "{version}"
BUILDKIT_TEST_DOUBLE = True
'''
VERSION_DOUBLE = '''__version__ = "{version}"
cuda = {cuda!r}
hip = {hip!r}
git_version = "test-double"
'''
CUDA_DOUBLE = '''"""TEST DOUBLE of torch.cuda: no GPU."""
def is_available():
    return False
def device_count():
    return 0
def get_arch_list():
    return {archs!r}
'''


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(folder: Path, name: str, version: str, files: dict[str, str | bytes], requires: list[str] = ()) -> Path:
    """A valid py3-none-any wheel with the given files."""
    distribution = name.replace("-", "_")
    dist_info = f"{distribution}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(f"Requires-Dist: {r}\n" for r in requires)
    contents = {
        **{path: data.encode() if isinstance(data, str) else data for path, data in files.items()},
        f"{dist_info}/METADATA": metadata.encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: buildkit-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [_record_line(path, data) for path, data in contents.items()] + [f"{dist_info}/RECORD,,"]
    contents[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{distribution}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for member, data in contents.items():
            archive.writestr(member, data)
    return path


def torch_double(folder: Path, torch: str, local: str, cuda: str | None, hip: str | None, archs: list[str]) -> Path:
    version = f"{torch}+{local}" if local else torch
    return build_wheel(folder, "torch", version, {
        "torch/__init__.py": TORCH_DOUBLE.format(local=local or "cpu", version=version),
        "torch/version.py": VERSION_DOUBLE.format(version=version, cuda=cuda, hip=hip),
        "torch/cuda/__init__.py": CUDA_DOUBLE.format(archs=archs),
    })


def companion_double(folder: Path, name: str, version: str, local: str, torch: str) -> Path:
    module = name.replace("-", "_")
    full = f"{version}+{local}" if local else version
    return build_wheel(
        folder, name, full,
        {f"{module}/__init__.py": f'"""TEST DOUBLE of {name}."""\n__version__ = "{full}"\n'},
        requires=[f"torch=={torch}"],
    )
