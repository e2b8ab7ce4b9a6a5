"""BuildKit, driven through `docker buildx`: the builder to use, and one build.

buildkit drives BuildKit, it does not replace it: any buildx builder does the work, from the `docker`
driver of the local engine (the default: a laptop) to `docker-container`, `kubernetes` and `remote`
builders (a fleet), and the `docker` driver of another daemon reached through a docker context. docker-py
cannot drive BuildKit (docker/docker-py#2230), so builds go through the CLI and everything else through
the docker SDK (buildkit.adapters.engine.docker_sdk).

Supported: a docker CLI with the buildx plugin (Docker 23+ with docker-buildx-plugin, or Debian/Ubuntu's
docker.io with docker-buildx). Registry cache export, multi-platform builds and push with provenance need
a builder that can export them: the `docker` driver does with the containerd image store
({"features": {"containerd-snapshotter": true}} in daemon.json), the other drivers always do.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from buildkit.adapters.files.inputs import NotReadable, read_regular
from buildkit.adapters.files.outputs import open_below
from buildkit.adapters.registry.credentials import MAX_CREDENTIALS_BYTES, Credentials
from buildkit.core.release.build_cache import CacheRefs, cache_export
from buildkit.core.release.compression import exporter_options
from buildkit.core.shell import command_line
from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from buildkit.adapters.secrets import Redactor

DOCKER_ENV = "BUILDKIT_DOCKER"
_FIELD_RE = re.compile(r"^\s*(Name|Driver|Platforms|Endpoint|Status):\s*(.*)$")


@dataclass(frozen=True)
class Builder:
    """A buildx builder: its name (or the docker context whose engine builds), driver and platforms."""

    docker: str  # the docker CLI
    driver: str  # docker | docker-container | kubernetes | remote
    platforms: tuple[str, ...]
    name: str = ""  # `--builder NAME`; "" for the current builder
    context: str = ""  # `docker --context NAME`: the `docker` driver of that context's engine
    image_store: str = ""  # docker driver: "containerd" (layers kept compressed) or "classic" (kept unpacked)

    def buildx(self, *arguments: str) -> list[str]:
        context = ["--context", self.context] if self.context else []
        builder = ["--builder", self.name] if self.name else []
        return [self.docker, *context, "buildx", arguments[0], *builder, *arguments[1:]]

    @property
    def loads_into_engine(self) -> bool:
        """Whether a build without --push leaves the image in an engine the SDK can reach (docker driver)."""
        return self.driver == "docker"

    @property
    def keeps_compression(self) -> bool:
        """Whether the layers of an image it builds keep the compression they were exported with: every
        image BuildKit exports, except into the classic store, which unpacks them (its pushes then gzip)."""
        return not (self.driver == "docker" and self.image_store == "classic")

    def describe(self) -> str:
        where = f"context {self.context}" if self.context else f"builder {self.name}" if self.name else "the default builder"
        return f"docker buildx ({where}, {self.driver} driver, {', '.join(self.platforms) or 'platforms unknown'})"


def _run(argv: list[str], timeout: int = 60) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


def _docker_cli(explicit: str | None) -> str:
    explicit = explicit or os.environ.get(DOCKER_ENV)
    if explicit:
        found = shutil.which(explicit)
        if not found:
            raise UserError(Problem(f"--docker / ${DOCKER_ENV}", f"{explicit!r} is not an executable docker CLI"))
        return found
    found = shutil.which("docker")
    if not found:
        raise UserError(Problem("docker", "no docker CLI on PATH: install Docker (with the buildx plugin) or set --docker"))
    return found


def _inspect(docker: str, name: str, context: str) -> tuple[str, tuple[str, ...]] | None:
    argv = [docker, *(["--context", context] if context else []), "buildx", "inspect", *([name] if name else [])]
    result = _run(argv)
    if result is None or result.returncode != 0:
        return None
    driver, platforms = "", tuple[str, ...]()
    for line in result.stdout.splitlines():
        found = _FIELD_RE.match(line)
        if found and found.group(1) == "Driver":
            driver = found.group(2).strip()
        elif found and found.group(1) == "Platforms" and found.group(2).strip():
            platforms = tuple(p.strip() for p in found.group(2).split(",") if p.strip())
    return driver, platforms


def find_builder(docker: str | None = None, builder: str | None = None) -> Builder:
    """The builder to use: --builder NAME (a buildx builder, or a docker context), else the current one."""
    cli = _docker_cli(docker)
    version = _run([cli, "buildx", "version"])
    if version is None or version.returncode != 0:
        client = _run([cli, "version", "--format", "{{.Client.Version}}"])
        shown = client.stdout.strip() if client and client.stdout.strip() else "unknown"
        raise UserError(
            Problem(
                "docker",
                f"{cli} (client {shown}) has no buildx plugin, and buildkit builds with BuildKit through buildx: "
                "install it (Debian/Ubuntu: docker-buildx or docker-buildx-plugin; elsewhere: Docker's buildx release)",
            )
        )
    name, context = "", ""
    if builder:
        contexts = _run([cli, "context", "inspect", builder])
        if contexts is not None and contexts.returncode == 0:
            context = builder  # buildx lists it as a `docker` driver builder but refuses --builder for it
        else:
            name = builder
    found = _inspect(cli, name, context)
    if found is None:
        raise UserError(
            Problem("--builder", f"no buildx builder or docker context named {builder!r}; see `docker buildx ls` and `docker context ls`")
            if builder
            else Problem("docker", "`docker buildx inspect` failed: is the Docker engine running?")
        )
    driver, platforms = found
    store = _image_store(cli, context) if (driver or "docker") == "docker" else ""
    return Builder(cli, driver or "docker", platforms, name, context, store)


def _image_store(docker: str, context: str) -> str:
    """The engine's image store: containerd's snapshotters keep compressed layers; the classic graph drivers
    (overlay2) keep them unpacked."""
    result = _run([docker, *(["--context", context] if context else []), "info", "--format", "{{json .DriverStatus}}"])
    if result is None or result.returncode != 0:
        return ""
    return "containerd" if "io.containerd.snapshotter" in result.stdout else "classic"


def engine_host(builder: Builder) -> str | None:
    """The engine a docker-context builder loads images into (its endpoint), or None for the default one."""
    if not builder.context:
        return None
    result = _run([builder.docker, "context", "inspect", builder.context])
    try:
        return json.loads(result.stdout)[0]["Endpoints"]["docker"]["Host"] if result and result.returncode == 0 else None
    except (ValueError, LookupError, TypeError):
        return None


@dataclass(frozen=True)
class BuildRequest:
    dockerfile: Path
    context: Path  # the build context: the Dockerfile's folder, or a checkout a source build compiles
    build_args: dict[str, str]
    labels: dict[str, str]
    secrets: dict[str, Path] = field(default_factory=dict)  # BuildKit secret id -> file
    network: str | None = None
    no_cache: bool = False
    stage: str = ""  # build only up to this named stage (the twins' shared prefix)
    platforms: tuple[str, ...] = ()
    push_to: str = ""  # push by digest (untagged) to this repository instead of loading into the engine
    provenance: bool = False  # attach BuildKit's SLSA provenance (mode=max); needs push
    cache: CacheRefs = CacheRefs()
    named_contexts: dict[str, Path] = field(default_factory=dict)  # --build-context NAME=PATH
    compression: str = ""  # zstd | gzip: how the exported layers are compressed ("": the exporter's default)
    into_engine: bool = False  # the docker driver on the containerd store: the image exporter writes to its store


@dataclass
class BuildOutcome:
    returncode: int
    image_id: str = ""  # the config digest (what the engine's image store knows) when loaded
    digest: str = ""  # the manifest (or index) digest, pushed or loaded
    cancelled: bool = False


def _output(request: BuildRequest) -> list[str]:
    """Where the image goes: pushed by digest, into the engine's store, or loaded as a tarball."""
    compression = exporter_options(request.compression)
    if request.push_to:
        return ["--output", ",".join([f"type=image,name={request.push_to},push-by-digest=true,name-canonical=true,push=true", *compression])]
    if request.stage:
        return []  # the shared prefix stays in the build cache
    if compression and request.into_engine:
        return ["--output", ",".join(["type=image", *compression])]
    if compression:
        return ["--output", ",".join(["type=docker", *compression])]
    return ["--load"]


