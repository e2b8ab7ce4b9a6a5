"""Bounded HTTP for the registry client.

Every exchange ends by a deadline, no body is read past a cap, and an Authorization header never leaves the
origin it was meant for.

requests alone gives none of these. Its timeout is per socket read, so a server trickling a byte a second
holds a request for ever; it reads whole bodies into memory; and after a redirect it re-sends headers we
set ourselves (Session.rebuild_auth strips only what `auth=` set). So here redirects are followed one hop
at a time, bodies are streamed against a cap, and a watchdog shuts the socket down at the deadline, which
also covers a server that trickles its status line or headers (the watchdog, the body cap and Retry-After
are bounded_http's, shared with every other client).
"""

from __future__ import annotations

import ipaddress
import re
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import urljoin

import requests
import requests.utils
import urllib3.exceptions
import urllib3.util
from requests.auth import AuthBase

from buildkit.adapters.bounded_http import (
    ERROR_BODY_LIMIT,
    MAX_REDIRECTS,
    MAX_RETRY_AFTER,
    Expired,
    RetryWaits,
    TooLarge,
    Watchdog,
    WatchedAdapter,
    backoff_seconds,
    hopeless,
    read_body,
)
from buildkit.errors import Problem, UserError, printable

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

__all__ = [
    "MAX_PAGES",
    "MAX_RETRY_AFTER",
    "Origin",
    "RegistryError",
    "RegistryUnreachable",
    "Reply",
    "Transport",
    "UnsafeUrl",
    "Url",
    "is_loopback",
    "parse_url",
    "registry_is_loopback",
    "resolve",
]

MAX_PAGES = 1000  # a registry's tag list or an API listing longer than this is not one we should walk
_REDIRECTS = (301, 302, 303, 307, 308)


class RegistryError(UserError):
    """The registry refused or failed a request, or answered something unusable: what, which registry,
    which request, and what to do."""


class RegistryUnreachable(RegistryError):
    """No answer from the registry (refused, unresolvable, stalled, cut short): a failure of the
    environment (exit 1), not of the input."""

    exit_code = 1


# --- URLs: one parse, by the library that connects -------------------------------------------------------

