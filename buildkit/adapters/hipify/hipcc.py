"""The hipcc the compile check uses, and where it runs: on this machine, or in a ROCm toolchain image.

hipcc is a driver around a clang (ROCm's /opt/rocm/llvm, or Debian's clang++-NN); which GPU archs it can
target is that clang's list, and an older ROCm simply does not know the newer chips (Debian 12's HIP 5.2
with clang 15 rejects gfx942 with "invalid target ID", HIP 5.7's clang 17 rejects gfx950). Knowing the list
lets the compile check pick an arch this hipcc can build for, and tell a toolchain limit from a defect in
the code it compiles.

A CUDA developer rarely has ROCm installed, and a distribution's may be too old for the arch that matters,
so hipcc can also run in a container of a toolchain image (`--toolchain-image`: AMD's rocm/dev-ubuntu
images, or the Debian one .ci/rocm-toolchain-image.sh builds) through the engine. The files a compile reads
are mounted read-only at the same paths, and its output folder writable, so every path in a command and in
the compiler's messages means the same inside the container and out; the container has no network.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import docker
import docker.errors

from buildkit.adapters.engine import docker_sdk
from buildkit.adapters.engine.containers import run_once
from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from collections.abc import Sequence

_VERSION_RE = re.compile(r"HIP version:\s*(\d+)\.(\d+)")
_COMMAND_RE = re.compile(r"^hipcc-cmd:\s*(\S+)", re.MULTILINE)  # HIPCC_VERBOSE=1: the clang command hipcc runs
_GFX_RE = re.compile(r"\bgfx[0-9a-f]{3,4}\b")
# What clang and hipcc say when they do not know an arch (clang 15-21 wordings) or lack its device library.
_TOOLCHAIN_LIMIT_RE = re.compile(
    r"invalid target ID|unsupported (?:CUDA|HIP) (?:gpu |offload )?arch|(?:unsupported|invalid) offload arch"
    r"|unknown target CPU|cannot find ROCm device librar|No valid AMD GPU target",
    re.IGNORECASE,
)
_QUERY_SECONDS = 120
# Without HIP_PLATFORM=amd, hipcc picks a machine's nvcc when one is installed.
_AMD = {"HIP_PLATFORM": "amd"}
# ROCm's documented install prefix: its images do not always put /opt/rocm/bin on PATH.
_ROCM_HIPCC = "/opt/rocm/bin/hipcc"


@dataclass(frozen=True)
class Ran:
    returncode: int | None  # None: it did not finish in time (and was stopped)
    output: str  # stdout and stderr, interleaved as the program wrote them


class HostRunner:
    """Programs run on this machine."""

    where = "on this machine"
    on_host = True

    def run(self, argv: Sequence[str], environment: dict[str, str], timeout: int, read_only: Sequence[Path] = (), writable: Sequence[Path] = ()) -> Ran:
        # hipcc's clang leaves a folder per input (gemm-1a2b3c) in TMPDIR: a scratch one goes away with them
        with tempfile.TemporaryDirectory(prefix="buildkit-hipcc-") as scratch:
            try:
                result = subprocess.run(
                    list(argv),
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    errors="replace",
                    env={**os.environ, **environment, "TMPDIR": scratch},
                    timeout=timeout,
                )
            except subprocess.TimeoutExpired:
                return Ran(None, "")
            except OSError as error:
                return Ran(127, f"{argv[0]}: {error.strerror}")
        return Ran(result.returncode, result.stdout)

    def locate_hipcc(self) -> tuple[str, str] | None:
        """hipcc as it is called and the file it really is (torch finds ROCm's home from the latter)."""
        found = shutil.which("hipcc") or (_ROCM_HIPCC if os.access(_ROCM_HIPCC, os.X_OK) else None)
        return (found, os.path.realpath(found)) if found else None

    def cxx(self) -> str:
        return os.environ.get("CXX", "c++")  # torch.utils.cpp_extension.get_cxx_compiler()'s rule


@dataclass
class ImageRunner:
    """Programs run in a fresh container of a ROCm toolchain image, one container per command."""

    image: str
    client: docker.DockerClient = field(repr=False)

    @property
    def where(self) -> str:
        return f"in image {self.image}"

    on_host = False

    @classmethod
    def of(cls, image: str) -> ImageRunner:
        client = docker_sdk.connect()
        try:
            client.images.get(image)
        except docker.errors.ImageNotFound:
            raise UserError(
                Problem(
                    "--toolchain-image",
                    f"{image} is not in the engine: pull it first (docker pull {image}; AMD's "
                    "rocm/dev-ubuntu-24.04 images carry hipcc), or build one from Debian's packages as buildkit's "
                    ".ci/rocm-toolchain-image.sh does",
                )
            ) from None
        except docker.errors.APIError as error:
            raise UserError(Problem("--toolchain-image", f"{image}: {error.explanation or error}")) from None
        return cls(image, client)

    def run(self, argv: Sequence[str], environment: dict[str, str], timeout: int, read_only: Sequence[Path] = (), writable: Sequence[Path] = ()) -> Ran:
        volumes = {str(path): {"bind": str(path), "mode": "ro"} for path in _outermost(read_only)}
        volumes.update({str(path): {"bind": str(path), "mode": "rw"} for path in writable})
        try:
            ran = run_once(
                self.client,
                self.image,
                timeout,
                command=list(argv),
                environment={"HOME": "/tmp", **environment},
                volumes=volumes,
                network_disabled=True,
                user=f"{os.getuid()}:{os.getgid()}",
                labels={"dev.buildkit.toolchain-run": "1"},
            )
        except docker.errors.APIError as error:
            return Ran(127, f"the container could not run: {error.explanation or error}")
        return Ran(ran.status, "" if ran.timed_out else ran.output)  # HostRunner's answer to a timeout: nothing was read

    def locate_hipcc(self) -> tuple[str, str] | None:
        found = self.run(["sh", "-c", f'p=$(command -v hipcc || echo {_ROCM_HIPCC}); [ -x "$p" ] && echo "$p" && readlink -f "$p"'], {}, _QUERY_SECONDS)
        lines = found.output.split()
        return (lines[0], lines[1]) if found.returncode == 0 and len(lines) == 2 else None

    def cxx(self) -> str:
        return "c++"


Runner = HostRunner | ImageRunner
HOST = HostRunner()


def _outermost(paths: Sequence[Path]) -> list[Path]:
    """The paths with every one that lies inside another left out (one mount covers it)."""
    unique = sorted(set(paths), key=lambda path: len(path.parts))
    kept: list[Path] = []
    for path in unique:
        if not any(path == outer or outer in path.parents for outer in kept):
            kept.append(path)
    return kept


@dataclass(frozen=True)
class Hipcc:
    path: str
    version: str  # HIP major.minor, e.g. "5.7"; "" when hipcc did not say
    archs: frozenset[str] | None  # gfx targets its clang compiles for; None when it could not be asked
    runner: Runner = HOST
    rocm_home: str = ""  # where torch's rule puts ROCm for this hipcc (its include folder holds the HIP headers)

    @property
    def name(self) -> str:
        return f"hipcc {self.version}" if self.version else "this hipcc"

    @property
    def described(self) -> str:
        return f"{self.name} ({self.path} {self.runner.where})"

    def run(self, argv: Sequence[str], timeout: int, read_only: Sequence[Path] = (), writable: Sequence[Path] = ()) -> Ran:
        return self.runner.run(argv, _AMD, timeout, read_only, writable)


def find_hipcc(runner: Runner = HOST) -> Hipcc | None:
    located = runner.locate_hipcc()
    if located is None:
        return None
    hipcc, real = located
    output = runner.run([hipcc, "--version"], {**_AMD, "HIPCC_VERBOSE": "1"}, _QUERY_SECONDS).output
    version = _VERSION_RE.search(output)
    clang = _COMMAND_RE.search(output)
    compiler = clang.group(1) if clang else _clang_beside(runner, hipcc)
    archs = None
    if compiler:
        # -nogpulib: clang 15 refuses even to list its CPUs when it finds no ROCm device library
        listed = runner.run([compiler, "--target=amdgcn-amd-amdhsa", "-nogpulib", "--print-supported-cpus"], {}, _QUERY_SECONDS).output
        archs = frozenset(_GFX_RE.findall(listed)) or None
    return Hipcc(hipcc, f"{version.group(1)}.{version.group(2)}" if version else "", archs, runner, _rocm_home(real))


def _rocm_home(real_hipcc: str) -> str:
    # torch.utils.cpp_extension._find_rocm_home (torch 2.4-2.13): hipcc is <ROCM_HOME>/bin/hipcc or <ROCM_HOME>/hip/bin/hipcc
    home = os.path.dirname(os.path.dirname(real_hipcc))
    return os.path.dirname(home) if os.path.basename(home) == "hip" else home


def _clang_beside(runner: Runner, hipcc: str) -> str | None:
    """Where hipcc's verbose mode said nothing: hipconfig names the folder of hipcc's clang."""
    hipconfig = str(Path(hipcc).with_name("hipconfig"))
    ran = runner.run([hipconfig, "--hipclangpath"], _AMD, _QUERY_SECONDS)
    folder = ran.output.strip().splitlines()[-1] if ran.returncode == 0 and ran.output.strip() else ""
    return f"{folder}/clang++" if folder else None


def _arch_number(arch: str) -> int:
    # gfx names carry a hex-like number that grows with each generation of a family: gfx90a > gfx908; a variant's
    # name goes on after it (rocm-bootstrap's gfx1250-strict)
    return int(arch[3:].partition("-")[0], 16)


def is_data_center(arch: str) -> bool:
    # gfx9 is the GCN5/CDNA line: Vega and every Instinct accelerator (MI25 .. MI355X); RDNA parts are gfx10-gfx12.
    return arch.startswith("gfx9")


def default_offload_arch(hipcc: Hipcc | None, known: Sequence[str]) -> str:
    """The newest data-center target among buildkit's known ones that this hipcc can compile for (newest of
    any family when it knows no data-center one); the newest known one when hipcc cannot be asked."""
    newest_first = sorted(known, key=lambda arch: (is_data_center(arch), _arch_number(arch)), reverse=True)
    for arch in newest_first:
        if hipcc is None or hipcc.archs is None or arch in hipcc.archs:
            return arch
    return newest_first[0]


def supports(hipcc: Hipcc, arch: str) -> bool:
    return hipcc.archs is None or arch.split(":")[0] in hipcc.archs


def is_toolchain_limit(output: str, arch: str) -> bool:
    """Whether compiler output says the arch is beyond this toolchain (a line that names the arch and one of
    the driver's unknown-target errors), rather than that the code is wrong."""
    base = arch.split(":")[0]
    return any(_TOOLCHAIN_LIMIT_RE.search(line) and base in line for line in output.splitlines())


def toolchain_limit_message(hipcc: Hipcc, arch: str, known: Sequence[str]) -> str:
    choices = [a for a in known if hipcc.archs is None or a in hipcc.archs]
    pick = f"pick --offload-arch from: {', '.join(choices)}" if hipcc.archs is not None else "pick another --offload-arch"
    newer = (
        "install a newer ROCm, check in a newer ROCm toolchain image (--toolchain-image IMAGE)," if hipcc.runner.on_host else "use an image with a newer ROCm,"
    )
    return f"{hipcc.name} cannot compile for {arch} (a toolchain limit, not your code): {newer} or {pick}"
