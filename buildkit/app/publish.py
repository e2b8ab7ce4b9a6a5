"""`buildkit publish`: skip what the registry already has, build and test the rest, push, move tags.

Order matters for the guarantee: an image is pushed under its immutable tag (the engine uploads every
blob before it writes the tag), and only then do floating tags move, by PUT of the same manifest. A
pair's shared floating tags move only when both twins are good, so a crash or a failed twin never leaves
a floating tag on an image that failed or on half a pair.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from buildkit.adapters import engine
from buildkit.adapters.registry import Credentials, Registry, annotated
from buildkit.app.build import BuildOptions, Display, build_targets
from buildkit.adapters.secrets import IndexSettings
from buildkit.core import grammar
from buildkit.core.compat import Compat
from buildkit.core.plan import LABEL_PREFIX, Target
from buildkit.core.render import FINGERPRINT_LABEL, Rendered
from buildkit.errors import Problem, UserError

NIGHTLY_DATE_RE = re.compile(r"^(?P<base>.+)-nightly-(?P<date>[0-9]{8})$")


@dataclass(frozen=True)
class PublishOptions:
    nightly: bool = False
    date: str = ""  # YYYYMMDD of this nightly
    keep: int | None = None
    dry_run: bool = False
    lookups: int = 8  # registry requests in flight while deciding what changed


@dataclass
class TargetOutcome:
    id: str
    pair: str | None
    status: str  # published | skipped-unchanged | failed | would-build | unchanged (dry run)
    digest: str = ""
    size: int | None = None
    seconds: float | None = None
    tags: list[str] = field(default_factory=list)  # tags that now point at this image
    error: str = ""


@dataclass
class PublishRun:
    targets: list[TargetOutcome]
    pairs: dict[str, str]  # pair -> what happened to its floating tags
    deleted: list[str] = field(default_factory=list)
    requests: int = 0
    seconds: float = 0.0
    build_report: object | None = None

    @property
    def failed(self) -> bool:
        return any(t.status == "failed" for t in self.targets)


def floating_tags(target: Target, nightly: bool) -> list[str]:
    """Tags that move to this image: the twin aliases, and with --nightly the `-nightly` ones."""
    names = list(target.tag_names[1:])
    if nightly:
        names += [f"{name}-nightly" for name in target.tag_names]
    return names


def date_tag(target: Target, date: str) -> str:
    return f"{target.tag_names[0]}-nightly-{date}"


def unchanged(registry: Registry, item: Rendered) -> str | None:
    """The digest of the published image when it carries this target's fingerprint; else None."""
    target = item.target
    found = registry.image_labels(target.repository, target.tag_names[0])
    if found and found[1].get(FINGERPRINT_LABEL) == item.fingerprint:
        return found[0]
    return None


def prune_nightlies(registry: Registry, target: Target, keep: int) -> list[str]:
    """Delete this target's nightly date tags beyond the newest `keep`, only those this tool created."""
    base = target.tag_names[0]
    dated = sorted(
        (m.group("date"), tag) for tag in registry.list_tags(target.repository)
        if (m := NIGHTLY_DATE_RE.match(tag)) and m.group("base") == base
    )
    deleted = []
    for _, tag in dated[:-keep] if keep else dated:
        found = registry.image_labels(target.repository, tag)
        if found is None or found[1].get(f"{LABEL_PREFIX}target") != target.id:
            continue  # not an image this tool built for this target: leave it alone
        registry.delete_manifest(target.repository, found[0])
        deleted.append(f"{target.image_name}:{tag}")
    return deleted


