"""The Docker engine: BuildKit builds through the docker CLI, everything else through the docker SDK.

docker-py cannot drive BuildKit (docker/docker-py#2230), so builds run `docker buildx build` where the
buildx plugin exists, or a BuildKit-capable `docker build` (a 20.10-22.x client with DOCKER_BUILDKIT=1).
A newer client without buildx cannot do BuildKit builds at all; detection says so and names the fix.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import tarfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import docker
import docker.errors
import docker.types
import requests.exceptions
from packaging.version import InvalidVersion, Version

from buildkit.core.host import GpuAccess
from buildkit.errors import Problem, UserError

# Clients from 23.0 on hand `docker build` to buildx; older ones have BuildKit built in.
_LAST_BUILTIN_BUILDKIT_MAJOR = 22
DOCKER_ENV = "BUILDKIT_DOCKER"


@dataclass(frozen=True)
class BuildkitCli:
    """A docker CLI that can run BuildKit builds, and how."""

    docker: str
    mode: str  # "buildx" or "docker-build"
    client_version: str

    def build_argv(self, arguments: list[str]) -> tuple[list[str], dict[str, str]]:
        environment = dict(os.environ)
        if self.mode == "buildx":
            # --load puts the result in the engine's image store, where the SDK inspects and tags it.
            return [self.docker, "buildx", "build", "--load", *arguments], environment
        environment["DOCKER_BUILDKIT"] = "1"
        return [self.docker, "build", *arguments], environment

    def describe(self) -> str:
        how = "docker buildx build" if self.mode == "buildx" else "docker build with DOCKER_BUILDKIT=1"
        return f"{self.docker} (client {self.client_version}, {how})"


def _probe(executable: str, arguments: list[str]) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run([executable, *arguments], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _docker_candidates(explicit: str | None) -> list[str]:
    if explicit:
        found = shutil.which(explicit)
        if not found:
            raise UserError(Problem(f"--docker / ${DOCKER_ENV}", f"{explicit!r} is not an executable docker CLI"))
        return [found]
    seen: list[str] = []
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = os.path.join(folder, "docker")
        if os.access(candidate, os.X_OK) and os.path.realpath(candidate) not in map(os.path.realpath, seen):
            seen.append(candidate)
    return seen


def detect_buildkit(explicit: str | None = None) -> BuildkitCli:
    """The first docker CLI (the explicit one, else each on PATH in order) that can run a BuildKit build."""
    explicit = explicit or os.environ.get(DOCKER_ENV)
    candidates = _docker_candidates(explicit)
    rejected = []
    for executable in candidates:
        version_run = _probe(executable, ["version", "--format", "{{.Client.Version}}"])
        client = version_run.stdout.strip() if version_run and version_run.stdout.strip() else "unknown"
        buildx = _probe(executable, ["buildx", "version"])
        if buildx is not None and buildx.returncode == 0:
            return BuildkitCli(executable, "buildx", client)
        try:
            builtin = Version(client.split("+")[0].split("-")[0]).major <= _LAST_BUILTIN_BUILDKIT_MAJOR
        except InvalidVersion:
            builtin = False
        if builtin:
            return BuildkitCli(executable, "docker-build", client)
        rejected.append(f"{executable} (client {client}) has no buildx plugin and is too new for built-in BuildKit")
    tried = "; ".join(rejected) if rejected else "no docker CLI on PATH"
    raise UserError(Problem(
        "docker",
        f"no BuildKit-capable docker CLI found ({tried}). Install the buildx plugin (Debian/Ubuntu: docker-buildx or "
        f"docker-buildx-plugin), or point ${DOCKER_ENV} / --docker at a 20.10-22.x client (Debian's docker.io)",
    ))


def connect() -> docker.DockerClient:
    """The engine through the SDK, or one clear message on how to get one."""
    try:
        client = docker.from_env(timeout=300)
        client.ping()
        return client
    except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
        host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise UserError(Problem(
            "docker engine",
            f"cannot reach the Docker engine at {host} ({_first_line(error)}); start it (e.g. `sudo systemctl start docker` "
            "or `dockerd &`) or set DOCKER_HOST",
        )) from None


def engine_alive(client: docker.DockerClient) -> bool:
    try:
        return bool(client.ping())
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        return False


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


@dataclass(frozen=True)
class BuildRequest:
    dockerfile: Path
    context: Path  # the build context: the Dockerfile's empty folder, or a checkout a source build compiles
    build_args: dict[str, str]
    labels: dict[str, str]
    secrets: dict[str, Path] = field(default_factory=dict)  # BuildKit secret id -> file
    network: str | None = None
    no_cache: bool = False
    output: str | None = None  # e.g. type=local,dest=DIR to export files instead of an image


@dataclass
class BuildOutcome:
    image_id: str | None
    returncode: int
    cancelled: bool = False


class Redactor:
    """Replaces secret values (passwords, tokens) in any text before it is logged or reported."""

    def __init__(self, secrets: Iterable[str]):
        self.secrets = sorted({s for s in secrets if s}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "****")
        return text


def run_build(
    cli: BuildkitCli,
    request: BuildRequest,
    log: Path,
    on_line: Callable[[str], None],
    redact: Redactor,
    cancel: threading.Event,
) -> BuildOutcome:
    """One BuildKit build; every output line goes (redacted) to the log file and to on_line."""
    iidfile = request.dockerfile.parent / ".image-id"
    iidfile.unlink(missing_ok=True)
    arguments = ["--progress", "plain", "--file", str(request.dockerfile)]
    if request.output:
        arguments += ["--output", request.output]
    else:
        arguments += ["--iidfile", str(iidfile)]
    for name, value in request.build_args.items():
        arguments += ["--build-arg", f"{name}={value}"]
    for name, value in request.labels.items():
        arguments += ["--label", f"{name}={value}"]
    for secret_id, path in request.secrets.items():
        arguments += ["--secret", f"id={secret_id},src={path}"]
    if request.network:
        arguments += ["--network", request.network]
    if request.no_cache:
        arguments.append("--no-cache")
    argv, environment = cli.build_argv([*arguments, str(request.context)])
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w", encoding="utf-8", buffering=1) as handle:  # line-buffered: users tail it live
        handle.write(redact("$ " + " ".join(argv)) + "\n")
        process = subprocess.Popen(
            argv, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            errors="replace", start_new_session=True,  # Ctrl-C reaches us, and we stop the build's whole group
        )
        watcher = threading.Thread(target=_stop_on_cancel, args=(process, cancel), daemon=True)
        watcher.start()
        assert process.stdout is not None
        for raw in process.stdout:
            line = redact(raw.rstrip("\n"))
            handle.write(line + "\n")
            on_line(line)
        returncode = process.wait()
    image_id = iidfile.read_text().strip() if returncode == 0 and iidfile.exists() else None
    return BuildOutcome(image_id, returncode, cancelled=cancel.is_set())


def _stop_on_cancel(process: subprocess.Popen, cancel: threading.Event) -> None:
    while process.poll() is None:
        if cancel.wait(0.2):
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            return


@dataclass(frozen=True)
class ImageFacts:
    image_id: str
    size: int
    layers: tuple[str, ...]  # diff ids, base first
    history: tuple[tuple[str, int], ...]  # (created_by, size), oldest first
    labels: dict[str, str]


def image_facts(client: docker.DockerClient, reference: str) -> ImageFacts:
    image = client.images.get(reference)
    history = client.api.history(image.id)
    return ImageFacts(
        image_id=image.id,
        size=int(image.attrs.get("Size", 0)),
        layers=tuple(image.attrs.get("RootFS", {}).get("Layers", [])),
        history=tuple((entry.get("CreatedBy", ""), int(entry.get("Size", 0))) for entry in reversed(history)),
        labels=dict(image.attrs.get("Config", {}).get("Labels") or {}),
    )


def image_labels(client: docker.DockerClient, reference: str) -> dict[str, str] | None:
    """An image's labels, or None when the engine does not hold it."""
    try:
        return dict(client.images.get(reference).labels or {})
    except docker.errors.ImageNotFound:
        return None


