"""`buildkit publish`: skip what the registry already has, build and test the rest, push, move tags.

Order matters for the guarantee: an image is pushed under its immutable tag (the engine uploads every
blob before it writes the tag), and only then do floating tags move, by PUT of the same manifest. Which
tags move is decided by buildkit.core.release.decisions; this module reads the registry, builds, pushes and
carries out those decisions.
"""

from __future__ import annotations

import re
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from buildkit.adapters.build_stamp import created_now, matrix_revision, today_utc
from buildkit.adapters.engine import docker_sdk
from buildkit.adapters.registry.client import Credentials, Registry, annotated, load_credentials
from buildkit.adapters.registry.deletion import Deletion, deletion_for
from buildkit.app.build import BuildOptions, BuildStatus, Display, TargetResult, build_targets
from buildkit.app.lock import lock_matrix
from buildkit.app.targets import Choices, select_targets
from buildkit.app.verify import attach_sbom, attest_gpu, gpu_attestation, sign, supply_chain_client
from buildkit.core import grammar, labels
from buildkit.core.labels import ImageIdentity
from buildkit.core.release import decisions
from buildkit.core.release.decisions import Outcome, Published, TagMove
from buildkit.core.supply_chain.attestation import SmokeRun, gpu_predicate, passing_gpu_test
from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from pathlib import Path

    import docker

    from buildkit.adapters.secrets import IndexSettings
    from buildkit.adapters.supply_chain.cosign import Cosign, Signer, Trust
    from buildkit.core.compat.facts import Compat
    from buildkit.core.host.facts import HostFacts
    from buildkit.core.release.judge import Verdict
    from buildkit.core.render.planned import Rendered

NIGHTLY_DATE_RE = re.compile(r"^[0-9]{8}$")


@dataclass(frozen=True)
class PublishOptions:
    nightly: bool = False
    date: str = ""  # YYYYMMDD of this nightly; "" for today (UTC)
    keep: int | None = None
    dry_run: bool = False
    require_published: bool = False  # build nothing: move tags for images already published, fail for the rest
    refresh: bool = False  # resolve base images and package ranges again (matrix.lock) before deciding
    package_index: str | None = None
    gpu_gate: bool = True  # floating tags only for images with a passing GPU test of their vendor
    signer: Signer | None = None  # sign every pushed digest and attach its SBOM and GPU test, signed
    trust: Trust | None = None  # whose GPU test attestations count for images not tested in this run
    lookups: int = 8  # registry requests in flight while deciding what changed
    provenance: bool = True  # push BuildKit's SLSA provenance (mode=max) with every image


@dataclass
class TargetOutcome:
    id: str
    pair: str | None
    status: Outcome
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
    held: dict[str, str] = field(default_factory=dict)  # target -> why its own floating tags did not move
    gpu_gate: bool = True

    @property
    def failed(self) -> bool:
        return any(t.status in (Outcome.FAILED, Outcome.MISSING) for t in self.targets)


def published_state(registry: Registry, item: Rendered) -> Published | None:
    """What the registry holds under the target's immutable tag, read without pulling a layer: its digest,
    and the fingerprint every platform of it carries ("" when a platform is missing or they differ, so a
    multi-platform image counts as unchanged only when all of it is)."""
    target = item.target
    manifest = registry.find_manifest(target.repository, target.tag_names[0])
    if manifest is None:
        return None
    per_platform = registry.labels_per_platform(target.repository, manifest, only=target.platforms)
    fingerprints = {per_platform[p][1].get(labels.FINGERPRINT, "") if p in per_platform else "" for p in target.platforms}
    return Published(manifest.digest, fingerprints.pop() if len(fingerprints) == 1 else "")


def _prune(registry: Registry, deletion: Deletion, item: Rendered, keep: int) -> list[str]:
    target = item.target
    deleted = []
    for tag in decisions.expired_date_tags(target, registry.iter_tags(target.repository), keep):
        found = registry.image_labels(target.repository, tag, platform=target.platforms[0])
        if found is None or found[1].get(labels.TARGET) != target.id:
            continue  # not an image this tool built for this target: leave it alone
        deletion.delete(target.repository, found[0])
        deleted.append(f"{target.image_name}:{tag}")
    return deleted


def _push(client: docker.DockerClient, reference: str, credentials: Credentials | None) -> str:
    """Push the immutable tag; '' on success, else the error."""
    try:
        docker_sdk.push_image(client, reference, credentials.username if credentials else None, credentials.password if credentials else None)
    except UserError as error:
        return str(error)
    return ""


