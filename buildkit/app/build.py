"""`buildkit build`: build every selected target on BuildKit, tag it, and report.

Targets build in parallel (bounded by -j); each writes its own log. A failure does not stop the others
unless fail_fast; Ctrl-C stops the running builds and the report still lists what finished.
"""

from __future__ import annotations

import threading
import time
from enum import Enum
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import docker

from buildkit.adapters import engine
from buildkit.adapters.host import read_host
from buildkit.adapters.secrets import IndexSettings, build_secrets
from buildkit.adapters.build_stamp import created_now, source_revision
from buildkit.app.smoke import DEFAULT_TIMEOUT, smoke_test
from buildkit.app.targets import Choices, require_targets, select_targets
from buildkit.core import release
from buildkit.core.compat import Compat
from buildkit.core.host import HostFacts
from buildkit.core.judge import Verdict
from buildkit.core.labels import build_stamp_labels
from buildkit.core.parity import Parity, compare
from buildkit.core.release import Outcome
from buildkit.core.render import Rendered

LOG_TAIL_LINES = 25


@dataclass(frozen=True)
class BuildOptions:
    """Everything a build run needs, resolved once from the command line."""

    out: Path
    jobs: int = 1
    no_cache: bool = False
    fail_fast: bool = False
    network: str | None = None
    efficiency: bool = True
    created: str = ""
    revision: str = ""
    gpu: str = "auto"  # smoke-test kernels: auto | require | skip
    smoke_timeout: int = DEFAULT_TIMEOUT
    source_context: Path | None = None  # --pytorch-src: the build context of source-flavor targets


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
    smoke: Verdict | None = None

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
    interrupted: bool = False
    engine_lost: bool = False

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


def _tail(log: Path) -> list[str]:
    try:
        return log.read_text(encoding="utf-8", errors="replace").splitlines()[-LOG_TAIL_LINES:]
    except OSError:
        return []


def _common_prefix(first: tuple, second: tuple) -> int:
    count = 0
    for a, b in zip(first, second):
        if a != b:
            break
        count += 1
    return count


def pair_results(results: list[TargetResult], vendor_packages: tuple[str, ...] = ()) -> list[PairResult]:
    """Per built pair: the layers the twins share (digests), their bytes (from the shared history), and
    whether the twins hold the same packages (from their smoke-test probes)."""
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
        shared_history = _common_prefix(tuple(first.history), tuple(second.history))
        pairs.append(PairResult(
            pair=key,
            members=(first.id, second.id),
            shared_layers=_common_prefix(tuple(first.layers), tuple(second.layers)),
            shared_bytes=sum(size for _, size in first.history[:shared_history]),
            parity=parity,
        ))
    return pairs