def build_arguments(request: BuildRequest, metadata: Path) -> list[str]:
    arguments = ["--progress", "plain", "--file", str(request.dockerfile), "--metadata-file", str(metadata)]
    if request.stage:
        arguments += ["--target", request.stage]
    arguments += _output(request)
    arguments.append("--provenance=mode=max" if request.provenance and request.push_to else "--provenance=false")
    for platform in request.platforms:
        arguments += ["--platform", platform]
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
    for name, path in request.named_contexts.items():
        arguments += ["--build-context", f"{name}={path}"]
    for source in request.cache.sources:
        arguments += ["--cache-from", f"type=registry,ref={source}"]
    if request.cache.target:
        arguments += ["--cache-to", cache_export(request.cache.target, request.compression)]
    return [*arguments, str(request.context)]


def run_build(
    builder: Builder,
    request: BuildRequest,
    log: Path,
    on_line: Callable[[str], None],
    redact: Redactor,
    cancel: threading.Event,
    environment: dict[str, str] | None = None,
    within: Path | None = None,
) -> BuildOutcome:
    """One build; every output line goes (redacted) to the log file and to on_line. The log is reached from
    `within` (the run's --out, default its own folder) without following a symlink planted on the way."""
    metadata = request.dockerfile.parent / f".metadata-{os.getpid()}-{threading.get_ident()}.json"
    metadata.unlink(missing_ok=True)
    argv = builder.buildx("build", *build_arguments(request, metadata))
    root = within or log.parent
    descriptor = open_below(root, log.relative_to(root).as_posix(), append=bool(request.stage), option="--out")
    with open(descriptor, "w", encoding="utf-8", buffering=1) as handle:  # line-buffered: users tail it
        handle.write(redact("$ " + command_line(*argv)) + "\n")
        process = subprocess.Popen(
            argv,
            env=environment or dict(os.environ),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,  # Ctrl-C reaches us, and we stop the build's whole group
        )
        watcher = threading.Thread(target=_stop_on_cancel, args=(process, cancel), daemon=True)
        watcher.start()
        assert process.stdout is not None
        for raw in process.stdout:
            line = redact(raw.rstrip("\n"))
            handle.write(line + "\n")
            on_line(line)
        returncode = process.wait()
    outcome = BuildOutcome(returncode, cancelled=cancel.is_set())
    if returncode == 0 and metadata.exists():
        document = json.loads(metadata.read_text() or "{}")
        outcome.image_id = document.get("containerimage.config.digest", "")
        outcome.digest = document.get("containerimage.digest", "")
    metadata.unlink(missing_ok=True)
    return outcome


