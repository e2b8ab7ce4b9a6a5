"""`buildkit verify` and `buildkit sbom`, and the supply-chain steps publishing calls after a push.

What an operator asks of a pulled image: is it signed by whom I trust, how was it built (BuildKit's SLSA
provenance), what is in it (the CycloneDX SBOM) and was it tested on my kind of GPU (a signed attestation
of a passing smoke test whose kernels ran on a GPU of the image's vendor, optionally of one arch).

For publishing (wired in by app/publish.py):
  cosign = supply_chain_client(registry_host, credentials, insecure)
  sign(cosign, pushed, signer)                                    # pushed = registry/repo@sha256:...
  attach_sbom(cosign, client, local_image, pushed, signer)        # generate from the built image, attest
  attest_gpu(cosign, pushed, verdict, identity, host, gpu_mode, signer)  # after a smoke test on a GPU runner
  gpu_attestation(cosign, pushed, trust, vendor) -> predicate | None     # gate floating tags on it
For `doctor IMAGE`: published_facts(image, trust=None) -> (Verification | None, why not).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from buildkit.adapters.build_stamp import created_now
from buildkit.adapters.engine import docker_sdk
from buildkit.adapters.registry.client import Credentials, Registry, load_credentials
from buildkit.adapters.supply_chain.cosign import Attestations, Checked, Cosign, Signer, Trust
from buildkit.adapters.supply_chain.provenance import buildkit_statements
from buildkit.adapters.supply_chain.sbom import CYCLONEDX_TYPE, local_sbom
from buildkit.core.labels import CREATED, ImageIdentity
from buildkit.core.reference import ImageReference
from buildkit.core.release.layer_sharing import BuiltLayer, pushed_layers
from buildkit.core.supply_chain.attestation import GPU_TEST_TYPE, SmokeRun, gpu_predicate, host_driver, passing_gpu_test
from buildkit.core.supply_chain.provenance import SLSA_TYPES, Provenance, read_provenance
from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from pathlib import Path

    import docker

    from buildkit.core.host.facts import HostFacts
    from buildkit.core.release.judge import Verdict

__all__ = [
    "RegistryAccess",
    "Signer",
    "Trust",
    "Verification",
    "attach_sbom",
    "attest_gpu",
    "gpu_attestation",
    "image_sbom",
    "published_facts",
    "sign",
    "signer_of",
    "supply_chain_client",
    "trust_of",
    "verify_image",
]


@dataclass(frozen=True)
class RegistryAccess:
    auth_file: Path | None = None
    insecure: bool = False


@dataclass(frozen=True)
class Fact:
    name: str  # signature | provenance | sbom | gpu test | labels
    ok: bool
    detail: str


@dataclass(frozen=True)
class Verification:
    image: str  # registry/repository@sha256:...
    identity: ImageIdentity | None
    facts: tuple[Fact, ...]
    gpu_tests: tuple[Mapping[str, Any], ...] = ()  # the passing GPU test predicates
    provenance: Provenance | None = None
    verified: bool = True  # False: signatures were not checked (no trust given: doctor's view)
    created: str = ""  # its org.opencontainers.image.created label: when it last changed
    layers: tuple[BuiltLayer, ...] = ()  # as the registry stores them: what a node fetches to run it

    @property
    def passed(self) -> bool:
        return self.verified and all(fact.ok for fact in self.facts)

    @property
    def failures(self) -> list[str]:
        return [f"{fact.name}: {fact.detail}" for fact in self.facts if not fact.ok]


def signer_of(key: str | None, keyless: bool) -> Signer | None:
    """--sign KEY or --keyless (one of them), or None: publish then signs nothing."""
    if key and keyless:
        raise UserError(Problem("--sign / --keyless", "choose one: a key, or keyless signing"))
    return Signer(key=key) if key else Signer() if keyless else None


def trust_of(key: str | None, identity: str | None, issuer: str | None, transparency_log: bool = False, required: bool = True) -> Trust | None:
    """The trust the options name: a public key, or a keyless identity with its issuer; exactly one
    (none: None, where the command allows it)."""
    if key and (identity or issuer):
        raise UserError(Problem("--key", "give either --key or --certificate-identity with --certificate-oidc-issuer, not both"))
    if key:
        return Trust(key=key, transparency_log=transparency_log)
    if identity and issuer:
        return Trust(identity=identity, issuer=issuer, transparency_log=True)
    if identity or issuer:
        missing = "--certificate-oidc-issuer" if identity else "--certificate-identity"
        raise UserError(Problem(missing, "keyless verification needs both --certificate-identity and --certificate-oidc-issuer"))
    if not required:
        return None
    raise UserError(
        Problem(
            "--key",
            "say whose signature counts: --key cosign.pub (or a KMS URI), or --certificate-identity "
            "and --certificate-oidc-issuer for images signed keyless in CI",
        )
    )


def _registry_reference(image: str) -> ImageReference:
    reference = ImageReference.parse(image)
    if reference is None:
        raise UserError(Problem(image, "not an image reference; expected REGISTRY/REPOSITORY[:TAG][@sha256:DIGEST]"))
    if not reference.registry:
        raise UserError(
            Problem(image, "name the registry the image was published to, e.g. ghcr.io/team/pytorch:TAG (signatures and attestations live in the registry)")
        )
    return reference


def supply_chain_client(registry: str, credentials: Credentials | None = None, insecure: bool = False) -> Cosign:
    return Cosign(registry, credentials, insecure)


def _clients(reference: ImageReference, access: RegistryAccess) -> tuple[Registry, Cosign]:
    credentials = load_credentials(reference.registry, access.auth_file)
    registry = Registry(reference.registry, credentials, insecure=True if access.insecure else None)
    return registry, Cosign(reference.registry, credentials, access.insecure)


def _pinned(registry: Registry, reference: ImageReference) -> str:
    # a digest is looked up too: the registry must hold it before cosign is asked anything about it
    digest = registry.head_manifest(reference.repository, reference.digest or reference.tag or "latest")
    if not digest:
        raise UserError(Problem(str(reference), f"no such image in {reference.registry}"))
    return reference.pinned(digest)


# --- publishing --------------------------------------------------------------------------------------------


def sign(cosign: Cosign, pushed: str, signer: Signer) -> None:
    """Sign a pushed digest (its index: provenance and platform manifests are covered through it)."""
    cosign.sign(pushed, signer)


def attach_sbom(cosign: Cosign, client: docker.DockerClient, local_image: str, pushed: str, signer: Signer) -> dict[str, Any]:
    """Generate the SBOM from the built image in the engine and attach it, signed, to the pushed digest."""
    document = local_sbom(client, local_image, version=pushed.partition("@")[2])
    cosign.attest(pushed, CYCLONEDX_TYPE, document, signer)
    return document


def runner_name(environ: Mapping[str, str] | None = None) -> str:
    """The CI runner's name where CI names it (GitHub Actions: RUNNER_NAME), else the host name."""
    environ = os.environ if environ is None else environ
    return environ.get("RUNNER_NAME") or socket.gethostname()


