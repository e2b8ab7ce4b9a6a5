"""Deleting a manifest, as the registry allows: retention's capability layer.

The distribution API's manifest DELETE is optional; a registry may answer 405. ghcr.io does, and deletes
through the GitHub Packages REST API instead, where a container image's manifest is a "package version"
whose `name` is the manifest digest. The endpoints (https://docs.github.com/en/rest/packages/packages,
API version 2022-11-28):

  GET    /orgs/{org}/packages/container/{package_name}/versions           List package versions for a package
         owned by an organization (paginated: per_page <= 100, Link rel="next"); each version has `id`
         (integer), `name` (the digest) and `metadata.container.tags`.
  DELETE /orgs/{org}/packages/container/{package_name}/versions/{package_version_id}   Delete package
         version for an organization: 204.
  ... and the same under /users/{username}/ for a package owned by a user.

A package name with slashes (team/pytorch) is URL-encoded (team%2Fpytorch). The token is the registry
password (GITHUB_TOKEN with `packages: write`, or a classic token with read:packages and delete:packages),
sent as a Bearer token to the API's origin only, under credentials.py's rules.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from buildkit.adapters.registry.client import DeletionUnsupported, Registry
from buildkit.adapters.registry.credentials import may_receive_credentials
from buildkit.adapters.registry.transport import RegistryError, Reply, UnsafeUrl, parse_url
from buildkit.errors import Problem, printable

GITHUB_API = "https://api.github.com"
GITHUB_REGISTRY = "ghcr.io"
API_LIMIT = 4 * 1024 * 1024  # one page of up to 100 versions
_API_HEADERS = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"}


class RetentionUnsupported(RegistryError):
    """The registry offers no way to delete a manifest."""


class GitHubPackages:
    """Deletes container package versions through the GitHub REST API (see the module docstring)."""

    def __init__(self, registry: Registry, api: str = GITHUB_API) -> None:
        try:
            origin = parse_url(api).origin
        except UnsafeUrl as unsafe:
            raise RegistryError(Problem(registry.registry, f"the GitHub API address {printable(api, 160)!r} {unsafe.reason}")) from None
        self.registry, self.api, self.origin = registry, api.rstrip("/"), origin
        self.owners: dict[str, str] = {}  # owner -> "orgs" or "users", once known

    def delete(self, repository: str, digest: str) -> None:
        owner, _, package = repository.partition("/")
        if not package:
            raise self._error(f"DELETE {repository}@{digest}", "a ghcr.io repository is OWNER/PACKAGE; this one names no package")
        authorization = self._authorization()
        version, base = self._find(owner, package, digest, authorization)
        url = self.registry.transport.url(f"{base}/{version}", f"DELETE {repository}@{digest}")
        reply = self.registry.transport.send("DELETE", url, limit=API_LIMIT, headers=_API_HEADERS, authorization=authorization, bound_to=self.origin)
        if reply.status != 204:
            self._refused(f"DELETE {url.path}", reply)

    def _authorization(self) -> str:
        credentials = self.registry.credentials
        call = f"GitHub Packages API at {self.origin}"
        if credentials is None or not credentials.password:
            raise self._error(call, "deleting on ghcr.io needs a token: give GITHUB_TOKEN (packages: write) as the registry password")
        if not may_receive_credentials(self.registry.origin, self.origin):
            raise self._error(
                call,
                f"refusing to send the registry's token to {self.origin}: only over https "
                "(or plain http when the registry and the API are both on this machine)",
            )
        return f"Bearer {credentials.password}"

    def _find(self, owner: str, package: str, digest: str, authorization: str) -> tuple[int, str]:
        """(version id, versions URL) of the package version named `digest`: the owner as an organization
        first, then as a user (the API has one path for each; which one it is, is remembered)."""
        kinds = [self.owners[owner]] if owner in self.owners else ["orgs", "users"]
        for kind in kinds:
            base = f"{self.api}/{kind}/{quote(owner, safe='')}/packages/container/{quote(package, safe='')}/versions"
            first = self.registry.transport.url(f"{base}?per_page=100", f"GET {owner}/{package} versions")
            call = f"GET {first.path}"
            fetch = lambda url: self.registry.transport.send(  # noqa: E731
                "GET", url, limit=API_LIMIT, headers=_API_HEADERS, authorization=authorization, bound_to=self.origin
            )
            for reply in self.registry.transport.pages(first, fetch, call):
                if reply.status == 404 and kind != kinds[-1]:
                    break  # not an organization: try the user
                if reply.status != 200:
                    self._refused(call, reply)
                self.owners[owner] = kind
                for version in _versions(self, call, reply):
                    if version["name"] == digest:
                        return version["id"], base
            else:
                raise self._error(call, f"the package {owner}/{package} has no version {digest}")
        raise AssertionError("unreachable")  # pragma: no cover

    def _error(self, call: str, why: str) -> RegistryError:
        return self.registry.transport.error(call, why)

    def _refused(self, call: str, reply: Reply) -> None:
        if reply.status == 401:
            why = "the GitHub API refused the token (401); give a valid GITHUB_TOKEN as the registry password"
        elif reply.status == 403:
            why = (
                "the token may not delete this package version (403): GITHUB_TOKEN needs `permissions: packages: write` "
                "and admin access to the package, a classic token read:packages and delete:packages"
            )
        elif reply.status == 404:
            why = "the GitHub API knows no such package (404): check the owner and the package name, and the token's access"
        else:
            why = f"the GitHub API answered {reply.status}"
        raise self._error(call, why)


def _versions(packages: GitHubPackages, call: str, reply: Reply) -> list[dict[str, Any]]:
    """One page of package versions, checked: a list of objects with an integer `id` and a string `name`."""
    try:
        document = json.loads(reply.body.decode("utf-8"))
    except (ValueError, RecursionError):
        raise packages._error(call, "the GitHub API answered something that is not JSON") from None
    if not isinstance(document, list) or not all(isinstance(v, dict) and type(v.get("id")) is int and isinstance(v.get("name"), str) for v in document):
        raise packages._error(call, 'expected a list of package versions, each with an integer "id" and a "name"')
    return document


class Deletion:
    """Deletes manifests by digest: the distribution API's DELETE, and behind it the GitHub Packages API
    where there is one. Once the registry has refused a DELETE, the fallback is used straight away."""

    def __init__(self, registry: Registry, github: GitHubPackages | None = None) -> None:
        self.registry, self.github = registry, github
        self.refusal: str | None = None  # the registry's answer to a DELETE, once it refused one

    def delete(self, repository: str, digest: str) -> None:
        if self.refusal is None:
            try:
                self.registry.delete_manifest(repository, digest)
                return
            except DeletionUnsupported as refused:
                self.refusal = refused.problems[0].message
        if self.github is None:
            raise RetentionUnsupported(
                Problem(
                    self.registry.registry,
                    (
                        f"{self.refusal}. The registry supports no deletion, so retention (--keep) cannot remove old nightly "
                        "tags: run publish without --keep, or enable deletion in the registry (docker-registry: "
                        "storage.delete.enabled: true)"
                    ),
                )
            )
        self.github.delete(repository, digest)


def deletion_for(registry: Registry, github_api: str | None = None) -> Deletion:
    """The deletion capability of `registry`: the GitHub Packages API behind the DELETE for ghcr.io, or
    for any registry given `github_api` (tests point it at a fake API on 127.0.0.1)."""
    if github_api is None and registry.origin.host == GITHUB_REGISTRY:
        github_api = GITHUB_API
    return Deletion(registry, GitHubPackages(registry, github_api) if github_api else None)