# Hosts as a registry, token service or API names them: DNS names and IPv4 (letters, digits, . _ -), or an
# IPv6 literal in brackets without a zone. Anything else (percent-encoding, a zone, IDNA) is refused.
_HOST_RE = re.compile(r"[a-z0-9._-]+|\[[0-9a-f:.]+\]")
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class Origin:
    """Scheme, host and port: the unit that credentials are bound to."""

    scheme: str
    host: str  # lowercase; an IPv6 address without its brackets
    port: int

    @classmethod
    def of(cls, scheme: str, host: str, port: int | None) -> Origin:
        scheme = scheme.lower()
        return cls(scheme, host.lower().removeprefix("[").removesuffix("]"), port or _DEFAULT_PORTS.get(scheme, 0))

    @property
    def loopback(self) -> bool:
        return is_loopback(self.host)

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def is_loopback(host: str) -> bool:
    """Whether a host name or address is this machine: localhost, 127.0.0.0/8 or ::1 (the one rule the
    registry client and cosign share for plain http)."""
    host = host.lower().removeprefix("[").removesuffix("]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def registry_is_loopback(registry: str) -> bool:
    """Whether a registry address (host[:port]) is on this machine; False for anything that is no address."""
    try:
        return parse_url(f"http://{registry}").origin.loopback
    except UnsafeUrl:
        return False


class UnsafeUrl(Exception):
    """A URL the client will not follow; `reason` says why, as in "the URL ... {reason}"."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Url:
    """A URL as the connection layer reads it: `text` is urllib3's own rendering of its parse (what is
    requested), `origin` the scheme, host and port that parse names."""

    text: str
    origin: Origin

    @property
    def path(self) -> str:
        """Path and query, as messages name a request (never a host's user-info)."""
        parts = urllib3.util.parse_url(self.text)
        return (parts.path or "/") + (f"?{parts.query}" if parts.query is not None else "")


def parse_url(text: str) -> Url:
    """An http(s) URL read once, by urllib3's parser (the one requests prepares every request with), and
    refused when its authority could be read another way. Parsers disagree exactly where a URL is written
    unusually: a backslash (WHATWG reads it as "/", urllib3 as part of the path, urllib.parse as part of the
    host), user-info before an "@" (the host is what follows it, for some), a port with leading zeros, a
    sign or no digits, percent-encoded or IDNA hosts. So the authority must be written the one plain way,
    scheme://host[:port], exactly as urllib3 renders what it parsed; then every reader agrees on it."""
    _check_characters(text)
    try:
        parts = urllib3.util.parse_url(text)
    except urllib3.exceptions.LocationParseError:
        raise UnsafeUrl("is not a URL (its host or port does not parse)") from None
    if parts.scheme not in _DEFAULT_PORTS:
        raise UnsafeUrl("is not an http(s) URL")
    if parts.auth is not None:
        raise UnsafeUrl(
            "names user-info before its host (user@host), which parsers split differently; credentials "
            "come only from the registry's credentials, never from a URL"
        )
    if not parts.host or not _HOST_RE.fullmatch(parts.host):
        raise UnsafeUrl("has no plain host name or address")
    if parts.port == 0:
        raise UnsafeUrl("names port 0")
    authority = f"{parts.scheme}://{parts.host}" + (f":{parts.port}" if parts.port is not None else "")
    rest = text[len(authority) :]
    if text[: len(authority)].lower() != authority or (rest and rest[0] not in "/?#"):
        raise UnsafeUrl(f"writes its authority unusually (expected {authority} exactly: a port without leading zeros, no empty port)")
    canonical = parts._replace(fragment=None).url  # a fragment is never sent
    return Url(canonical, Origin.of(parts.scheme, parts.host, parts.port))


def _check_characters(text: str) -> None:
    if not (text.isascii() and text.isprintable()) or " " in text:
        raise UnsafeUrl("holds spaces, control or non-ASCII characters (a URL carries them percent-encoded)")
    if "\\" in text:
        raise UnsafeUrl('holds a backslash, which URL parsers read differently (as "/", or as part of the host)')


def resolve(base: Url, reference: str) -> Url:
    """A Location or Link reference resolved against the URL it came with (as requests resolves a
    redirect), then parsed like any URL. The reference is checked first: urljoin drops tabs and newlines
    a server could use to write one host and have another read."""
    reference = reference.strip(" ")
    _check_characters(reference)
    try:
        return parse_url(urljoin(base.text, reference))
    except ValueError:  # urljoin: "http://[::1" and the like
        raise UnsafeUrl("is not a URL") from None


@dataclass(frozen=True)
class Reply:
    """A whole answer, its body read within the cap and the deadline."""

    status: int
    headers: Mapping[str, str]  # case-insensitive
    body: bytes
    url: Url  # after redirects

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


# --- credentials bound to an origin ------------------------------------------------------------------

_current = threading.local()  # the grant of the exchange this thread is in, if any


@dataclass(frozen=True)
class _Grant:
    """The Authorization value of the exchange this thread is in, and the one origin it may reach."""

    authorization: str
    origin: Origin


class _GrantingAdapter(WatchedAdapter):
    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: float | tuple[float, float] | tuple[float, None] | None = None,
        verify: bool | str = True,
        cert: bytes | str | tuple[bytes | str, bytes | str] | None = None,
        proxies: Mapping[str, str] | None = None,
    ) -> requests.Response:
        """The exchange's Authorization is attached here, the last step before urllib3 takes a connection, and
        only when the scheme, host and port that requests hands urllib3 for this very request are the origin
        it is bound to (the same values serve a direct connection, a tunnel through a proxy and a proxy that
        forwards). requests picks the connection from its own reading of the prepared URL: whatever the
        URL's text seemed to say, the credential goes where the connection goes, or nowhere."""
        request.headers.pop("Authorization", None)
        grant: _Grant | None = getattr(_current, "grant", None)
        if grant is not None:
            try:
                # types-requests lets send() take a bytes cert that this method's stub leaves out; requests hands it on as it is
                destination, _ = self.build_connection_pool_key_attributes(request, verify, cert)  # type: ignore[arg-type]
            except ValueError:  # requests refuses the URL below, without anything to attach
                destination = None
            if destination and Origin.of(destination["scheme"], destination["host"] or "", destination["port"]) == grant.origin:
                request.headers["Authorization"] = grant.authorization
        return super().send(request, stream=stream, timeout=timeout, verify=verify, cert=cert, proxies=proxies)


class _Session(requests.Session):
    """Redirects are followed by Transport, one hop at a time; requests must not look at them at all (even
    with allow_redirects=False it parses Location for Response.next, and a Location that is not UTF-8
    raises UnicodeDecodeError there)."""

    def get_redirect_target(self, response: requests.Response) -> None:
        return None


class _NoNetrc(AuthBase):
    """Set as the session's auth so that requests never adds ~/.netrc credentials for whatever host a
    registry names: credentials are decided here, per origin, and nowhere else."""

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        return request


# --- the transport ---------------------------------------------------------------------------------------


class _CutShort(Exception):
    pass


