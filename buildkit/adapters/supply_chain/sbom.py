"""An image's SBOM: its inventory read in a short container, written as a CycloneDX 1.5 JSON document.

CycloneDX over SPDX: cyclonedx-python-lib (OWASP) is maintained, pure Python and light (about 7 MB with
packageurl-python and license-expression), validates its output against the official schema, and models
exactly what we list (components with a type, version and purl; the image as the described component);
spdx-tools pulls rdflib, PyYAML, ply and click for formats we do not write. cosign attaches it as
`--type cyclonedx` (predicate type https://cyclonedx.org/bom), and Grype, Trivy and Dependency-Track read it.

The inventory (buildkit/image/inventory.py) runs in a container with no network, no GPU and a time limit,
reading files only: nothing of the image's own entrypoint runs, nothing is written into the image.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import TYPE_CHECKING, Any

import docker
import docker.errors

from buildkit import __version__
from buildkit.adapters.engine.containers import run_once
from buildkit.core import labels as label_keys
from buildkit.core.reference import ImageReference
from buildkit.core.supply_chain.sbom import Contents, image_contents
from buildkit.errors import Problem, UserError

if TYPE_CHECKING:
    from collections.abc import Mapping

CYCLONEDX_TYPE = "https://cyclonedx.org/bom"  # the predicate type cosign gives `--type cyclonedx`
INVENTORY_TIMEOUT = 120  # seconds: it reads a few files, but a cold image store can be slow to start a container


def inventory_source() -> str:
    return resources.files("buildkit.image").joinpath("inventory.py").read_text(encoding="utf-8")


def image_inventory(client: docker.DockerClient, image: str, timeout: int = INVENTORY_TIMEOUT) -> dict[str, Any]:
    """The inventory JSON of a local image, or a UserError saying why it could not be read."""
    try:
        ran = run_once(
            client,
            image,
            timeout,
            entrypoint=["python3", "-c", inventory_source()],
            command=[],
            network_disabled=True,
            labels={label_keys.PROBE_CONTAINER: "1"},
        )
    except docker.errors.ImageNotFound:
        raise UserError(Problem(image, "no such image in the engine; build it or pull it first")) from None
    except docker.errors.APIError as error:
        raise UserError(Problem(image, f"cannot run a container to read its packages: {error.explanation or error}")) from None
    if ran.timed_out:
        raise UserError(Problem(image, f"reading its packages took longer than {timeout} s"))
    try:
        inventory: dict[str, Any] = json.loads(ran.stdout.strip().splitlines()[-1])  # buildkit/image/inventory.py's one object
    except (ValueError, IndexError):
        raise UserError(
            Problem(image, f"its package inventory failed (exit {ran.status}): {ran.stderr.strip()[-300:] or 'no output'}; the image needs python3 on its PATH")
        ) from None
    return inventory


def cyclonedx(contents: Contents, name: str, version: str, image_labels: Mapping[str, str]) -> dict[str, Any]:
    """The CycloneDX 1.5 document: the image as the described component (its buildkit labels as
    properties), the OS, then every deb and Python package with its purl."""
    # imported here, not at the top: the library takes about 0.35 s to import, which every buildkit command
    # would pay at start (the CLI imports this module through app.verify)
    from cyclonedx.model import Property
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot5
    from packageurl import PackageURL

    root = Component(
        name=name,
        version=version,
        type=ComponentType.CONTAINER,
        bom_ref=f"image:{name}@{version}",
        properties=[
            Property(name=key, value=value) for key, value in sorted(image_labels.items()) if key.startswith((label_keys.PREFIX, label_keys.OCI)) and value
        ],
    )
    bom = Bom()
    bom.metadata.component = root
    bom.metadata.tools.components.add(Component(type=ComponentType.APPLICATION, name="buildkit", version=__version__))
    components = []
    if contents.os_id:
        components.append(
            Component(
                name=contents.os_id,
                version=contents.os_version,
                type=ComponentType.OPERATING_SYSTEM,
                bom_ref=f"os:{contents.os_id}@{contents.os_version}",
                description=contents.os_name or None,
            )
        )
    for package in contents.packages:
        properties = [Property(name="dev.buildkit:source-package", value=package.source)] if package.source else []
        components.append(
            Component(
                name=package.name,
                version=package.version,
                type=ComponentType.LIBRARY,
                purl=PackageURL.from_string(package.purl),
                bom_ref=package.purl,
                properties=properties,
            )
        )
    for component in components:
        bom.components.add(component)
    bom.register_dependency(root, components)
    document: dict[str, Any] = json.loads(JsonV1Dot5(bom).output_as_string())
    return document


def local_sbom(client: docker.DockerClient, image: str, version: str = "") -> dict[str, Any]:
    """The SBOM of an image in the engine; version names it in the document (a digest, else its tag or id)."""
    try:
        found = client.images.get(image)
    except docker.errors.ImageNotFound:
        raise UserError(Problem(image, "no such image in the engine; build it or pull it first")) from None
    reference = ImageReference.parse(image)
    contents = image_contents(image_inventory(client, image))
    name = reference.name if reference else found.id
    return cyclonedx(contents, name, version or (reference.version if reference else found.id), dict(found.labels or {}))