def runtimes(client: docker.DockerClient) -> tuple[str, ...] | None:
    """The engine's container runtimes (nvidia among them where the NVIDIA toolkit is set up)."""
    try:
        return tuple(client.info().get("Runtimes", {}))
    except (docker.errors.APIError, requests.exceptions.RequestException):
        return None


def tag_image(client: docker.DockerClient, image_id: str, reference: str) -> None:
    repository, _, tag = reference.rpartition(":")
    client.images.get(image_id).tag(repository, tag)


class _ChunkStream(io.RawIOBase):
    """A file object over the SDK's chunk iterator, so tarfile can read an export as a stream."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks = iter(chunks)
        self._buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, target) -> int:
        while not self._buffer:
            try:
                self._buffer = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(target), len(self._buffer))
        target[:size] = self._buffer[:size]
        self._buffer = self._buffer[size:]
        return size


@dataclass(frozen=True)
class ImageBytes:
    """Bytes of files, counted the same way on every image store: regular files by size, symlinks by the
    length of their target, each hard-linked file once."""

    layers: int  # in all the image's layers together, uncompressed: what pulling it writes
    filesystem: int  # in its final filesystem: what a container sees

    @property
    def efficiency(self) -> float:
        return self.layers / self.filesystem if self.filesystem else 0.0


_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"


def _normalised(name: str) -> str:
    return name.removeprefix("./").strip("/")


def _layer_entries(stream) -> list[tuple[str, int]]:
    """(path, bytes) of every entry of one layer tar, whiteouts as (path, -1) and opaque dirs as (dir/, -2)."""
    entries = []
    with tarfile.open(fileobj=stream, mode="r|*") as layer:
        for member in layer:
            path = _normalised(member.name)
            folder, _, name = path.rpartition("/")
            if name == _OPAQUE:
                entries.append((folder + "/", -2))
            elif name.startswith(_WHITEOUT):
                entries.append((f"{folder}/{name[len(_WHITEOUT):]}".lstrip("/"), -1))
            elif member.isreg():
                entries.append((path, member.size))
            elif member.issym():
                entries.append((path, len(member.linkname)))
            else:
                entries.append((path, 0))  # folders, devices, hard links: no bytes of their own
    return entries


def image_bytes(client: docker.DockerClient, image_id: str) -> ImageBytes:
    """Both sizes from one `docker save` stream: each layer's files, and the filesystem its layers add up to
    (later layers replace files, whiteouts delete them). The engine's own `Size` cannot serve: the classic
    store reports uncompressed layers, the containerd store compressed ones."""
    layers: dict[str, list[tuple[str, int]]] = {}
    order: list[str] = []
    stream = io.BufferedReader(_ChunkStream(client.images.get(image_id).save(named=False)), buffer_size=1 << 20)
    with tarfile.open(fileobj=stream, mode="r|") as archive:
        for member in archive:
            if not member.isreg():
                continue
            handle = archive.extractfile(member)
            if member.name == "manifest.json":
                order = json.loads(handle.read())[0]["Layers"]
            elif member.name.startswith("blobs/"):
                try:
                    layers[member.name] = _layer_entries(handle)
                except tarfile.TarError:
                    continue  # a config or manifest blob, not a layer
    filesystem: dict[str, int] = {}
    total = 0
    for name in order:
        for path, size in layers.get(name, []):
            if size == -2:
                for existing in [p for p in filesystem if p.startswith(path)]:
                    del filesystem[existing]
            elif size == -1:
                for existing in [p for p in filesystem if p == path or p.startswith(path + "/")]:
                    del filesystem[existing]
            else:
                filesystem[path] = size
                total += size
    return ImageBytes(total, sum(filesystem.values()))


def push_image(client: docker.DockerClient, reference: str, username: str | None, password: str | None) -> str:
    """Push one tag through the engine (it uploads every blob before it writes the tag) and return the
    manifest digest; a failure raises UserError with the registry's own words."""
    repository, _, tag = reference.rpartition(":")
    auth = {"username": username, "password": password} if username else None
    digest = ""
    try:
        for event in client.images.push(repository, tag, auth_config=auth, stream=True, decode=True):
            if "error" in event:
                raise UserError(Problem(reference, f"push failed: {event['error']}"))
            digest = (event.get("aux") or {}).get("Digest", digest)
    except (docker.errors.APIError, requests.exceptions.RequestException) as error:
        raise UserError(Problem(reference, f"push failed: {_first_line(error)}")) from None
    return digest


def sdk_gpu_options(access: GpuAccess) -> dict:
    """The docker SDK's container arguments for the same access `docker run` gets from GpuAccess.docker_flags()."""
    options: dict = {"shm_size": access.shm_size}
    if access.gpu_request:
        options["device_requests"] = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    if access.devices:
        options["devices"] = [f"{device}:{device}:rwm" for device in access.devices]
    if access.groups:
        options["group_add"] = list(access.groups)
    if access.security_options:
        options["security_opt"] = list(access.security_options)
    return options
