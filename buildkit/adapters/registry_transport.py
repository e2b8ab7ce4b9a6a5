"""Bounded HTTP for the registry client: every exchange ends by a deadline, no body is read past a cap,
and an Authorization header never leaves the origin it was meant for.

requests alone gives none of these. Its timeout is per socket read, so a server trickling a byte a second
holds a request for ever; it reads whole bodies into memory; and after a redirect it re-sends headers we
set ourselves (Session.rebuild_auth strips only what `auth=` set). So here redirects are followed one hop
at a time, bodies are streamed against a cap, and a watchdog shuts the socket down at the deadline, which
also covers a server that trickles its status line or headers.
"""

from __future__ import annotations

import ipaddress
import random
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping
from urllib.parse import urljoin, urlsplit

import requests
import requests.utils
import urllib3.connection
import urllib3.poolmanager
from requests.adapters import HTTPAdapter
from requests.auth import AuthBase
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from buildkit.errors import Problem, UserError

MAX_REDIRECTS = 5
MAX_PAGES = 1000  # a registry's tag list or an API listing longer than this is not one we should walk
MAX_RETRY_AFTER = 60.0  # seconds: a Retry-After beyond this is not honoured as given
ERROR_BODY_LIMIT = 64 * 1024  # of an error answer we show 200 characters; read no more than this
_CHUNK = 64 * 1024
_REDIRECTS = (301, 302, 303, 307, 308)


class RegistryError(UserError):
    """The registry refused or failed a request, or answered something unusable: what, which registry,
    which request, and what to do."""


def shown(text: str, limit: int = 200) -> str:
    """Text from a server, made safe to print: no control characters (a terminal escape sequence in an
    error body must not reach the user's terminal), at most `limit` characters."""
    cleaned = "".join(c if c.isprintable() else " " for c in text[: limit + 1]).strip()
    return cleaned if len(cleaned) <= limit else cleaned[:limit] + "…"


@dataclass(frozen=True)
class Origin:
    """Scheme, host and port: the unit that credentials are bound to."""

    scheme: str
    host: str
    port: int

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def origin_of(url: str) -> Origin | None:
    """The origin of an http(s) URL; None for anything else (another scheme, no host, a bad port, bytes
    outside printable ASCII: a URL from a header must be percent-encoded)."""
    if not (url.isascii() and url.isprintable()) or " " in url:
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return Origin(parts.scheme, parts.hostname.lower(), port or (443 if parts.scheme == "https" else 80))


def joined(base: str, reference: str) -> str | None:
    """A Location or Link reference resolved against the URL it came with; None when it is no usable
    http(s) URL."""
    try:
        url = urljoin(base, reference.strip())
    except ValueError:  # "http://[::1" and the like
        return None
    return url if origin_of(url) is not None else None


def path_of(url: str) -> str:
    """Path and query of a URL, as messages name a request (never its host's user-info)."""
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")


@dataclass(frozen=True)
class Reply:
    """A whole answer, its body read within the cap and the deadline."""

    status: int
    headers: Mapping[str, str]  # case-insensitive
    body: bytes
    url: str  # after redirects

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


# --- the deadline watchdog -------------------------------------------------------------------------------

_current = threading.local()  # the watchdog of the exchange this thread is in, if any


class _Watchdog:
    """Shuts down the sockets of this thread's exchange when its deadline passes. Socket timeouts are
    per read; shutting the socket down is what wakes a read blocked on a server that sends a byte a second.
    It holds the sockets, not the connections: for an answer that ends with the connection, http.client
    hands the socket over to the response and the connection forgets it."""

    def __init__(self, seconds: float):
        self.fired = False
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.timer = threading.Timer(max(seconds, 0.0), self._fire)
        self.timer.daemon = True

    def __enter__(self) -> "_Watchdog":
        _current.watchdog = self
        self.timer.start()
        return self

    def __exit__(self, *exc) -> None:
        self.timer.cancel()
        _current.watchdog = None

    def attach(self, connection: urllib3.connection.HTTPConnection) -> None:
        sock = getattr(connection, "sock", None)
        if sock is None:
            return
        with self.lock:
            self.sockets.append(sock)
            if self.fired:
                _shut(sock)

    def _fire(self) -> None:
        with self.lock:
            self.fired = True
            for sock in self.sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's: also under a TLS wrapper
    except OSError:
        pass


class _Watched:
    """A urllib3 connection that puts itself under the current exchange's watchdog: when it connects
    (new connections connect lazily, inside request) and when a pooled one is reused."""

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]
        watchdog = getattr(_current, "watchdog", None)
        if watchdog is not None:
            watchdog.attach(self)  # type: ignore[arg-type]

    def request(self, *args, **kwargs):
        watchdog = getattr(_current, "watchdog", None)
        if watchdog is not None:
            watchdog.attach(self)  # type: ignore[arg-type]
        return super().request(*args, **kwargs)  # type: ignore[misc]


class _WatchedHTTPConnection(_Watched, urllib3.connection.HTTPConnection):
    pass


