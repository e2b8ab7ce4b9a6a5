"""`buildkit build`: build every selected target on BuildKit, tag it, and report.

Targets build in parallel (bounded by -j); each writes its own log. A failure does not stop the others
unless fail_fast; Ctrl-C stops the running builds and the report still lists what finished.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import docker

from buildkit.adapters import engine
from buildkit.core.plan import provenance_labels
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


@dataclass
class TargetResult:
    id: str
    vendor: str
    pair: str | None
    tags: list[str]
    status: str = "pending"  # built | failed | cancelled | not-started
    image_id: str | None = None
    size: int | None = None
    seconds: float | None = None
    log: str = ""
    error: str = ""
    log_tail: list[str] = field(default_factory=list)
    filesystem_bytes: int | None = None
    layers: list[str] = field(default_factory=list)
    history: list[tuple[str, int]] = field(default_factory=list)

    @property
    def efficiency(self) -> float | None:
        """Image size over the bytes its final filesystem holds: 1.0 means no layer carries dead weight."""
        if not self.size or not self.filesystem_bytes:
            return None
        return self.size / self.filesystem_bytes


@dataclass(frozen=True)
class PairResult:
    pair: str
    members: tuple[str, ...]
    shared_layers: int
    shared_bytes: int


@dataclass
class BuildRun:
    results: list[TargetResult]
    pairs: list[PairResult]
    interrupted: bool = False
    engine_lost: bool = False

    @property
    def failed(self) -> bool:
        return self.interrupted or any(r.status != "built" for r in self.results)


class Display:
    """What the terminal shows while building; the CLI supplies a rich or a plain one."""

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


def pair_results(results: list[TargetResult]) -> list[PairResult]:
    """Layers the twins of each built pair share (digests), and their bytes (from the shared history)."""
    groups: dict[str, list[TargetResult]] = {}
    for result in results:
        if result.pair and result.status == "built":
            groups.setdefault(result.pair, []).append(result)
    pairs = []
    for key, members in sorted(groups.items()):
        if len(members) != 2:
            continue
        first, second = members
        shared_history = _common_prefix(tuple(first.history), tuple(second.history))
        pairs.append(PairResult(
            pair=key,
            members=(first.id, second.id),
            shared_layers=_common_prefix(tuple(first.layers), tuple(second.layers)),
            shared_bytes=sum(size for _, size in first.history[:shared_history]),
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
    ):
        self.client = client
        self.cli = cli
        self.options = options
        self.secrets = secrets
        self.redact = redact
        self.display = display
        self.cancel = threading.Event()
        self.engine_lost = False

    def _context(self, item: Rendered) -> Path:
        folder = self.options.out / "contexts" / item.target.id
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "Dockerfile").write_text(item.dockerfile, encoding="utf-8")
        return folder

    def build_one(self, item: Rendered, on_built: Callable[[TargetResult], None] | None = None) -> TargetResult:
        target = item.target
        log = self.options.out / "logs" / f"{target.id}.log"
        result = TargetResult(target.id, target.vendor, target.pair, list(target.tags), log=str(log))
        if self.cancel.is_set():
            result.status = "not-started"
            return result
        self.display.started(target.id)
        started = time.monotonic()
        request = engine.BuildRequest(
            context=self._context(item),
            build_args=dict(item.build_args),
            labels={**item.labels, **provenance_labels(self.options.created, self.options.revision)},
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
            for reference in target.tags:
                engine.tag_image(self.client, facts.image_id, reference)
            if self.options.efficiency:
                result.filesystem_bytes = engine.filesystem_bytes(self.client, facts.image_id)
            result.status = "built"
        elif outcome.cancelled:
            result.status = "cancelled"
            result.error = "stopped before it finished (interrupted or --fail-fast)"
        else:
            result.status = "failed"
            if not engine.engine_alive(self.client):
                self.engine_lost = True
                result.error = "the Docker engine stopped during the build; restart it and run the build again"
            else:
                result.error = f"docker build exited with {outcome.returncode}; see the log"
        result.log_tail = _tail(log) if result.status != "built" else []
        self.display.finished(result)
        return result

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
                    if result.status == "failed" and (self.options.fail_fast or self.engine_lost):
                        self.cancel.set()
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
                        item.target.id, item.target.vendor, item.target.pair, list(item.target.tags), status="not-started",
                    )
        ordered = [results[item.target.id] for item in rendered]
        return BuildRun(ordered, pair_results(ordered), interrupted=interrupted, engine_lost=self.engine_lost)