def _gpu_tested_here(verdict: Verdict | None, identity: ImageIdentity | None) -> bool:
    """The image's smoke test in this run ran its kernels on a GPU of its vendor, and passed."""
    if verdict is None or identity is None:
        return False
    return passing_gpu_test(gpu_predicate(verdict, identity, SmokeRun("", "", "", "", ())), identity.vendor.name)[0]


def publish_selection(
    choices: Choices,
    options: PublishOptions,
    build_options: BuildOptions,
    settings: IndexSettings,
    docker_cli: str | None,
    display: Display,
    auth_file: Path | None = None,
    insecure: bool = False,
) -> PublishRun:
    """`buildkit publish`: check the inputs and the registry's credentials before anything is built."""
    date = options.date or today_utc()
    if not NIGHTLY_DATE_RE.match(date):
        raise UserError(Problem("--date", f"expected YYYYMMDD, got {date!r}"))
    if options.refresh:
        lock_matrix(choices.matrix, options.package_index, insecure)
    selection = select_targets(replace(choices, today=date))
    rendered = selection.render()
    if options.nightly:
        check_date_tags(rendered, date)
    host = registry_of(rendered)
    credentials = load_credentials(host, auth_file)
    registry = Registry(host, credentials, insecure=True if insecure else None)
    # Publishing pushes: a builder outside the engine pushes by digest, and provenance goes with the image.
    stamped = replace(build_options, created=created_now(), revision=matrix_revision(choices.matrix), push=True, provenance=options.provenance)
    cosign = supply_chain_client(host, credentials, insecure) if options.signer or options.trust else None
    return publish(rendered, replace(options, date=date), stamped, settings, docker_cli, display, selection.matrix.compat, registry, credentials, cosign)


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
    cosign: Cosign | None = None,
) -> PublishRun:
    started = time.monotonic()
    registry.ping()
    by_id = {item.target.id: item for item in rendered}
    with ThreadPoolExecutor(max_workers=options.lookups) as pool:
        published = dict(zip(by_id, pool.map(lambda item: published_state(registry, item), rendered)))
    outcomes = {}
    for target_id, item in by_id.items():
        state = published[target_id]
        status = decisions.initial_outcome(item.fingerprint, state, build=not options.require_published)
        outcomes[target_id] = TargetOutcome(target_id, item.target.pair, status, digest=state.digest if state is not None and status.good else "")
        if status is Outcome.MISSING:
            outcomes[target_id].error = (
                "the registry holds an image of another fingerprint: its build job did not publish this one"
                if state
                else "not in the registry: its build job did not publish it"
            )
    if options.dry_run:
        return PublishRun(list(outcomes.values()), {}, requests=registry.requests, seconds=time.monotonic() - started)

    verdicts: dict[str, Verdict | None] = {}
    to_build = tuple(item for item in rendered if outcomes[item.target.id].status is Outcome.WOULD_BUILD)
    if to_build:
        build_run, _ = build_targets(to_build, build_options, settings, docker_cli, display, compat, credentials)
        client = docker_sdk.connect(build_run.engine_host)
        for result in build_run.results:
            outcome, item = outcomes[result.id], by_id[result.id]
            outcome.seconds, outcome.size = result.seconds, result.size
            verdicts[result.id] = result.smoke
            if result.status is not BuildStatus.BUILT:
                outcome.status, outcome.error = Outcome.FAILED, result.error or result.status.value
                continue
            display.step(result.id, f"publishing {item.target.tags[0]}")
            outcome.error = _publish_built(registry, client, item, result, credentials)
            outcome.digest = "" if outcome.error else registry.head_manifest(item.target.repository, item.target.tag_names[0]) or ""
            outcome.status = Outcome.PUBLISHED if outcome.digest else Outcome.FAILED
            if not outcome.digest and not outcome.error:
                outcome.error = "the pushed tag is not in the registry"
            if outcome.digest and cosign is not None and options.signer is not None:
                outcome.error = _sign_and_attest(cosign, options.signer, client, item, result, outcome.digest, build_run.host, build_options.gpu)

    targets = [item.target for item in rendered]
    gpu_tested = _gpu_tests(options, cosign, by_id, outcomes, verdicts) if options.gpu_gate else None
    plan = decisions.tag_moves(targets, {i: o.status for i, o in outcomes.items()}, gpu_tested, options.nightly, options.date)
    for target_id, outcome in outcomes.items():
        if outcome.status.good:
            outcome.tags = [by_id[target_id].target.tags[0]]
    _carry_out(registry, plan.moves, by_id, outcomes)

    deleted: list[str] = []
    if options.keep is not None:
        deletion = deletion_for(registry)
        for item in rendered:
            deleted += _prune(registry, deletion, item, options.keep)
    return PublishRun(
        [outcomes[item.target.id] for item in rendered],
        {**plan.pairs},
        deleted,
        registry.requests,
        time.monotonic() - started,
        held=dict(plan.held),
        gpu_gate=options.gpu_gate,
    )


