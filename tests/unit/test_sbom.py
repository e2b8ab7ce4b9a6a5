"""SBOM contents: dpkg's real status database of this machine, the real inventory script, purls, and the
CycloneDX document checked against the official 1.5 schema."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from buildkit.adapters.supply_chain.sbom import cyclonedx, inventory_source
from buildkit.core.supply_chain.sbom import Contents, deb_packages, image_contents, parse_dpkg_status, pypi_packages

STATUS = Path("/var/lib/dpkg/status")

CRAFTED = """\
Package: libc6
Status: install ok installed
Priority: optional
Architecture: amd64
Multi-Arch: same
Source: glibc (2.36-9+deb12u14)
Version: 2.36-9+deb12u14
Description: GNU C Library: Shared libraries
 Contains the standard libraries that are used by nearly all programs on
 the system.

Package: zlib1g
Status: install ok installed
Architecture: amd64
Source: zlib
Version: 1:1.2.13.dfsg-1

Package: old-tool
Status: deinstall ok config-files
Architecture: amd64
Version: 0.9-1

Package: half-installed
Status: install reinstreq half-installed
Architecture: all
Version: 1.0
"""


def test_dpkg_paragraphs_keep_continuation_lines():
    paragraphs = parse_dpkg_status(CRAFTED)
    assert [p["Package"] for p in paragraphs] == ["libc6", "zlib1g", "old-tool", "half-installed"]
    assert paragraphs[0]["Description"].endswith("the system.")
    assert "\n" in paragraphs[0]["Description"]


def test_only_installed_packages_with_purls():
    packages = deb_packages(CRAFTED, "debian", "12")
    assert [(p.name, p.version, p.arch, p.source) for p in packages] == [
        ("libc6", "2.36-9+deb12u14", "amd64", "glibc"),
        ("zlib1g", "1:1.2.13.dfsg-1", "amd64", "zlib"),
    ]
    assert packages[0].purl == "pkg:deb/debian/libc6@2.36-9%2Bdeb12u14?arch=amd64&distro=debian-12"
    assert packages[1].purl.startswith("pkg:deb/debian/zlib1g@1:1.2.13.dfsg-1?")


def test_ubuntu_packages_get_the_ubuntu_namespace():
    assert deb_packages(CRAFTED, "ubuntu", "24.04")[0].purl.startswith("pkg:deb/ubuntu/libc6@")


@pytest.mark.skipif(not STATUS.exists() or not shutil.which("dpkg-query"), reason="not a dpkg-based machine")
def test_this_machines_status_database_matches_dpkg_query():
    query = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${Status}\n"], capture_output=True, text=True, check=True)
    expected = {tuple(line.split("\t")[:2]) for line in query.stdout.splitlines() if line.endswith("\tinstall ok installed")}
    found = {(p.name, p.version) for p in deb_packages(STATUS.read_text(errors="replace"), "debian", "12")}
    assert found == expected
    assert len(found) > 50


def test_python_distributions_are_normalised_and_listed_once():
    packages = pypi_packages(
        [
            {"name": "Typing_Extensions", "version": "4.12.2"},
            {"name": "typing-extensions", "version": "4.12.2"},
            {"name": "zope.interface", "version": "7.0"},
            {"name": "", "version": "1"},
            "junk",
        ]
    )
    assert [(p.name, p.purl) for p in packages] == [
        ("typing-extensions", "pkg:pypi/typing-extensions@4.12.2"),
        ("zope-interface", "pkg:pypi/zope-interface@7.0"),
    ]


def test_the_inventory_script_reads_a_real_python_environment():
    """The script the SBOM runs inside images, run here by this venv's Python."""
    result = subprocess.run([sys.executable, "-c", inventory_source()], capture_output=True, text=True, check=True, timeout=60)
    inventory = json.loads(result.stdout)
    contents = image_contents(inventory)
    names = {p.name for p in contents.packages if p.ecosystem == "pypi"}
    assert {"pytest", "cyclonedx-python-lib", "packageurl-python"} <= names
    assert contents.python == ".".join(map(str, sys.version_info[:3]))
    if STATUS.exists():
        assert any(p.ecosystem == "deb" for p in contents.packages)
    assert list(contents.packages) == sorted(contents.packages, key=lambda p: (p.ecosystem, p.name, p.version))


def test_the_cyclonedx_document_is_valid_and_describes_the_image():
    contents = Contents(
        "debian",
        "12",
        "Debian GNU/Linux 12 (bookworm)",
        "3.11.2",
        tuple(deb_packages(CRAFTED, "debian", "12") + pypi_packages([{"name": "torch", "version": "2.14.1+rocm7.2"}])),
    )
    labels = {"dev.buildkit.target": "2.14.1-rocm7.2-py3.11-runtime", "dev.buildkit.vendor": "amd", "maintainer": "someone", "dev.buildkit.pair": ""}
    document = cyclonedx(contents, "127.0.0.1:5000/team/pytorch", "sha256:" + "a" * 64, labels)
    assert JsonStrictValidator(SchemaVersion.V1_5).validate_str(json.dumps(document)) is None
    assert document["bomFormat"] == "CycloneDX" and document["specVersion"] == "1.5"
    root = document["metadata"]["component"]
    assert (root["type"], root["name"], root["version"]) == ("container", "127.0.0.1:5000/team/pytorch", "sha256:" + "a" * 64)
    # the image's own labels, not unrelated or empty ones
    assert {p["name"]: p["value"] for p in root["properties"]} == {"dev.buildkit.target": "2.14.1-rocm7.2-py3.11-runtime", "dev.buildkit.vendor": "amd"}
    purls = {c["name"]: c.get("purl") for c in document["components"]}
    assert purls == {
        "debian": None,
        "libc6": "pkg:deb/debian/libc6@2.36-9%2Bdeb12u14?arch=amd64&distro=debian-12",
        "zlib1g": "pkg:deb/debian/zlib1g@1:1.2.13.dfsg-1?arch=amd64&distro=debian-12",
        "torch": "pkg:pypi/torch@2.14.1%2Brocm7.2",
    }
    described = next(d for d in document["dependencies"] if d["ref"] == root["bom-ref"])
    assert len(described["dependsOn"]) == 4
    assert document["metadata"]["tools"]["components"][0]["name"] == "buildkit"