class _WatchedHTTPSConnection(_Watched, urllib3.connection.HTTPSConnection):
    pass


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


_POOLS = {"http": _HTTPPool, "https": _HTTPSPool}


class _WatchedAdapter(HTTPAdapter):
    def init_poolmanager(self, *args, **kwargs) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, proxy, **proxy_kwargs):
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if manager.pool_classes_by_scheme is urllib3.poolmanager.pool_classes_by_scheme:  # not SOCKS: its own pools
            manager.pool_classes_by_scheme = _POOLS
        return manager


class _Session(requests.Session):
    """Redirects are followed by Transport, one hop at a time; requests must not look at them at all (even
    with allow_redirects=False it parses Location for Response.next, and a Location that is not UTF-8
    raises UnicodeDecodeError there)."""

    def get_redirect_target(self, response):
        return None


class _NoNetrc(AuthBase):
    """Set as the session's auth so that requests never adds ~/.netrc credentials for whatever host a
    registry names: credentials are decided here, per origin, and nowhere else."""

    def __call__(self, request):
        return request


# --- the transport ---------------------------------------------------------------------------------------


class _Expired(Exception):
    pass


class _TooLarge(Exception):
    pass


class _CutShort(Exception):
    pass


class Transport:
    """One session for one registry and the services it names (token realm, GitHub API), with the
    run's bounds: `timeout` seconds per exchange (redirects and body included), `budget` seconds of
    request time over the whole run, `retries` on connection failures, 429 and 5xx."""

    def __init__(
        self,
        name: str,
        timeout: float = 30.0,
        budget: float = 1800.0,
        retries: int = 5,
        backoff: float = 0.5,
        sleep: Callable[[float], None] = time.sleep,
        ca_bundle: str | None = None,
    ):
        self.name = name
        self.timeout, self.budget, self.retries, self.backoff, self.sleep = timeout, budget, retries, backoff, sleep
        self.session = _Session()
        self.session.mount("http://", _WatchedAdapter())
        self.session.mount("https://", _WatchedAdapter())
        self.session.auth = _NoNetrc()
        # No compressed answers: a small gzip body can inflate past any cap before a check runs.
        self.session.headers["Accept-Encoding"] = "identity"
        # Passed with every request: a session's `verify` loses to $REQUESTS_CA_BUNDLE, an explicit one does not.
        self.verify: str | bool = ca_bundle or True
        self.lock = threading.Lock()
        self.secrets: set[str] = set()  # never in a message, whatever a server echoes back
        self.requests = 0  # every HTTP exchange: retries, redirects and token fetches included
        self.spent = 0.0  # seconds spent in requests, against the budget

    def error(self, call: str, why: str) -> RegistryError:
        message = f"{call}: {why}"
        for secret in sorted(self.secrets, key=len, reverse=True):
            message = message.replace(secret, "****")
        return RegistryError(Problem(self.name, message))

    def delay(self, attempt: int, retry_after: str | None) -> float:
        if retry_after and retry_after.strip().isdigit():
            return min(float(retry_after.strip()), MAX_RETRY_AFTER)
        return self.backoff * (2**attempt) * (0.5 + random.random())

    def send(
        self,
        method: str,
        url: str,
        *,
        limit: int,
        headers: Mapping[str, str] | None = None,
        data: bytes | None = None,
        authorization: str | None = None,
        bound_to: Origin | None = None,
        call: str | None = None,
    ) -> Reply:
        """One request, retried on connection failures, 429 and 5xx (backoff with jitter, Retry-After).
        `authorization` goes only to URLs of the origin `bound_to` (redirects elsewhere go without it).
        A 2xx body beyond `limit` bytes is refused; an error body is read to a small cap and cut."""
        call = call or f"{method} {path_of(url)}"
        started = time.monotonic()
        try:
            for attempt in range(self.retries + 1):
                try:
                    reply = self._follow(method, url, headers or {}, data, authorization, bound_to, limit, call)
                except (requests.ConnectionError, _CutShort) as error:
                    if isinstance(error, requests.exceptions.SSLError):
                        raise self.error(call, "the TLS connection failed (certificate not trusted, or not a TLS server); "
                                               "for a registry with a private CA, set $REQUESTS_CA_BUNDLE to its CA bundle") from None
                    if attempt == self.retries:
                        what = "the answer was cut short" if isinstance(error, _CutShort) else "cannot reach the registry"
                        attempts = f"{self.retries + 1} attempts" if self.retries else "1 attempt"
                        raise self.error(call, f"{what} ({type(error).__name__}) after {attempts}; "
                                               "check that it is up and the address is right") from None
                    self._pause(self.delay(attempt, None), call)
                    continue
                if (reply.status == 429 or reply.status >= 500) and attempt < self.retries:
                    self._pause(self.delay(attempt, reply.headers.get("Retry-After")), call)
                    continue
                return reply
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            with self.lock:
                self.spent += time.monotonic() - started

    def _pause(self, seconds: float, call: str) -> None:
        if seconds >= self.budget - self.spent:
            raise self.error(call, f"the registry keeps failing and the run's budget of {self.budget:g} s for registry "
                                   "requests would be spent waiting to retry; try again later")
        self.sleep(seconds)

    def _follow(self, method, url, headers, data, authorization, bound_to, limit, call) -> Reply:
        """The request and its redirects, all within one deadline."""
        left = self.budget - self.spent
        if left <= 0:
            raise self.error(call, f"the run's budget of {self.budget:g} s for registry requests is spent; "
                                   "the registry is too slow or keeps stalling")
        seconds = min(self.timeout, left)
        deadline = time.monotonic() + seconds
        within = f"{seconds:g} s" if seconds == self.timeout else f"the {seconds:.1f} s left of the run's budget of {self.budget:g} s"
        for _ in range(MAX_REDIRECTS + 1):
            sent = dict(headers)
            if authorization and origin_of(url) == bound_to:
                sent["Authorization"] = authorization
            try:
                reply = self._exchange(method, url, sent, data, deadline, limit)
            except _Expired:
                raise self.error(call, f"no complete answer within {within} (the server stalls or sends too slowly); "
                                       "try again later, or check the registry") from None
            except _TooLarge:
                raise self.error(call, f"the answer is larger than {limit // 1024} KiB, far beyond what this request "
                                       "returns by spec; refusing to read it") from None
            except requests.exceptions.InvalidHeader:
                raise self.error(call, "the request would carry an invalid header (a token or credential with "
                                       "control characters?)") from None
            except requests.RequestException as error:
                if isinstance(error, requests.ConnectionError):
                    raise  # retried by send()
                raise self.error(call, f"the request failed ({type(error).__name__})") from None
            if reply.status not in _REDIRECTS or "Location" not in reply.headers:
                return reply
            target = joined(url, reply.headers["Location"])
            if target is None:
                raise self.error(call, f"redirected to {shown(reply.headers['Location'], 120)!r}, which is not an http(s) URL")
            if reply.status == 303 or (reply.status in (301, 302) and method == "POST"):
                method, data = ("HEAD" if method == "HEAD" else "GET"), None
            url = target
        raise self.error(call, f"more than {MAX_REDIRECTS} redirects")

    def _exchange(self, method, url, headers, data, deadline, limit) -> Reply:
        with self.lock:
            self.requests += 1
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise _Expired
        with _Watchdog(remaining) as watchdog:
            try:
                response = self.session.request(method, url, headers=headers, data=data, stream=True, verify=self.verify,
                                                allow_redirects=False, timeout=(remaining, remaining))
            except requests.Timeout:
                raise _Expired from None
            except requests.ConnectionError:
                if watchdog.fired:
                    raise _Expired from None
                raise
            try:
                body = _read(response, limit if response.ok else min(limit, ERROR_BODY_LIMIT), deadline, cut=not response.ok)
            except (requests.RequestException, _CutShort):
                if watchdog.fired or time.monotonic() >= deadline:
                    raise _Expired from None
                raise _CutShort from None
            finally:
                response.close()
        return Reply(response.status_code, response.headers, body, url)

    def pages(self, first: str, fetch: Callable[[str], Reply], origin: Origin, call: str) -> Iterator[Reply]:
        """A paginated listing: the first URL, then each `Link: <...>; rel="next"`, only on `origin`,
        at most MAX_PAGES pages, and never a page twice (a Link that points back loops for ever)."""
        url, seen = first, set()
        for _ in range(MAX_PAGES):
            seen.add(url)
            reply = fetch(url)
            yield reply
            link = next((entry.get("url", "") for entry in requests.utils.parse_header_links(reply.headers.get("Link", ""))
                         if entry.get("rel") == "next"), None)
            if not link:
                return
            following = joined(url, link)
            if following is None:
                raise self.error(call, f"the Link to the next page, {shown(link, 120)!r}, is not an http(s) URL")
            if origin_of(following) != origin:
                raise self.error(call, f"the next page is on another origin ({shown(following, 120)}); a listing "
                                       f"is only followed on {origin}")
            if following in seen:
                raise self.error(call, "the Link header points back to a page already read; the listing loops")
            url = following
        raise self.error(call, f"more than {MAX_PAGES} pages; refusing to follow the listing further")


def _read(response: requests.Response, limit: int, deadline: float, cut: bool) -> bytes:
    """The body, streamed: refused past `limit` bytes (or cut there, for error bodies whose start is all
    we show), and never past the deadline."""
    declared = response.headers.get("Content-Length", "").strip()
    if declared.isdigit() and int(declared) > limit and not cut:
        raise _TooLarge
    body = bytearray()
    for chunk in response.iter_content(_CHUNK):
        body += chunk
        if len(body) > limit:
            if cut:
                return bytes(body[:limit])
            raise _TooLarge
        if time.monotonic() >= deadline:
            raise _Expired
    return bytes(body)