class Transport:
    """One session for one registry and the services it names (token realm, GitHub API), with the
    run's bounds: `timeout` seconds per exchange (redirects and body included), `budget` seconds of
    request time over the whole run, `retries` on connection failures, 429 and 5xx. A connection that
    is refused, or a host name that does not resolve, fails at once: waiting seconds would not change
    either. Waits to retry are bounded one by one and in all (bounded_http.RetryWaits), and a long one is
    announced through `notify`, saying what is retried. `clock` is what the budget and deadlines are measured on."""

    def __init__(
        self,
        name: str,
        timeout: float = 30.0,
        budget: float = 1800.0,
        retries: int = 5,
        backoff: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        ca_bundle: str | None = None,
        notify: Callable[[str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        retry_wait: float | None = None,
    ) -> None:
        self.name = name
        self.timeout, self.budget, self.retries, self.backoff, self.clock = timeout, budget, retries, backoff, clock
        self.waits = RetryWaits(retry_wait, sleep, notify)
        self.session = _Session()
        self.session.mount("http://", _GrantingAdapter())
        self.session.mount("https://", _GrantingAdapter())
        self.session.auth = _NoNetrc()
        # No compressed answers: a small gzip body can inflate past any cap before a check runs.
        self.session.headers["Accept-Encoding"] = "identity"
        # Passed with every request: a session's `verify` loses to $REQUESTS_CA_BUNDLE, an explicit one does not.
        self.verify: str | bool = ca_bundle or True
        self.lock = threading.Lock()
        self.secrets: set[str] = set()  # never in a message, whatever a server echoes back
        self.requests = 0  # every HTTP exchange: retries, redirects and token fetches included
        self.spent = 0.0  # seconds spent in requests, against the budget

    def error(self, call: str, why: str, kind: type[RegistryError] = RegistryError) -> RegistryError:
        message = f"{call}: {why}"
        for secret in sorted(self.secrets, key=len, reverse=True):
            message = message.replace(secret, "****")
        return kind(Problem(self.name, message))

    def url(self, text: str, call: str) -> Url:
        """A URL to request, parsed once (parse_url); one that is refused is a RegistryError saying why."""
        try:
            return parse_url(text)
        except UnsafeUrl as unsafe:
            raise self.error(call, f"the URL {printable(text, 160)!r} {unsafe.reason}; not requested") from None

    def delay(self, attempt: int, retry_after: str | None) -> float:
        return backoff_seconds(self.backoff, attempt, retry_after)

    def send(
        self,
        method: str,
        url: str | Url,
        *,
        limit: int,
        headers: Mapping[str, str] | None = None,
        data: bytes | None = None,
        authorization: str | None = None,
        bound_to: Origin | None = None,
        call: str | None = None,
    ) -> Reply:
        """One request, retried on connection failures, 429 and 5xx (backoff with jitter, Retry-After).
        `authorization` goes only to the origin `bound_to` (redirects elsewhere go without it).
        A 2xx body beyond `limit` bytes is refused; an error body is read to a small cap and cut."""
        target = url if isinstance(url, Url) else self.url(url, call or f"{method} {printable(url, 160)}")
        call = call or f"{method} {target.path}"
        grant = _Grant(authorization, bound_to) if authorization and bound_to else None
        started = self.clock()
        try:
            for attempt in range(self.retries + 1):
                try:
                    reply = self._follow(method, target, headers or {}, data, grant, limit, call)
                except (requests.ConnectionError, _CutShort) as error:
                    if isinstance(error, requests.exceptions.SSLError):
                        raise self.error(
                            call,
                            "the TLS connection failed (certificate not trusted, or not a TLS server); "
                            "for a registry with a private CA, set $REQUESTS_CA_BUNDLE to its CA bundle",
                        ) from None
                    why_hopeless = hopeless(error)
                    if why_hopeless:
                        raise self.error(
                            call,
                            f"cannot connect to {target.origin}: {why_hopeless}; check that the registry is up and the address is right",
                            RegistryUnreachable,
                        ) from None
                    what = "the answer was cut short" if isinstance(error, _CutShort) else "cannot reach the registry"
                    if attempt == self.retries:
                        attempts = f"{self.retries + 1} attempts" if self.retries else "1 attempt"
                        raise self.error(
                            call, f"{what} ({type(error).__name__}) after {attempts}; check that it is up and the address is right", RegistryUnreachable
                        ) from None
                    self._pause(self.delay(attempt, None), call, what, attempt)
                    continue
                if (reply.status == 429 or reply.status >= 500) and attempt < self.retries:
                    self._pause(self.delay(attempt, reply.headers.get("Retry-After")), call, f"it answered {reply.status}", attempt)
                    continue
                return reply
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            with self.lock:
                self.spent += self.clock() - started

    def _pause(self, seconds: float, call: str, what: str, attempt: int) -> None:
        self.waits.pause(
            seconds,
            subject=f"{self.name}: {call}",
            what=what,
            attempt=attempt,
            attempts=self.retries + 1,
            refuse=lambda why: self.error(call, why),
            left=self.budget - self.spent,
            passes=f"the registry keeps failing and the run's budget of {self.budget:g} s for registry "
            "requests would be spent waiting to retry; try again later",
        )

    def _follow(self, method: str, url: Url, headers: Mapping[str, str], data: bytes | None, grant: _Grant | None, limit: int, call: str) -> Reply:
        """The request and its redirects, all within one deadline."""
        left = self.budget - self.spent
        if left <= 0:
            raise self.error(
                call, f"the run's budget of {self.budget:g} s for registry requests is spent; the registry is too slow or keeps stalling", RegistryUnreachable
            )
        seconds = min(self.timeout, left)
        deadline = self.clock() + seconds
        within = f"{seconds:g} s" if seconds == self.timeout else f"the {seconds:.1f} s left of the run's budget of {self.budget:g} s"
        for _ in range(MAX_REDIRECTS + 1):
            try:
                # The grant travels only to a URL whose one parse names its origin; the adapter then checks that
                # the connection goes there too.
                reply = self._exchange(method, url, headers, data, deadline, limit, grant if grant and url.origin == grant.origin else None)
            except Expired:
                raise self.error(
                    call,
                    f"no complete answer within {within} (the server stalls or sends too slowly); try again later, or check the registry",
                    RegistryUnreachable,
                ) from None
            except TooLarge:
                raise self.error(
                    call, f"the answer is larger than {limit // 1024} KiB, far beyond what this request returns by spec; refusing to read it"
                ) from None
            except requests.exceptions.InvalidHeader:
                raise self.error(call, "the request would carry an invalid header (a token or credential with control characters?)") from None
            except requests.RequestException as error:
                if isinstance(error, requests.ConnectionError):
                    raise  # retried by send()
                raise self.error(call, f"the request failed ({type(error).__name__})") from None
            if reply.status not in _REDIRECTS or "Location" not in reply.headers:
                return reply
            location = reply.headers["Location"]
            try:
                url = resolve(url, location)
            except UnsafeUrl as unsafe:
                raise self.error(call, f"redirected to {printable(location, 120)!r}, which {unsafe.reason}; not followed") from None
            if reply.status == 303 or (reply.status in (301, 302) and method == "POST"):
                method, data = ("HEAD" if method == "HEAD" else "GET"), None
        raise self.error(call, f"more than {MAX_REDIRECTS} redirects")

    def _exchange(self, method: str, url: Url, headers: Mapping[str, str], data: bytes | None, deadline: float, limit: int, grant: _Grant | None) -> Reply:
        with self.lock:
            self.requests += 1
        remaining = deadline - self.clock()
        if remaining <= 0:
            raise Expired
        with Watchdog(remaining) as watchdog:
            _current.grant = grant
            try:
                response = self.session.request(
                    method, url.text, headers=dict(headers), data=data, stream=True, verify=self.verify, allow_redirects=False, timeout=(remaining, remaining)
                )
            except requests.Timeout:
                raise Expired from None
            except requests.ConnectionError:
                if watchdog.fired:
                    raise Expired from None
                raise
            finally:
                _current.grant = None
            try:
                body = read_body(response, limit if response.ok else min(limit, ERROR_BODY_LIMIT), deadline, not response.ok, self.clock)
            except (requests.RequestException, _CutShort):
                if watchdog.fired or self.clock() >= deadline:
                    raise Expired from None
                raise _CutShort from None
            finally:
                response.close()
        return Reply(response.status_code, response.headers, body, url)

    def pages(self, first: Url, fetch: Callable[[Url], Reply], call: str) -> Iterator[Reply]:
        """A paginated listing: the first URL, then each `Link: <...>; rel="next"`, only on the first URL's
        origin, at most MAX_PAGES pages, and never a page twice (a Link that points back loops for ever)."""
        url, seen = first, set()
        for _ in range(MAX_PAGES):
            seen.add(url)
            reply = fetch(url)
            yield reply
            link = next(
                (entry.get("url", "") for entry in requests.utils.parse_header_links(reply.headers.get("Link", "")) if entry.get("rel") == "next"), None
            )
            if not link:
                return
            try:
                following = resolve(url, link)
            except UnsafeUrl as unsafe:
                raise self.error(call, f"the Link to the next page, {printable(link, 120)!r}, {unsafe.reason}; not followed") from None
            if following.origin != first.origin:
                raise self.error(call, f"the next page is on another origin ({printable(following.text, 120)}); a listing is only followed on {first.origin}")
            if following in seen:
                raise self.error(call, "the Link header points back to a page already read; the listing loops")
            url = following
        raise self.error(call, f"more than {MAX_PAGES} pages; refusing to follow the listing further")