def publish(
    rendered: tuple[Rendered, ...],
    options: PublishOptions,
    build_options: BuildOptions,
    settings: IndexSettings,
    docker_cli: str | None,
    display: Display,
    compat: Compat,
    registry: Registry,
    credentials: Credentials | None,
) -> PublishRun:
    started = time.monotonic()
    registry.ping()
    with ThreadPoolExecutor(max_workers=options.lookups) as pool:
        published = dict(zip((item.target.id for item in rendered), pool.map(lambda item: unchanged(registry, item), rendered)))
    outcomes = {
        item.target.id: TargetOutcome(item.target.id, item.target.pair, "skipped-unchanged" if published[item.target.id] else "would-build",
                                      digest=published[item.target.id] or "")
        for item in rendered
    }
    to_build = tuple(item for item in rendered if not published[item.target.id])
    if options.dry_run:
        for outcome in outcomes.values():
            outcome.status = "unchanged" if outcome.digest else "would-build"
        return PublishRun(list(outcomes.values()), {}, requests=registry.requests, seconds=time.monotonic() - started)

    build_run = None
    if to_build:
        build_run, _ = build_targets(to_build, build_options, settings, docker_cli, display, compat)
        client = engine.connect()
        for result in build_run.results:
            outcome = outcomes[result.id]
            outcome.seconds, outcome.size = result.seconds, result.size
            if result.status != "built":
                outcome.status, outcome.error = "failed", result.error or result.status
                continue
            reference = result.tags[0]
            try:
                engine.push_image(client, reference, credentials.username if credentials else None,
                                  credentials.password if credentials else None)
            except UserError as error:
                outcome.status, outcome.error = "failed", str(error)
                continue
            target = next(item.target for item in to_build if item.target.id == result.id)
            outcome.digest = registry.head_manifest(target.repository, target.tag_names[0]) or ""
            outcome.status = "published" if outcome.digest else "failed"
    good = {target_id for target_id, o in outcomes.items() if o.status in ("published", "skipped-unchanged")}

    by_id = {item.target.id: item.target for item in rendered}
    pairs: dict[str, str] = {}
    movable: list[str] = []  # targets whose floating tags may move: good, and for twins both twins good
    for target_id in sorted(good):
        target = by_id[target_id]
        if target.pair:
            twins = [t for t in by_id.values() if t.pair == target.pair]
            bad = [t.id for t in twins if t.id not in good]
            if bad or len(twins) < 2:
                pairs[target.pair] = f"floating tags not moved: {', '.join(bad) or 'the other twin was not selected'} did not pass"
                continue
            pairs[target.pair] = "floating tags moved"
        movable.append(target_id)

    def tag(target_id: str) -> None:
        """Date tag first (immutable), then the floating tags, all by PUT of the pushed manifest."""
        target, outcome = by_id[target_id], outcomes[target_id]
        outcome.tags = [target.tags[0]]
        manifest = registry.get_manifest(target.repository, outcome.digest)
        if options.nightly:
            registry.put_manifest(target.repository, date_tag(target, options.date),
                                  annotated(manifest, {"dev.buildkit.nightly": options.date}))
            outcome.tags.append(f"{target.image_name}:{date_tag(target, options.date)}")
        if target_id in movable:
            for name in floating_tags(target, options.nightly):
                if registry.head_manifest(target.repository, name) != manifest.digest:
                    registry.put_manifest(target.repository, name, manifest)
                outcome.tags.append(f"{target.image_name}:{name}")

    with ThreadPoolExecutor(max_workers=options.lookups) as pool:
        list(pool.map(tag, sorted(good)))

    deleted: list[str] = []
    if options.keep is not None:
        for target in by_id.values():
            deleted += prune_nightlies(registry, target, options.keep)
    return PublishRun([outcomes[item.target.id] for item in rendered], pairs, deleted, registry.requests,
                      time.monotonic() - started, build_run)


def check_date_tags(rendered: tuple[Rendered, ...], date: str) -> None:
    """Refuse before any work when a nightly date tag would break the OCI tag grammar."""
    bad = [date_tag(item.target, date) for item in rendered if grammar.tag(date_tag(item.target, date))]
    if bad:
        raise UserError(Problem("--nightly", f"tag {bad[0]!r} is longer than 128 characters; shorten tag_prefix"))


def registry_of(rendered: tuple[Rendered, ...]) -> str:
    registries = {item.target.registry for item in rendered}
    if len(registries) != 1:
        raise UserError(f"the selection spans registries {', '.join(sorted(registries))}; publish one at a time")
    return registries.pop()