class Builder:
    def __init__(
        self,
        client: docker.DockerClient,
        cli: engine.BuildkitCli,
        options: BuildOptions,
        secrets: dict[str, Path],
        redact: engine.Redactor,
        display: Display,
        host: HostFacts,
        vendor_packages: tuple[str, ...] = (),
    ):
        self.client = client
        self.cli = cli
        self.options = options
        self.secrets = secrets
        self.redact = redact
        self.display = display
        self.host = host
        self.vendor_packages = vendor_packages
        self.cancel = threading.Event()
        self.engine_lost = False

    def _dockerfile(self, item: Rendered) -> Path:
        folder = self.options.out / "contexts" / item.target.id
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "Dockerfile").write_text(item.dockerfile, encoding="utf-8")
        return folder / "Dockerfile"

    def build_one(self, item: Rendered, on_built: Callable[[TargetResult], None] | None = None) -> TargetResult:
        target = item.target
        log = self.options.out / "logs" / f"{target.id}.log"
        result = TargetResult(target.id, target.vendor, target.pair, [target.tags[0]], log=str(log))
        if self.cancel.is_set():
            result.status = BuildStatus.NOT_STARTED
            return result
        self.display.started(target.id)
        started = time.monotonic()
        dockerfile = self._dockerfile(item)
        request = engine.BuildRequest(
            dockerfile=dockerfile,
            # a source build of a local checkout sends it as the context; everything else needs none
            context=self.options.source_context if target.source_checkout else dockerfile.parent,
            build_args=dict(item.build_args),
            labels={**item.labels, **build_stamp_labels(self.options.created, self.options.revision)},
            secrets=self.secrets,
            network=self.options.network,
            no_cache=self.options.no_cache,
        )
        outcome = engine.run_build(
            self.cli, request, log, lambda line: self.display.line(target.id, line), self.redact, self.cancel,
        )
        result.seconds = round(time.monotonic() - started, 2)
        if outcome.image_id:
            facts = engine.image_facts(self.client, outcome.image_id)
            result.image_id, result.size = facts.image_id, facts.size
            result.layers, result.history = list(facts.layers), list(facts.history)
            # An image gets its tags only once its smoke test passed: a failed one can never be published.
            result.smoke = smoke_test(self.client, facts.image_id, self.options.gpu, self.host, self.options.smoke_timeout)
            if result.smoke.passed:
                engine.tag_image(self.client, facts.image_id, target.tags[0])  # a twin's floating tags wait for its pair
                result.status = BuildStatus.BUILT
            else:
                result.status = BuildStatus.FAILED
                result.error = "smoke test failed: " + "; ".join(result.smoke.failures)
            if self.options.efficiency:
                measured = engine.image_bytes(self.client, facts.image_id)
                result.layer_bytes, result.filesystem_bytes = measured.layers, measured.filesystem
                if measured.layers < measured.filesystem:  # impossible: a measurement bug, never a figure to report
                    raise RuntimeError(f"{target.id}: the image's layers hold fewer bytes ({measured.layers}) "
                                       f"than its filesystem ({measured.filesystem})")
        elif outcome.cancelled:
            result.status = BuildStatus.CANCELLED
            result.error = "stopped before it finished (interrupted or --fail-fast)"
        else:
            result.status = BuildStatus.FAILED
            if not engine.engine_alive(self.client):
                self.engine_lost = True
                result.error = "the Docker engine stopped during the build; restart it and run the build again"
            else:
                result.error = f"docker build exited with {outcome.returncode}; see the log"
        result.log_tail = _tail(log) if result.status is not BuildStatus.BUILT else []
        if result.status is BuildStatus.FAILED and (self.options.fail_fast or self.engine_lost):
            self.cancel.set()  # here, not in the collecting loop: the next queued build must not start
        self.display.finished(result)
        return result

    def _tag_pairs(self, rendered: tuple[Rendered, ...], results: list[TargetResult]) -> None:
        """A pair's floating tags go on its twins only when both were built and passed here."""
        outcomes = {r.id: Outcome.PUBLISHED if r.status is BuildStatus.BUILT else Outcome.FAILED for r in results}
        plan = release.tag_moves([item.target for item in rendered], outcomes, gpu_tested=None)
        by_id = {r.id: r for r in results}
        images = {item.target.id: item.target.image_name for item in rendered}
        for move in plan.moves:
            reference = f"{images[move.target]}:{move.tag}"
            engine.tag_image(self.client, by_id[move.target].image_id, reference)
            by_id[move.target].tags.append(reference)

    def run(self, rendered: tuple[Rendered, ...]) -> BuildRun:
        results: dict[str, TargetResult] = {}
        interrupted = False
        pool = ThreadPoolExecutor(max_workers=max(1, self.options.jobs), thread_name_prefix="build")
        futures: dict[Future, Rendered] = {pool.submit(self.build_one, item): item for item in rendered}
        try:
            pending = set(futures)
            while pending:
                done, pending = wait(pending, timeout=0.5, return_when=FIRST_COMPLETED)
                for future in done:
                    result = future.result()
                    results[result.id] = result
        except KeyboardInterrupt:
            interrupted = True
            self.cancel.set()
            for future in futures:
                future.cancel()
        finally:
            pool.shutdown(wait=True)
        for future, item in futures.items():
            if item.target.id not in results:
                if future.done() and not future.cancelled():
                    results[item.target.id] = future.result()
                else:
                    results[item.target.id] = TargetResult(
                        item.target.id, item.target.vendor, item.target.pair, [item.target.tags[0]], status=BuildStatus.NOT_STARTED,
                    )
        ordered = [results[item.target.id] for item in rendered]
        self._tag_pairs(rendered, ordered)
        return BuildRun(ordered, pair_results(ordered, self.vendor_packages), interrupted=interrupted, engine_lost=self.engine_lost)


def build_selection(
    choices: Choices, options: BuildOptions, settings: IndexSettings, docker_cli: str | None, display: Display,
) -> tuple[BuildRun, str]:
    """`buildkit build`: render the selected targets, then build, test and tag them."""
    selection = require_targets(select_targets(choices))
    stamped = replace(options, created=created_now(), revision=source_revision(choices.matrix.resolve().parent if choices.matrix else Path.cwd()))
    return build_targets(selection.render(), stamped, settings, docker_cli, display, selection.matrix.compat)


def build_targets(
    rendered: tuple[Rendered, ...],
    options: BuildOptions,
    settings: IndexSettings,
    docker_cli: str | None,
    display: Display,
    compat: Compat,
) -> tuple[BuildRun, str]:
    """Find BuildKit and the engine, then build; returns the run and the engine's description.

    Secret inputs are checked first, so a bad --pip-conf fails before anything touches the engine.
    """
    with build_secrets(settings) as (secrets, redact):
        cli = engine.detect_buildkit(docker_cli)
        client = engine.connect()
        display.begin(cli.describe(), len(rendered), options.jobs)
        builder = Builder(client, cli, options, secrets, redact, display, read_host(compat), compat.vendor_packages)
        return builder.run(rendered), cli.describe()
