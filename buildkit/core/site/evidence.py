"""What the documents of a run say about each image, in one record per target.

Build and publish reports, `buildkit verify --json` and CycloneDX SBOMs (`buildkit sbom`), read from their JSON.

Every document names the images it is about (a report its targets' ids, a verification the target label it
read, an SBOM the image's labels among its properties), so a folder of them needs no naming convention. A
document of another shape, or a field of the wrong type, is one UserError naming the file and the key.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from buildkit.core import labels
from buildkit.core.release.layer_sharing import BuiltLayer
from buildkit.core.supply_chain.sbom import Package
from buildkit.errors import Problem, UserError, printable

KINDS = "a build or publish report (report.json, publish.json), `buildkit verify --json` output or a CycloneDX SBOM"


@dataclass(frozen=True)
class Check:
    """One supply-chain fact `buildkit verify` checked: signature, provenance, sbom, gpu test."""

    name: str
    ok: bool
    detail: str


@dataclass(frozen=True)
class Evidence:
    """What the documents say about one image; empty fields: no document said."""

    target: str
    status: str = ""  # the report's: built, failed, published, skipped-unchanged, not-published, ...
    smoke: bool | None = None  # its smoke test passed (None: no report says)
    kernels: str = ""  # the smoke test's: "ran on 1 device(s)", "skipped (no AMD GPU on this host)", "failed"
    error: str = ""
    digest: str = ""
    size: int | None = None
    tags: tuple[str, ...] = ()
    layers: tuple[BuiltLayer, ...] = ()
    layers_compressed: bool = False  # the registry's blobs (what a node fetches), not the engine's uncompressed layers
    checks: tuple[Check, ...] = ()
    signatures_checked: bool = False
    gpu_tests: tuple[str, ...] = ()  # one line per passing GPU test attestation: GPUs, driver, torch, date, runner
    packages: tuple[Package, ...] = ()
    os_name: str = ""
    created: str = ""  # the image's org.opencontainers.image.created: when it last changed

    def merged(self, later: Evidence) -> Evidence:
        """This record with what a later document says: its values win where it has them; tags gather."""
        changes = {f.name: getattr(later, f.name) for f in fields(later) if f.name not in _TIED and not _empty(getattr(later, f.name))}
        for field, tied in _TIED.items():  # said together with another field, or not at all
            if tied and not _empty(getattr(later, tied)):
                changes[field] = getattr(later, field)
        return replace(self, **changes, tags=tuple(dict.fromkeys((*self.tags, *later.tags))))

    def check(self, name: str) -> Check | None:
        return next((check for check in self.checks if check.name == name), None)


_TIED = {"target": "", "tags": "", "layers_compressed": "layers", "signatures_checked": "checks"}


def _empty(value: Any) -> bool:
    return value is None or value == "" or value == ()


def gather(evidence: Iterable[Evidence]) -> dict[str, Evidence]:
    """One record per target, documents merged in the order given (a later run's report over an earlier one's)."""
    found: dict[str, Evidence] = {}
    for item in evidence:
        found[item.target] = found[item.target].merged(item) if item.target in found else item
    return found


class _Reader:
    """Typed access to one document, each wrong type one UserError naming the file and the key path."""

    def __init__(self, name: str) -> None:
        self.name = name

    def fail(self, key: str, expected: str, value: Any = None) -> UserError:
        got = f", got {printable(repr(value), 80)}" if value is not None else ""
        return UserError(Problem(self.name, f"expected {expected}{got}; is this file {KINDS}?", key=key))

    def value(self, document: Mapping[str, Any], key: str, path: str, kind: type, expected: str, default: Any = None) -> Any:
        value = document.get(key, default)
        if value is None:
            return default
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):  # JSON's true is no count
            raise self.fail(f"{path}{key}", expected, value)
        return value

    # value() checks the JSON value's type at run time; the helpers below name the type it checked
    def text(self, document: Mapping[str, Any], key: str, path: str = "") -> str:
        text: str = self.value(document, key, path, str, "text", "")
        return text

    def count(self, document: Mapping[str, Any], key: str, path: str = "") -> int | None:
        value: int | None = self.value(document, key, path, int, "a whole number of bytes")
        if value is not None and value < 0:
            raise self.fail(f"{path}{key}", "a whole number of bytes", value)
        return value

    def objects(self, document: Mapping[str, Any], key: str, path: str = "") -> list[Mapping[str, Any]]:
        items: list[Mapping[str, Any]] = self.value(document, key, path, list, "a list", [])
        for index, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise self.fail(f"{path}{key}[{index}]", "an object", item)
        return items

    def texts(self, document: Mapping[str, Any], key: str, path: str = "") -> tuple[str, ...]:
        items = self.value(document, key, path, list, "a list of text", [])
        if not all(isinstance(item, str) for item in items):
            raise self.fail(f"{path}{key}", "a list of text")
        return tuple(items)


def read_document(name: str, document: Any) -> tuple[Evidence, ...]:
    """The records a document holds, whichever of KINDS it is."""
    reader = _Reader(name)
    if not isinstance(document, Mapping):
        raise UserError(Problem(name, f"is not {KINDS}: its JSON is not an object"))
    if document.get("bomFormat") == "CycloneDX":
        return (_sbom(reader, document),)
    if "signatures_checked" in document and "checks" in document:
        return (_verification(reader, document),)
    if "targets" in document and "engine" in document:
        return tuple(_built(reader, target, f"targets[{index}].") for index, target in enumerate(reader.objects(document, "targets")))
    if "targets" in document and "registry_requests" in document:
        return tuple(_published(reader, target, f"targets[{index}].") for index, target in enumerate(reader.objects(document, "targets")))
    raise UserError(Problem(name, f"is not {KINDS}: it has none of their keys"))


def _target(reader: _Reader, document: Mapping[str, Any], path: str, key: str = "id") -> str:
    target = reader.text(document, key, path)
    if not target:
        raise reader.fail(f"{path}{key}", "the target's id")
    return target


def _layers(reader: _Reader, document: Mapping[str, Any], path: str) -> tuple[BuiltLayer, ...]:
    """A build report's layers: the engine's digests from the bottom, and the sizes of the layers with content
    named by their step, in the same order (none where the two do not line up, as TargetResult.built_layers)."""
    digests = reader.texts(document, "layers", path)
    sizes = reader.objects(document, "layer_sizes", path)
    if len(digests) != len(sizes):
        return ()
    layers = []
    for index, (digest, size) in enumerate(zip(digests, sizes)):
        where = f"{path}layer_sizes[{index}]."
        layers.append(BuiltLayer(digest, reader.count(size, "bytes", where) or 0, reader.text(size, "layer", where)))
    return tuple(layers)


def _built(reader: _Reader, target: Mapping[str, Any], path: str) -> Evidence:
    smoke = reader.value(target, "smoke", path, Mapping, "an object")
    passed = kernels = None
    if smoke is not None:
        passed = reader.value(smoke, "passed", f"{path}smoke.", bool, "true or false")
        kernels = reader.text(smoke, "kernels", f"{path}smoke.")
    return Evidence(
        target=_target(reader, target, path),
        status=reader.text(target, "status", path),
        smoke=passed,
        kernels=kernels or "",
        error=reader.text(target, "error", path),
        digest=reader.text(target, "digest", path),
        size=reader.count(target, "size", path),
        tags=reader.texts(target, "tags", path),
        layers=_layers(reader, target, path),
    )


def _published(reader: _Reader, target: Mapping[str, Any], path: str) -> Evidence:
    status = reader.text(target, "status", path)
    return Evidence(
        target=_target(reader, target, path),
        status=status,
        error=reader.text(target, "error", path),
        # published: it passed its smoke test in this run; skipped-unchanged: the same image was published after passing it
        smoke=True if status in ("published", "skipped-unchanged") else False if status == "failed" else None,
        digest=reader.text(target, "digest", path),
        size=reader.count(target, "size", path),
        tags=reader.texts(target, "tags", path),
    )


def _verification(reader: _Reader, document: Mapping[str, Any]) -> Evidence:
    checks = tuple(
        Check(
            reader.text(check, "name", f"checks[{index}]."),
            reader.value(check, "passed", f"checks[{index}].", bool, "true or false", False),
            reader.text(check, "detail", f"checks[{index}]."),
        )
        for index, check in enumerate(reader.objects(document, "checks"))
    )
    tests = tuple(reader.text(test, "summary", f"gpu_tests[{index}].") for index, test in enumerate(reader.objects(document, "gpu_tests")))
    layers = tuple(
        BuiltLayer(
            reader.text(layer, "digest", f"layers[{index}]."),
            reader.count(layer, "bytes", f"layers[{index}].") or 0,
            reader.text(layer, "name", f"layers[{index}]."),
        )
        for index, layer in enumerate(reader.objects(document, "layers"))
    )
    image = reader.text(document, "image")
    return Evidence(
        target=_target(reader, document, "", "target"),
        digest=image.partition("@")[2],
        checks=checks,
        signatures_checked=reader.value(document, "signatures_checked", "", bool, "true or false", False),
        gpu_tests=tests,
        layers=layers,
        layers_compressed=bool(layers),
        created=reader.text(document, "created"),
    )


def _sbom(reader: _Reader, document: Mapping[str, Any]) -> Evidence:
    metadata = reader.value(document, "metadata", "", Mapping, "an object", {})
    root = reader.value(metadata, "component", "metadata.", Mapping, "an object", {})
    properties = {
        reader.text(item, "name", f"metadata.component.properties[{index}]."): reader.text(item, "value", f"metadata.component.properties[{index}].")
        for index, item in enumerate(reader.objects(root, "properties", "metadata.component."))
    }
    target = properties.get(labels.TARGET, "")
    if not target:
        raise UserError(
            Problem(
                reader.name,
                f"an SBOM of an image without the {labels.TARGET} label: not an image buildkit built "
                "(`buildkit sbom` records the image's labels as properties)",
            )
        )
    packages, os_name = [], ""
    for index, component in enumerate(reader.objects(document, "components")):
        path = f"components[{index}]."
        purl = reader.text(component, "purl", path)
        ecosystem = purl[4:].split("/", 1)[0] if purl.startswith("pkg:") else ""
        if ecosystem in ("deb", "pypi"):
            packages.append(Package(ecosystem, reader.text(component, "name", path), reader.text(component, "version", path), purl))
        elif reader.text(component, "type", path) == "operating-system":
            os_name = reader.text(component, "description", path) or f"{reader.text(component, 'name', path)} {reader.text(component, 'version', path)}"
    return Evidence(
        target=target,
        packages=tuple(sorted(packages, key=lambda p: (p.ecosystem, p.name, p.version))),
        os_name=os_name,
        created=properties.get(labels.CREATED, ""),
    )
