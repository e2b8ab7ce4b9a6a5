"""The supply chain in the world: signatures, SBOMs and BuildKit's attestations.

Signatures and attestations through cosign (cosign), an image's SBOM read in a short container (sbom), and
BuildKit's own attestations in a registry (provenance).
"""