def smoke_run(host: HostFacts, vendor: str, gpu_mode: str) -> SmokeRun:
    """Where and when a smoke test ran here: now, this runner, the vendor's driver and GPU models."""
    return SmokeRun(created_now(), runner_name(), gpu_mode, host_driver(host, vendor), tuple(gpu.name for gpu in host.gpus_of(vendor)))


def attest_gpu(cosign: Cosign, pushed: str, verdict: Verdict, identity: ImageIdentity, host: HostFacts, gpu_mode: str, signer: Signer) -> dict[str, Any]:
    """Attach the smoke test's verdict to the pushed digest as a signed GPU test attestation. A failing or
    CPU-only verdict is attached as it is: the record is honest, and gpu_attestation will not accept it."""
    predicate = gpu_predicate(verdict, identity, smoke_run(host, identity.vendor.name, gpu_mode))
    cosign.attest(pushed, GPU_TEST_TYPE, predicate, signer)
    return predicate


def gpu_attestation(cosign: Cosign, pushed: str, trust: Trust, vendor: str, tested_arch: str | None = None) -> Mapping[str, Any] | None:
    """A passing GPU test predicate for the vendor (and arch) signed under the trust, or None: what a
    floating tag must wait for."""
    return next(iter(_gpu_tests(cosign.attestations(pushed, GPU_TEST_TYPE, trust), vendor, tested_arch)[0]), None)


def _gpu_tests(found: Attestations, vendor: str, tested_arch: str | None) -> tuple[list[Mapping[str, Any]], list[str]]:
    passing, reasons = [], []
    for predicate in found.predicates:
        ok, why = passing_gpu_test(predicate, vendor, tested_arch)
        if ok:
            passing.append(predicate)
        else:
            reasons.append(why)
    return passing, reasons


# --- verify ------------------------------------------------------------------------------------------------


def verify_image(image: str, trust: Trust | None, tested_arch: str | None = None, access: RegistryAccess = RegistryAccess()) -> Verification:
    """`buildkit verify`: signature, provenance, SBOM and a passing GPU test, each a Fact. Without a trust
    (doctor's view) the same facts are read without checking signatures, and the result says so."""
    reference = _registry_reference(image)
    registry, cosign = _clients(reference, access)
    pinned = _pinned(registry, reference)
    digest = pinned.partition("@")[2]
    held = registry.image(reference.repository, digest)
    identity = ImageIdentity.read(held.labels if held else None)

    def attached(predicate_type: str, name: str) -> Attestations:
        if trust is None:
            return cosign.unverified_attestations(pinned, predicate_type, name)
        return cosign.attestations(pinned, predicate_type, trust, name)

    facts = [Fact("signature", *_signature(cosign, pinned, trust))]
    statements = buildkit_statements(registry, reference.repository, digest, SLSA_TYPES)
    provenance = next((p for p in map(read_provenance, statements) if p is not None), None)
    facts.append(_provenance_fact(provenance, identity))
    facts.append(_sbom_fact(attached(CYCLONEDX_TYPE, "SBOM")))
    passing: list[Mapping[str, Any]] = []
    if identity is None:
        facts.append(Fact("gpu test", False, "the image has no dev.buildkit backend labels, so its GPU vendor is unknown"))
    else:
        gpu = attached(GPU_TEST_TYPE, "GPU test")
        passing, reasons = _gpu_tests(gpu, identity.vendor.name, tested_arch)
        scope = f"an {identity.vendor.display} GPU" + (f" of arch {tested_arch}" if tested_arch else "")
        if passing:
            facts.append(Fact("gpu test", True, f"passed on {scope} ({len(passing)} run(s))"))
        elif gpu.missing:
            facts.append(Fact("gpu test", False, gpu.missing))
        else:
            facts.append(Fact("gpu test", False, f"no passing test on {scope}: " + "; ".join(dict.fromkeys(reasons))))
    return Verification(
        pinned,
        identity,
        tuple(facts),
        tuple(passing),
        provenance,
        verified=trust is not None,
        created=held.labels.get(CREATED, "") if held else "",
        layers=pushed_layers(held.manifest, held.config) if held else (),
    )


