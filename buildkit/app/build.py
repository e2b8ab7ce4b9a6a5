"""`buildkit build`: build every selected target on BuildKit, tag it, and report.

Targets build in parallel (bounded by -j); each writes its own log. A failure does not stop the others
unless fail_fast; Ctrl-C stops the running builds and the report still lists what finished.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from enum import Enum
from functools import cached_property
from typing import TYPE_CHECKING, TypedDict

from buildkit.adapters.build_stamp import created_now, matrix_revision
from buildkit.adapters.engine import buildx, docker_sdk
from buildkit.adapters.engine.proven import ProvenImages
from buildkit.adapters.files.outputs import write_below
from buildkit.adapters.host import read_host
from buildkit.adapters.secrets import IndexSettings, Redactor, build_secrets
from buildkit.app.smoke import DEFAULT_TIMEOUT, smoke_test
from buildkit.app.targets import Choices, select_targets
from buildkit.core.install_plan import layer_name
from buildkit.core.labels import build_stamp_labels
from buildkit.core.release import decisions
from buildkit.core.release.build_cache import CacheRefs, prefix_cache, target_cache
from buildkit.core.release.decisions import Outcome
from buildkit.core.release.layer_sharing import OS, BuiltLayer, LayerKeys, NodeCost, node_costs
from buildkit.core.release.parity import Parity, compare
from buildkit.core.render.planned import SHARED_STAGE, SUPPORT_CONTEXT, SUPPORT_DIR, Rendered

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    import docker
    from typing_extensions import Unpack  # typing.Unpack from Python 3.11

    from buildkit.adapters.registry.credentials import Credentials
    from buildkit.core.compat.facts import Compat
    from buildkit.core.host.facts import HostFacts
    from buildkit.core.release.judge import Verdict
    from buildkit.core.targets.plan import Note

__all__ = [
    "LOG_TAIL_LINES",
    "BuildOptions",
    "BuildPreview",
    "BuildRun",
    "BuildRunner",
    "BuildStatus",
    "Display",
    "IndexSettings",
    "PairResult",
    "PlannedBuild",
    "TargetResult",
    "build_selection",
    "build_targets",
    "pair_results",
    "preview_build",
]

LOG_TAIL_LINES = 25


@dataclass(frozen=True)
class BuildOptions:
    """Everything a build run needs, resolved once from the command line."""

    out: Path
    jobs: int = 1
    no_cache: bool = False
    fail_fast: bool = False
    network: str | None = None
    efficiency: bool = False  # --efficiency: reading a 6 GB image back costs a minute, so it is asked for
    created: str = ""
    revision: str = ""
    gpu: str = "auto"  # smoke-test kernels: auto | require | skip
    smoke_timeout: int = DEFAULT_TIMEOUT
    source_context: Path | None = None  # --pytorch-src: the build context of source-flavor targets
    builder: str | None = None  # --builder: a buildx builder or a docker context; None for the current builder
    registry_cache: bool = False  # read and write the registry build cache (publish turns it on)
    provenance: bool = False  # attach BuildKit's SLSA provenance (mode=max) to what is pushed
    push: bool = False  # publishing: a builder outside the engine pushes by digest instead of loading back
    retest: bool = False  # prove an image again even when this machine proved the same image id before


class BuildStatus(str, Enum):
    PENDING = "pending"
    BUILT = "built"  # built and passed its smoke test
    FAILED = "failed"
    CANCELLED = "cancelled"  # stopped while building (interrupt, --fail-fast, engine lost)
    NOT_STARTED = "not-started"


@dataclass
class TargetResult:
    id: str
    vendor: str
    pair: str | None
    tags: list[str]  # what the image is tagged with once built: the immutable tag, and a twin's floating tags
    status: BuildStatus = BuildStatus.PENDING
    image_id: str | None = None
    size: int | None = None
    seconds: float | None = None
    log: str = ""
    error: str = ""
    log_tail: list[str] = field(default_factory=list)
    layer_bytes: int | None = None  # bytes of files in all its layers, uncompressed
    filesystem_bytes: int | None = None  # bytes of files in its final filesystem
    layers: list[str] = field(default_factory=list)
    history: list[tuple[str, int]] = field(default_factory=list)
    smoke: Verdict | None = None  # the first platform's (the native one's, when it is built)
    platform_smoke: dict[str, Verdict] = field(default_factory=dict)
    digest: str = ""  # the manifest (or index) digest BuildKit produced
    pushed: bool = False  # the builder pushed it (by digest, untagged): publish tags it in the registry
    compression: str = ""  # how its layers are stored and pushed: zstd, gzip

    @property
    def layer_sizes(self) -> list[tuple[str, int]]:
        """(what it holds, uncompressed bytes) of each layer with content, in order."""
        return [(layer_name(step), size) for step, size in self.history if size]

    @property
    def built_layers(self) -> list[BuiltLayer]:
        """Its layers from the bottom with their sizes and names: each history entry with content is one layer
        of its RootFS, in order ([] where the engine's history does not line up with its layers)."""
        sizes = self.layer_sizes
        if len(sizes) != len(self.layers):
            return []
        return [BuiltLayer(digest, size, name) for digest, (name, size) in zip(self.layers, sizes)]

    @property
    def efficiency(self) -> float | None:
        """Bytes in the image's layers over the bytes its final filesystem holds: 1.0 means no layer carries
        files that a later layer deletes or replaces."""
        if not self.layer_bytes or not self.filesystem_bytes:
            return None
        return self.layer_bytes / self.filesystem_bytes


@dataclass(frozen=True)
class PairResult:
    pair: str
    members: tuple[str, ...]
    shared_layers: int
    shared_bytes: int
    parity: Parity | None = None


@dataclass
class BuildRun:
    results: list[TargetResult]
    pairs: list[PairResult]
    # per built image: what a node holding another image of the run pays to add it (core/release/layer_sharing.py)
    shares: dict[str, list[NodeCost]] = field(default_factory=dict)
    interrupted: bool = False
    engine_lost: bool = False
    engine_host: str | None = None  # the engine the images are in (a docker-context builder's), None: the default
    host: HostFacts | None = None  # the GPUs the smoke tests ran with (read once a run; publish's attestations say it)

    @property
    def failed(self) -> bool:
        return (
            self.interrupted
            or any(r.status is not BuildStatus.BUILT for r in self.results)
            or any(p.parity is not None and not p.parity.passed for p in self.pairs)
        )


class Display:
    """What the terminal shows while building; the CLI supplies a rich or a plain one."""

    def begin(self, engine_description: str, count: int, jobs: int) -> None: ...
    def started(self, target_id: str) -> None: ...
    def line(self, target_id: str, text: str) -> None: ...
    def finished(self, result: TargetResult) -> None: ...

    def step(self, target_id: str, text: str) -> None:
        """A wait of its own outside BuildKit's log (pulling a 20 GB image, its smoke test, reading its layers,
        pushing it): said as it starts, so a long one is never silence."""


def _tail(log: Path, lines: int | None = LOG_TAIL_LINES) -> list[str]:
    """The log's last `lines` lines (None: all of them)."""
    try:
        return log.read_text(encoding="utf-8", errors="replace").splitlines()[-lines if lines else 0 :]
    except OSError:
        return []


def _shared_layers(first: TargetResult, second: TargetResult) -> tuple[int, int]:
    """The layers with content both images hold, wherever they lie in each (an image assembled on its base holds
    the OS layer above its own libraries), and their bytes: a registry stores them once, a node fetches them once."""
    held = {layer.digest for layer in second.built_layers}
    shared = {layer.digest: layer.size for layer in first.built_layers if layer.digest in held}  # a blob once, however often copied in
    return len(shared), sum(shared.values())


def pair_results(results: list[TargetResult], vendor_packages: tuple[str, ...] = ()) -> list[PairResult]:
    """Per built pair: the layers the twins share (by digest) and their bytes, and whether the twins hold the same
    packages (from their smoke-test probes)."""
    groups: dict[str, list[TargetResult]] = {}
    for result in results:
        if result.pair and result.status is BuildStatus.BUILT:
            groups.setdefault(result.pair, []).append(result)
    pairs = []
    for key, members in sorted(groups.items()):
        if len(members) != 2:
            continue
        first, second = members
        parity = None
        if first.smoke and second.smoke and first.smoke.report and second.smoke.report:
            parity = compare(first.id, first.smoke.report, second.id, second.smoke.report, vendor_packages)
        layers, size = _shared_layers(first, second)
        pairs.append(PairResult(pair=key, members=(first.id, second.id), shared_layers=layers, shared_bytes=size, parity=parity))
    return pairs


class _RequestChanges(TypedDict, total=False):
    """What a build of the shared stage, or a push by digest, changes in a target's BuildRequest."""

    stage: str
    cache: CacheRefs
    provenance: bool
    push_to: str


class BuildRunner:
    """Builds the selected targets on one buildx builder: each pair's shared prefix first (so twins share
    its layers even on an empty cache and in parallel), then the targets, -j at a time."""

    def __init__(
        self,
        client: docker.DockerClient,
        builder: buildx.Builder,
        options: BuildOptions,
        secrets: dict[str, Path],
        redact: Redactor,
        display: Display,
        host: HostFacts,
        vendor_packages: tuple[str, ...] = (),
        environment: dict[str, str] | None = None,
        credentials: Credentials | None = None,
    ) -> None:
        self.client = client
        self.builder = builder
        self.options = options
        self.secrets = secrets
        self.redact = redact
        self.display = display
        self.host = host
        self.vendor_packages = vendor_packages
        self.environment = environment
        self.credentials = credentials  # the registry's, for pulling what the builder pushed by digest
        self.cancel = threading.Event()
        self.proven = ProvenImages()  # images this machine proved before (their probe reports, their bytes)
        self.engine_lost = False

    @cached_property
    def native_platform(self) -> str:
        """The engine's own platform (asked once a run): where kernels can run and bytes be measured."""
        return docker_sdk.native_platform(self.client)

    def _dockerfile(self, item: Rendered) -> Path:
        """The target's build context: its Dockerfile and the support scripts its RUN steps mount."""
        folder = f"contexts/{item.target.id}"
        write_below(self.options.out, f"{folder}/Dockerfile", item.dockerfile.encode("utf-8"), "--out")
        for name, data in item.support.items():
            write_below(self.options.out, f"{folder}/{SUPPORT_DIR}/{name}", data, "--out")
        return self.options.out / folder / "Dockerfile"

    def _request(self, item: Rendered, **changes: Unpack[_RequestChanges]) -> buildx.BuildRequest:
        target = item.target
        dockerfile = self._dockerfile(item)
        request = buildx.BuildRequest(
            dockerfile=dockerfile,
            # a source build of a local checkout sends it as the context; everything else needs none
            context=self.options.source_context if target.source_checkout and self.options.source_context else dockerfile.parent,
            named_contexts={SUPPORT_CONTEXT: dockerfile.parent / SUPPORT_DIR} if target.source_checkout else {},
            build_args=dict(item.build_args),
            labels={**item.labels, **build_stamp_labels(self.options.created, self.options.revision)},
            secrets=self.secrets,
            network=self.options.network,
            no_cache=self.options.no_cache,
            platforms=target.platforms,
            provenance=self.options.provenance,
            cache=target_cache(target) if self.options.registry_cache else CacheRefs(),
            # the classic store unpacks layers on load (its pushes gzip them): compression is for the others
            compression=target.compression if self.builder.keeps_compression else "",
            into_engine=self.builder.driver == "docker" and self.builder.image_store == "containerd",
        )
        return replace(request, **changes)

    def build_prefix(self, item: Rendered) -> None:
        """The shared stage of the targets that have it in common (a pair's twins, a stack's family images), once,
        before any of them: built side by side, each would make its own OS layers, and images that could share
        them would not. A failure here shows again in each target's own build."""
        if self.cancel.is_set():
            return
        target = item.target
        name = target.pair or target.id
        log = self.options.out / "logs" / f"{name}-shared.log"
        log.unlink(missing_ok=True)
        cache = prefix_cache(target) if self.options.registry_cache and target.pair else CacheRefs()
        buildx.run_build(
            self.builder,
            self._request(item, stage=SHARED_STAGE, cache=cache, provenance=False),
            log,
            lambda line: self.display.line(f"{name} (shared)", line),
            self.redact,
            self.cancel,
            self.environment,
            within=self.options.out,
        )

    def build_one(self, item: Rendered) -> TargetResult:
        target = item.target
        log = self.options.out / "logs" / f"{target.id}.log"
        result = TargetResult(
            target.id,
            target.vendor,
            target.pair,
            [target.tags[0]],
            log=str(log),
            compression=target.compression if self.builder.keeps_compression else "gzip (the classic image store's push)",
        )
        if self.cancel.is_set():
            result.status = BuildStatus.NOT_STARTED
            return result
        self.display.started(target.id)
        started = time.monotonic()
        push_to = target.image_name if self.options.push and not self.builder.loads_into_engine else ""
        outcome = buildx.run_build(
            self.builder,
            self._request(item, push_to=push_to),
            log,
            lambda line: self.display.line(target.id, line),
            self.redact,
            self.cancel,
            self.environment,
            within=self.options.out,
        )
        result.seconds = round(time.monotonic() - started, 2)
        if outcome.returncode == 0 and outcome.digest:
            result.digest = outcome.digest
            result.pushed = bool(push_to)
            if push_to:  # built and pushed elsewhere: the smoke test runs the pushed digest here
                self.display.step(target.id, f"pulling {target.image_name}@{outcome.digest} into the engine for its smoke test")
                credentials = self.credentials
                image = docker_sdk.pull_image(
                    self.client,
                    f"{target.image_name}@{outcome.digest}",
                    credentials.username if credentials else None,
                    credentials.password if credentials else None,
                )
            else:
                image = docker_sdk.loaded_image(self.client, outcome.digest, outcome.image_id)
            self._test_and_tag(item, image, result)
        elif outcome.cancelled:
            result.status = BuildStatus.CANCELLED
            result.error = "stopped before it finished (interrupted or --fail-fast)"
        else:
            result.status = BuildStatus.FAILED
            if not docker_sdk.engine_alive(self.client):
                self.engine_lost = True
                result.error = "the Docker engine stopped during the build; restart it and run the build again"
            else:
                # the whole log: steps that ran side by side and were cancelled fill its last lines
                why = buildx.failure_summary(_tail(log, None))
                result.error = f"the build failed: {why}" if why else f"the build exited with {outcome.returncode}; see the log"
        result.log_tail = _tail(log) if result.status is not BuildStatus.BUILT else []
        if result.status is BuildStatus.FAILED and (self.options.fail_fast or self.engine_lost):
            self.cancel.set()  # here, not in the collecting loop: the next queued build must not start
        self.display.finished(result)
        return result

    def _test_and_tag(self, item: Rendered, image: str, result: TargetResult) -> None:
        """Smoke-test every platform of the image (the native one with GPU kernels where the host has the
        vendor's GPU, others under emulation without); tag it only when all pass: a failed image is never
        tagged, so it can never be published."""
        target = item.target
        facts = docker_sdk.image_facts(self.client, image)
        result.image_id, result.size = facts.image_id, facts.size
        result.layers, result.history = list(facts.layers), list(facts.history)
        native = self.native_platform
        verdicts = []
        for platform in target.platforms:
            self.display.step(target.id, f"smoke test ({platform})")
            verdict = smoke_test(
                self.client,
                facts.image_id,
                self.options.gpu if platform == native else "skip",
                self.host,
                self.options.smoke_timeout,
                platform=platform,
                proven=None if self.options.retest else self.proven,
            )
            if verdict.reused:
                self.display.step(
                    target.id,
                    f"smoke test ({platform}): the same image passed before here; its report is judged again (--retest runs the probe)"
                    if verdict.passed
                    else f"smoke test ({platform}): the same image failed before here (--retest runs the probe again)",
                )
            verdicts.append(verdict)
        result.smoke = verdicts[0]
        result.platform_smoke = dict(zip(target.platforms, verdicts))
        failed = [f"{platform}: " + "; ".join(v.failures) for platform, v in zip(target.platforms, verdicts) if not v.passed]
        if failed:
            result.status = BuildStatus.FAILED
            result.error = "smoke test failed: " + " | ".join(failed) if len(verdicts) > 1 else "smoke test failed: " + "; ".join(verdicts[0].failures)
        else:
            docker_sdk.tag_image(self.client, facts.image_id, target.tags[0])  # a twin's floating tags wait for its pair
            result.status = BuildStatus.BUILT
        if self.options.efficiency and target.platforms == (native,):
            key = ProvenImages.bytes_key(facts.content_id)
            recorded = None if self.options.retest else self.proven.get(key)
            if recorded is None:
                self.display.step(target.id, "reading its layers and filesystem (docker save) for its efficiency")
                measured = docker_sdk.image_bytes(self.client, facts.image_id)
                self.proven.put(key, {"layers": measured.layers, "filesystem": measured.filesystem})
            else:
                measured = docker_sdk.ImageBytes(recorded["layers"], recorded["filesystem"])
            result.layer_bytes, result.filesystem_bytes = measured.layers, measured.filesystem
            if measured.layers < measured.filesystem:  # impossible: a measurement bug, never a figure to report
                raise RuntimeError(f"{target.id}: the image's layers hold fewer bytes ({measured.layers}) than its filesystem ({measured.filesystem})")

    def _tag_pairs(self, rendered: tuple[Rendered, ...], results: list[TargetResult]) -> None:
        """A pair's floating tags go on its twins only when both were built and passed here."""
        outcomes = {r.id: Outcome.PUBLISHED if r.status is BuildStatus.BUILT else Outcome.FAILED for r in results}
        plan = decisions.tag_moves([item.target for item in rendered], outcomes, gpu_tested=None)
        by_id = {r.id: r for r in results}
        images = {item.target.id: item.target.image_name for item in rendered}
        for move in plan.moves:
            reference = f"{images[move.target]}:{move.tag}"
            image_id = by_id[move.target].image_id
            assert image_id is not None  # a floating tag moves only to an image built here
            docker_sdk.tag_image(self.client, image_id, reference)
            by_id[move.target].tags.append(reference)

    def _in_parallel(self, function: Callable[[Rendered], TargetResult | None], items: list[Rendered]) -> tuple[dict[str, TargetResult], bool]:
        """Run `function` over `items`, -j at a time; Ctrl-C stops what runs and what waits."""
        results: dict[str, TargetResult] = {}
        interrupted = False
        pool = ThreadPoolExecutor(max_workers=max(1, self.options.jobs), thread_name_prefix="build")
        futures: dict[Future[TargetResult | None], Rendered] = {pool.submit(function, item): item for item in items}
        try:
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                for future in done:
                    if (result := future.result()) is not None:
                        results[result.id] = result
        except KeyboardInterrupt:
            interrupted = True
            self.cancel.set()
            for future in futures:
                future.cancel()
        finally:
            pool.shutdown(wait=True)
        for future in futures:
            if future.done() and not future.cancelled() and (result := future.result()) is not None:
                results.setdefault(result.id, result)
        return results, interrupted

    def run(self, rendered: tuple[Rendered, ...]) -> BuildRun:
        # one shared stage per group of targets whose OS layers are the same (core/release/layer_sharing.py's `os` key)
        keys = LayerKeys()
        groups: dict[str, list[Rendered]] = {}
        for item in rendered:
            groups.setdefault(next(layer.key for layer in keys.of(item) if layer.name == OS), []).append(item)
        prefixes = [items[0] for items in groups.values() if len(items) > 1 or items[0].target.pair]
        _, interrupted = self._in_parallel(self.build_prefix, prefixes)
        results: dict[str, TargetResult] = {}
        if not interrupted:
            results, interrupted = self._in_parallel(self.build_one, list(rendered))
        ordered = [
            results.get(item.target.id)
            or TargetResult(item.target.id, item.target.vendor, item.target.pair, [item.target.tags[0]], status=BuildStatus.NOT_STARTED)
            for item in rendered
        ]
        self._tag_pairs(rendered, ordered)
        shares = node_costs({r.id: r.built_layers for r in ordered if r.status is BuildStatus.BUILT and r.built_layers})
        return BuildRun(ordered, pair_results(ordered, self.vendor_packages), shares, interrupted=interrupted, engine_lost=self.engine_lost)


@dataclass(frozen=True)
class PlannedBuild:
    """One image `build` would make, worked out offline: its Dockerfile is rendered, nothing is asked of an
    engine or a registry (`build --dry-run`)."""

    item: Rendered
    cache: CacheRefs  # what it reads and writes in the registry cache (empty without --registry-cache)


@dataclass(frozen=True)
class BuildPreview:
    builds: tuple[PlannedBuild, ...]
    notes: tuple[Note, ...]  # the selection's (Python versions skipped, platforms left out)


def preview_build(choices: Choices, registry_cache: bool = False) -> BuildPreview:
    """What `build` with these choices would build: the same selection and Dockerfiles, no engine."""
    selection = select_targets(choices)
    builds = tuple(PlannedBuild(item, target_cache(item.target) if registry_cache else CacheRefs()) for item in selection.render())
    return BuildPreview(builds, selection.notes)


def build_selection(
    choices: Choices,
    options: BuildOptions,
    settings: IndexSettings,
    docker_cli: str | None,
    display: Display,
) -> tuple[BuildRun, str]:
    """`buildkit build`: render the selected targets, then build, test and tag them."""
    selection = select_targets(choices)
    stamped = replace(options, created=created_now(), revision=matrix_revision(choices.matrix))
    return build_targets(selection.render(), stamped, settings, docker_cli, display, selection.matrix.compat)


def build_targets(
    rendered: tuple[Rendered, ...],
    options: BuildOptions,
    settings: IndexSettings,
    docker_cli: str | None,
    display: Display,
    compat: Compat,
    credentials: Credentials | None = None,
) -> tuple[BuildRun, str]:
    """Find the builder and the engine, then build; returns the run and the builder's description.

    Secret inputs are checked first, so a bad --pip-conf fails before anything touches the engine.
    """
    with build_secrets(settings) as (secrets, redact):
        builder = buildx.find_builder(docker_cli, options.builder)
        engine_host = buildx.engine_host(builder)
        client = docker_sdk.connect(engine_host)
        display.begin(builder.describe(), len(rendered), options.jobs)
        registry = rendered[0].target.registry if rendered else ""
        with buildx.registry_login(registry, credentials) as environment:
            host = read_host(compat, engine=docker_sdk.engine_facts(client))  # the smoke test gets GPUs as `run` hands them
            runner = BuildRunner(client, builder, options, secrets, redact, display, host, compat.vendor_packages, environment, credentials)
            run = runner.run(rendered)
            run.engine_host, run.host = engine_host, host
            return run, builder.describe()
