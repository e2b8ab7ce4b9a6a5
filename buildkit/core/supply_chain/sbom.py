"""What is in an image, as package records with Package URLs.

dpkg's status database and the Python distributions an inventory of the image found. Pure: the inventory is read
by buildkit.adapters.supply_chain.sbom.

Package URLs follow the purl spec: pkg:deb/<os id>/<name>@<version>?arch=<arch>&distro=<os id>-<version>
and pkg:pypi/<PEP 503 name>@<version>, so scanners (Grype, Trivy, Dependency-Track) match them to advisories.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from packageurl import PackageURL
from packaging.utils import canonicalize_name


@dataclass(frozen=True)
class Package:
    ecosystem: str  # deb | pypi
    name: str
    version: str
    purl: str
    arch: str = ""
    source: str = ""  # deb: the source package, when it differs from the binary one


@dataclass(frozen=True)
class Contents:
    os_id: str  # debian, ubuntu ("" when the image has no /etc/os-release)
    os_version: str
    os_name: str  # PRETTY_NAME
    python: str
    packages: tuple[Package, ...]


def parse_dpkg_status(text: str) -> list[dict[str, str]]:
    """The paragraphs of /var/lib/dpkg/status as field dicts (continuation lines folded into their field)."""
    paragraphs: list[dict[str, str]] = []
    current: dict[str, str] = {}
    field = ""
    for line in text.splitlines():
        if not line.strip():
            if current:
                paragraphs.append(current)
            current, field = {}, ""
        elif line[0] in " \t":
            if field:
                current[field] += "\n" + line.strip()
        else:
            field, _, value = line.partition(":")
            current[field] = value.strip()
    if current:
        paragraphs.append(current)
    return paragraphs


def deb_packages(status: str, os_id: str, os_version: str) -> list[Package]:
    """Installed packages only: dpkg keeps removed ones (`deinstall ok config-files`) in the same file."""
    namespace = os_id or "debian"
    qualifiers = {"distro": f"{namespace}-{os_version}"} if os_version else {}
    found = []
    for entry in parse_dpkg_status(status):
        if not entry.get("Status", "").endswith(" installed") or not entry.get("Package") or not entry.get("Version"):
            continue
        arch = entry.get("Architecture", "")
        source = entry.get("Source", "").split(" ")[0]
        purl = PackageURL("deb", namespace, entry["Package"], entry["Version"], {**({"arch": arch} if arch else {}), **qualifiers})
        found.append(Package("deb", entry["Package"], entry["Version"], purl.to_string(), arch, source if source != entry["Package"] else ""))
    return found


def pypi_packages(distributions: Any) -> list[Package]:
    """Each (PEP 503 name, version) once, however many site-packages folders hold it."""
    seen: dict[tuple[str, str], Package] = {}
    for entry in distributions or []:
        if not isinstance(entry, Mapping) or not entry.get("name") or not entry.get("version"):
            continue
        name, version = canonicalize_name(str(entry["name"])), str(entry["version"])
        seen.setdefault((name, version), Package("pypi", name, version, PackageURL("pypi", None, name, version).to_string()))
    return list(seen.values())


def image_contents(inventory: Mapping[str, Any]) -> Contents:
    """An image inventory (buildkit/image/inventory.py's JSON) as sorted package records."""
    os_release = inventory.get("os") or {}
    os_id, os_version = os_release.get("id", ""), os_release.get("version_id", "")
    packages = deb_packages(inventory.get("dpkg_status") or "", os_id, os_version) + pypi_packages(inventory.get("distributions"))
    return Contents(
        os_id,
        os_version,
        os_release.get("pretty_name", ""),
        inventory.get("python", ""),
        tuple(sorted(packages, key=lambda p: (p.ecosystem, p.name, p.version))),
    )
