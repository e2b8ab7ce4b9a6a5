"""The Docker engine through the docker SDK: inspecting, tagging, measuring, pulling and pushing images.

Builds go through BuildKit (buildkit.adapters.engine.buildx): the SDK cannot drive it (docker/docker-py#2230).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING

import docker
import docker.errors
import docker.types
import requests.exceptions

from buildkit.core.host.facts import EngineFacts
from buildkit.core.labels import STAMP_LABELS
from buildkit.errors import Problem, UserError, printable

if TYPE_CHECKING:
    from collections.abc import Iterable

    from _typeshed import WriteableBuffer

    from buildkit.core.host.access import GpuAccess

# Reaching the engine is quick or it is not happening: a socket that is missing or refuses answers at
# once, and an address that swallows packets (a stopped VM, a wrong DOCKER_HOST) must not hold a command
# for the 300 s its operations may take.
CONNECT_TIMEOUT = 10
OPERATION_TIMEOUT = 300  # an image pull, push or export of many GB goes quiet for minutes between answers


class EngineUnreachable(UserError):
    """No Docker engine answers: a failure of the environment (exit 1), not of the input."""

    exit_code = 1


def connect(base_url: str | None = None) -> docker.DockerClient:
    """The engine through the SDK (the one at `base_url`, else the environment's), or one clear message on
    how to get one, within CONNECT_TIMEOUT seconds."""
    host = base_url or os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        probe = _client(base_url, CONNECT_TIMEOUT)
        try:
            probe.ping()
            version = probe.api.api_version
        finally:
            probe.close()
        return _client(base_url, OPERATION_TIMEOUT, version)
    except (docker.errors.DockerException, requests.exceptions.RequestException) as error:
        cause = _root_cause(error)
        if isinstance(cause, PermissionError):
            fix = "ask for access to its socket (e.g. add your user to the docker group, then log in again)"
        else:
            fix = "start it (e.g. `sudo systemctl start docker` or `dockerd &`) or set DOCKER_HOST"
        if isinstance(cause, (requests.exceptions.Timeout, TimeoutError)):
            why = f"no answer within {CONNECT_TIMEOUT} s"
        elif isinstance(cause, OSError) and cause.strerror:
            why = cause.strerror.lower()
        else:
            why = _first_line(error)
        raise EngineUnreachable(Problem("docker engine", f"cannot reach the Docker engine at {host} ({why}); {fix}")) from None


def _client(base_url: str | None, timeout: int, version: str | None = None) -> docker.DockerClient:
    if base_url:
        return docker.DockerClient(base_url=base_url, timeout=timeout, version=version)
    return docker.from_env(timeout=timeout, version=version)


def _root_cause(error: BaseException) -> BaseException:
    """The OS-level reason behind the SDK's wrappers (DockerException from a requests error from a urllib3
    error holding a FileNotFoundError or ConnectionRefusedError), found through causes and arguments."""
    pending, seen = [error], set()
    while pending:
        current = pending.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, (requests.exceptions.Timeout, TimeoutError)) or (isinstance(current, OSError) and current.strerror):
            return current
        pending += [e for e in (current.__cause__, current.__context__, *current.args) if isinstance(e, BaseException)]
    return error


def native_platform(client: docker.DockerClient) -> str:
    """linux/amd64 or linux/arm64: what the engine runs without emulation."""
    version = client.version()
    arch = {"x86_64": "amd64", "aarch64": "arm64"}.get(version.get("Arch", ""), version.get("Arch", "amd64"))
    return f"{version.get('Os', 'linux')}/{arch}"


def engine_alive(client: docker.DockerClient) -> bool:
    try:
        return bool(client.ping())
    except (docker.errors.DockerException, requests.exceptions.RequestException):
        return False


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


@dataclass(frozen=True)
class ImageFacts:
    image_id: str
    size: int
    layers: tuple[str, ...]  # diff ids, base first
    history: tuple[tuple[str, int], ...]  # (created_by, size), oldest first
    labels: dict[str, str]
    # What a smoke test and a byte count depend on: the layers and the run configuration (environment, user,
    # entrypoint, labels), without the build's date and revision. Every build stamps a new date, so the image
    # id of an unchanged rebuild is new; its content id is the one its test was recorded under.
    content_id: str


def image_facts(client: docker.DockerClient, reference: str) -> ImageFacts:
    image = client.images.get(reference)
    history = client.api.history(image.id)
    config = dict(image.attrs.get("Config") or {})
    labels = dict(config.get("Labels") or {})
    layers = tuple(image.attrs.get("RootFS", {}).get("Layers", []))
    unstamped = {**config, "Labels": {k: v for k, v in labels.items() if k not in STAMP_LABELS}}
    content = json.dumps({"layers": layers, "config": unstamped, "platform": [image.attrs.get("Os"), image.attrs.get("Architecture")]}, sort_keys=True)
    return ImageFacts(
        image_id=image.id,
        size=int(image.attrs.get("Size", 0)),
        layers=layers,
        history=tuple((entry.get("CreatedBy", ""), int(entry.get("Size", 0))) for entry in reversed(history)),
        labels=labels,
        content_id="sha256:" + hashlib.sha256(content.encode()).hexdigest(),
    )


def loaded_image(client: docker.DockerClient, *candidates: str) -> str:
    """The engine's id of a freshly loaded build result: its manifest digest on the containerd image store,
    its config digest on the classic one (BuildKit's metadata names both)."""
    for candidate in candidates:
        if not candidate:
            continue
        try:
            image_id: str = client.images.get(candidate).id
            return image_id
        except docker.errors.ImageNotFound:
            continue
    raise UserError(
        Problem("docker engine", f"the built image ({', '.join(c for c in candidates if c)}) is not in the engine: the builder did not load it here")
    )


def image_labels(client: docker.DockerClient, reference: str) -> dict[str, str] | None:
    """An image's labels, or None when the engine does not hold it."""
    try:
        return dict(client.images.get(reference).labels or {})
    except docker.errors.ImageNotFound:
        return None


def engine_facts(client: docker.DockerClient) -> EngineFacts | None:
    """What the engine says it is: Docker or podman (its docker-compatible API names a "Podman Engine"
    component), its version, whether it runs rootless, its runtimes (nvidia where the NVIDIA toolkit set one
    up) and, on Docker, the CDI spec directories it reads (none while its CDI is off)."""
    try:
        version, info = client.version(), client.info()
    except (docker.errors.APIError, requests.exceptions.RequestException):
        return None
    podman = any("podman" in str(component.get("Name", "")).lower() for component in version.get("Components") or ())
    dirs = info.get("CDISpecDirs")
    return EngineFacts(
        kind="podman" if podman else "docker",
        version=printable(str(version.get("Version", "")), 40),  # printed in findings: one short line whatever it says
        rootless=any("rootless" in str(option) for option in info.get("SecurityOptions") or ()),
        runtimes=tuple(info.get("Runtimes") or {}),
        cdi_spec_dirs=tuple(str(d) for d in dirs) if isinstance(dirs, list) else None,
    )


def tag_image(client: docker.DockerClient, image_id: str, reference: str) -> None:
    repository, _, tag = reference.rpartition(":")
    client.images.get(image_id).tag(repository, tag)


class _ChunkStream(io.RawIOBase):
    """A file object over the SDK's chunk iterator, so tarfile can read an export as a stream."""

    def __init__(self, chunks: Iterable[bytes]) -> None:
        self._chunks = iter(chunks)
        self._buffer = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: WriteableBuffer) -> int:
        with memoryview(buffer) as target:  # io hands a bytearray or a memoryview of bytes; released before io resizes it
            return self._fill(target)

    def _fill(self, target: memoryview) -> int:
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