def published_facts(image: str, trust: Trust | None = None, access: RegistryAccess = RegistryAccess()) -> tuple[Verification | None, str]:
    """For `doctor IMAGE`: the facts verify reads (signatures checked only with a trust), or (None, why not)
    when the image names no registry, or the registry or cosign cannot answer. Never raises for those:
    doctor reports them and goes on."""
    reference = ImageReference.parse(image)
    if reference is None or not reference.registry:
        return None, "the image names no registry: signatures and attestations live in a registry"
    try:
        return verify_image(image, trust, access=access), ""
    except UserError as error:
        return None, str(error)


def _signature(cosign: Cosign, pinned: str, trust: Trust | None) -> tuple[bool, str]:
    if trust is None:
        return True, "not checked (give --key, or --certificate-identity and --certificate-oidc-issuer)"
    checked: Checked = cosign.verify(pinned, trust)
    return checked.ok, checked.detail


def _provenance_fact(provenance: Provenance | None, identity: ImageIdentity | None) -> Fact:
    if provenance is None:
        return Fact("provenance", False, "no SLSA provenance in the image index (build with --provenance=mode=max and push the index)")
    if identity and identity.fingerprint and provenance.fingerprint and provenance.fingerprint != identity.fingerprint:
        return Fact("provenance", False, f"provenance records fingerprint {provenance.fingerprint[:12]}, the image's label says {identity.fingerprint[:12]}")
    return Fact("provenance", True, provenance.summary())


def _sbom_fact(found: Attestations) -> Fact:
    documents = [p for p in found.predicates if isinstance(p, Mapping) and p.get("bomFormat") == "CycloneDX"]
    if not documents:
        return Fact("sbom", False, found.missing or "the attestation holds no CycloneDX document")
    components = documents[-1].get("components") or []
    kinds: dict[str, int] = {}
    for component in components:
        purl = str(component.get("purl", ""))
        kind = purl[4:].split("/")[0] if purl.startswith("pkg:") else component.get("type", "other")
        kinds[kind] = kinds.get(kind, 0) + 1
    counts = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
    return Fact("sbom", True, f"CycloneDX {documents[-1].get('specVersion', '?')}, {len(components)} components ({counts})")


# --- sbom --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SbomResult:
    document: Mapping[str, Any]
    source: str  # where it came from, and whether its signature was checked
    notes: tuple[str, ...] = field(default_factory=tuple)


def image_sbom(image: str, trust: Trust | None, local: bool, access: RegistryAccess = RegistryAccess()) -> SbomResult:
    """`buildkit sbom`: the SBOM attested in the registry for a registry reference, else (or with --local)
    one generated from the image in the engine."""
    reference = ImageReference.parse(image)
    if reference is None:
        raise UserError(Problem(image, "not an image reference; expected [REGISTRY/]REPOSITORY[:TAG][@sha256:DIGEST]"))
    if local or not reference.registry:
        return SbomResult(local_sbom(docker_sdk.connect(), image), f"generated from {image} in the engine")
    registry, cosign = _clients(reference, access)
    pinned = _pinned(registry, reference)
    found = cosign.unverified_attestations(pinned, CYCLONEDX_TYPE, "SBOM") if trust is None else cosign.attestations(pinned, CYCLONEDX_TYPE, trust, "SBOM")
    documents = [p for p in found.predicates if isinstance(p, Mapping) and p.get("bomFormat") == "CycloneDX"]
    if not documents:
        raise SbomMissing(Problem(pinned, f"{found.missing or 'no CycloneDX SBOM attached'}; generate one from a local copy with --local"))
    if trust:
        return SbomResult(documents[-1], f"attestation on {pinned}, signature verified with {trust.describe()}")
    return SbomResult(
        documents[-1], f"attestation on {pinned}", ("its signature was NOT checked: give --key or --certificate-identity/--certificate-oidc-issuer",)
    )


class SbomMissing(UserError):
    """The registry holds no SBOM for the image: a finding (exit 1), not a usage error."""

    exit_code = 1
