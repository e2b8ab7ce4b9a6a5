"""An image reference split the way the distribution spec and docker do: registry, repository, tag, digest."""

from __future__ import annotations

from dataclasses import dataclass

from buildkit.core import grammar


@dataclass(frozen=True)
class ImageReference:
    registry: str  # "" when the reference names none (docker's default, Docker Hub)
    repository: str
    tag: str = ""
    digest: str = ""

    @classmethod
    def parse(cls, text: str) -> ImageReference | None:
        """None when text is not a valid reference."""
        if grammar.image_reference(text) is not None:
            return None
        rest, _, digest = text.partition("@")
        first, slash, remainder = rest.partition("/")
        # docker's rule: the first component is a registry when it has a dot or a port, or is localhost
        registry = first if slash and ("." in first or ":" in first or first == "localhost") else ""
        path = remainder if registry else rest
        repository, _colon, tag = path.rpartition(":") if ":" in path else (path, "", "")
        return cls(registry, repository, tag, digest)

    @property
    def name(self) -> str:
        """registry/repository: what a digest is appended to."""
        return f"{self.registry}/{self.repository}" if self.registry else self.repository

    @property
    def version(self) -> str:
        """The digest when pinned, else the tag (docker's default: latest)."""
        return self.digest or self.tag or "latest"

    def pinned(self, digest: str) -> str:
        """registry/repository@digest: what cosign signs and verifies (a tag can move between two calls)."""
        return f"{self.name}@{digest}"

    def __str__(self) -> str:
        return self.name + (f":{self.tag}" if self.tag else "") + (f"@{self.digest}" if self.digest else "")