_STEP_OUTPUT_RE = re.compile(r"^(?:#\d+ )?\d+(?:\.\d+)? (.*)$")
_STEP_FAILED_RE = re.compile(r"^#(\d+) ERROR: ")


def failure_summary(lines: list[str]) -> str:
    """The last line the failing step printed: its own output line just before BuildKit's `#N ERROR:` for it,
    else the output tail BuildKit repeats between two `------` rulers (`> [stage n/m] RUN ...:` first), so a
    report can say why, not just that, it failed."""
    for index, line in enumerate(lines):
        failed = _STEP_FAILED_RE.match(line)
        if failed:
            own = re.compile(rf"^#{failed.group(1)} \d+(?:\.\d+)? (.*)$")
            output = [found.group(1) for found in map(own.match, lines[:index]) if found and found.group(1).strip()]
            if output:
                return output[-1][:300]
    # a block opens with a ruler and the step's `> [...]` line and ends at the next ruler; steps that ran side by
    # side and were cancelled leave empty blocks around the one that failed
    for start, line in enumerate(lines[:-1]):
        if line.strip() != "------" or not lines[start + 1].lstrip().startswith(">"):
            continue
        end = next((index for index in range(start + 1, len(lines)) if lines[index].strip() == "------"), len(lines))
        block = [line for line in lines[start + 1 : end] if line.strip() and not line.lstrip().startswith(">")]
        if block:
            found = _STEP_OUTPUT_RE.match(block[-1].strip())
            return (found.group(1) if found else block[-1].strip())[:300]
    errors = [line for line in lines if line.startswith("ERROR:")]
    return errors[-1][:300] if errors else ""


def _stop_on_cancel(process: subprocess.Popen[str], cancel: threading.Event) -> None:
    while process.poll() is None:
        if cancel.wait(0.2):
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            return


@contextmanager
def registry_login(registry: str, credentials: Credentials | None) -> Iterator[dict[str, str]]:
    """An environment whose docker config holds credentials for `registry` (buildx reads pushes' and
    caches' credentials from there), in a private folder removed afterwards; the user's own builders,
    contexts and plugins stay visible. Without credentials, the environment is the process's own."""
    if credentials is None:
        yield dict(os.environ)
        return
    home = Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker"))
    folder = Path(tempfile.mkdtemp(prefix="buildkit-docker-config-"))
    try:
        os.chmod(folder, 0o700)
        config: dict[str, Any] = {}  # the user's docker config.json, JSON
        with suppress(NotReadable, ValueError, RecursionError):  # no usable config of the user's: the credentials alone
            config = json.loads(read_regular(home / "config.json", MAX_CREDENTIALS_BYTES))
        config = {key: value for key, value in config.items() if key in ("currentContext", "auths")}
        config["auths"] = {**(config.get("auths") or {}), registry: {"auth": credentials.docker_auth}}
        with open(os.open(folder / "config.json", os.O_WRONLY | os.O_CREAT, 0o600), "w") as handle:
            json.dump(config, handle)
        for shared in ("buildx", "contexts", "cli-plugins"):
            if (home / shared).exists():
                (folder / shared).symlink_to(home / shared)
        yield {**os.environ, "DOCKER_CONFIG": str(folder)}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