_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"


def _normalised(name: str) -> str:
    return name.removeprefix("./").strip("/")


_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def _layer_entries(stream: IO[bytes]) -> list[tuple[str, int]]:
    """(path, bytes) of every entry of one layer tar (plain, gzip or zstd: the containerd store saves layers as
    they were pushed), whiteouts as (path, -1) and opaque dirs as (dir/, -2)."""
    entries = []
    # IO[bytes] promises no readinto, which BufferedReader needs of a stream it wraps (tarfile's member files have peek)
    buffered = io.BufferedReader(stream, buffer_size=1 << 20) if not hasattr(stream, "peek") else stream  # type: ignore[type-var]
    if buffered.peek(4)[:4] == _ZSTD_MAGIC:
        import zstandard  # tarfile reads gzip itself; zstd layers need the library

        buffered = zstandard.ZstdDecompressor().stream_reader(buffered)
    with tarfile.open(fileobj=buffered, mode="r|*") as layer:
        for member in layer:
            path = _normalised(member.name)
            folder, _, name = path.rpartition("/")
            if name == _OPAQUE:
                entries.append((folder + "/", -2))
            elif name.startswith(_WHITEOUT):
                entries.append((f"{folder}/{name[len(_WHITEOUT) :]}".lstrip("/"), -1))
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
            assert handle is not None  # a regular file's member has its data
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


def pull_image(client: docker.DockerClient, reference: str, username: str | None, password: str | None) -> str:
    """Pull an image (by digest, after a push-by-digest build) into the engine; returns its image id."""
    auth = {"username": username, "password": password} if username else None
    try:
        image_id: str = client.images.pull(reference, auth_config=auth).id
        return image_id
    except (docker.errors.APIError, requests.exceptions.RequestException) as error:
        raise UserError(Problem(reference, f"pull failed: {_first_line(error)}")) from None


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


def sdk_gpu_options(access: GpuAccess) -> dict[str, object]:
    """The docker SDK's container arguments for the same access `docker run` gets from GpuAccess.docker_flags()."""
    options: dict[str, object] = {"shm_size": access.shm_size}
    device_requests = []
    if access.gpu_request:
        device_requests.append(docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]]))
    if access.cdi_devices:  # what `docker run --device vendor.com/gpu=all` sends: a device request for the cdi driver
        device_requests.append(docker.types.DeviceRequest(driver="cdi", device_ids=list(access.cdi_devices)))
    if device_requests:
        options["device_requests"] = device_requests
    if access.devices:
        options["devices"] = [f"{device}:{device}:rwm" for device in access.devices]
    if access.groups:
        options["group_add"] = list(access.groups)
    if access.security_options:
        options["security_opt"] = list(access.security_options)
    return options
