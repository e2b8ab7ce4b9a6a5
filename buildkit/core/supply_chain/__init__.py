"""The supply chain's pure side: what an image's attestations, provenance and SBOM say.

- attestation: the GPU smoke test as an in-toto predicate, and the judge of a verified one;
- provenance: BuildKit's SLSA provenance read into the facts `verify` shows;
- sbom: what is in an image, as package records with Package URLs.
"""