def _publish_built(registry: Registry, client: docker.DockerClient, item: Rendered, result: TargetResult, credentials: Credentials | None) -> str:
    """The immutable tag onto an image that passed: a registry PUT where the builder pushed it by digest,
    otherwise a push from the engine that holds it. '' on success, else the error."""
    target = item.target
    if result.pushed:
        registry.put_manifest(target.repository, target.tag_names[0], registry.get_manifest(target.repository, result.digest))
        return ""
    return _push(client, target.tags[0], credentials)


def _sign_and_attest(
    cosign: Cosign, signer: Signer, client: docker.DockerClient, item: Rendered, result: TargetResult, digest: str, host: HostFacts | None, gpu_mode: str
) -> str:
    """Signature, SBOM and the smoke test's record on the pushed digest; '' on success, else the error."""
    pushed = f"{item.target.image_name}@{digest}"
    identity = ImageIdentity.read(item.labels)
    try:
        sign(cosign, pushed, signer)
        assert result.image_id is not None  # a built image is in the engine
        attach_sbom(cosign, client, result.image_id, pushed, signer)
        if result.smoke is not None and identity is not None:
            assert host is not None  # a smoke test ran: the build read the host it ran on
            attest_gpu(cosign, pushed, result.smoke, identity, host, gpu_mode, signer)
    except UserError as error:
        return f"signing or attesting {pushed} failed: {error}"
    return ""


def _gpu_tests(
    options: PublishOptions, cosign: Cosign | None, by_id: dict[str, Rendered], outcomes: dict[str, TargetOutcome], verdicts: dict[str, Verdict | None]
) -> dict[str, bool]:
    """Per good target: a passing GPU test of its vendor, from this run's smoke test, else from a signed
    attestation the trust accepts (images published earlier, e.g. by the nightly's GPU build jobs)."""
    tested: dict[str, bool] = {}
    for target_id, outcome in outcomes.items():
        if not outcome.status.good:
            continue
        identity = ImageIdentity.read(by_id[target_id].labels)
        if _gpu_tested_here(verdicts.get(target_id), identity):
            tested[target_id] = True
        elif cosign is not None and options.trust is not None and identity is not None:
            pushed = f"{by_id[target_id].target.image_name}@{outcome.digest}"
            tested[target_id] = gpu_attestation(cosign, pushed, options.trust, identity.vendor.name) is not None
        else:
            tested[target_id] = False
    return tested


def _carry_out(registry: Registry, moves: list[TagMove], by_id: dict[str, Rendered], outcomes: dict[str, TargetOutcome]) -> None:
    """Each tag by PUT of the pushed manifest (date tags as an annotated copy), targets in parallel and each
    target's tags in the plan's order: the date tag first, then the floating tags."""
    per_target: dict[str, list[TagMove]] = {}
    for move in moves:
        per_target.setdefault(move.target, []).append(move)

    def apply(target_id: str) -> None:
        target, outcome = by_id[target_id].target, outcomes[target_id]
        manifest = registry.get_manifest(target.repository, outcome.digest)
        for move in per_target[target_id]:
            if move.annotate_date:
                registry.put_manifest(target.repository, move.tag, annotated(manifest, {labels.NIGHTLY_ANNOTATION: move.annotate_date}))
            elif registry.head_manifest(target.repository, move.tag) != manifest.digest:
                registry.put_manifest(target.repository, move.tag, manifest)
            outcome.tags.append(f"{target.image_name}:{move.tag}")

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(apply, sorted(per_target)))


def check_date_tags(rendered: tuple[Rendered, ...], date: str) -> None:
    """Refuse before any work when a nightly date tag would break the OCI tag grammar."""
    bad = [decisions.date_tag(item.target, date) for item in rendered if grammar.tag(decisions.date_tag(item.target, date))]
    if bad:
        raise UserError(Problem("--nightly", f"tag {bad[0]!r} is longer than 128 characters; shorten tag_prefix"))


def registry_of(rendered: tuple[Rendered, ...]) -> str:
    registries = {item.target.registry for item in rendered}
    if len(registries) != 1:
        raise UserError(f"the selection spans registries {', '.join(sorted(registries))}; publish one at a time")
    return registries.pop()
