"""Bounded HTTP: what every client of a remote service here shares, so no answer can hold a command.

requests alone bounds nothing that matters against a hostile or broken server. Its timeout is per socket
read, so a server trickling a byte every few seconds holds a request for ever; it reads whole bodies into
memory; and a `Retry-After` is whatever the server says (an hour, a Unicode digit that `str.isdigit` accepts
and `float` refuses). Here:

- a watchdog shuts the socket down at the exchange's deadline, which also wakes a read blocked on a status
  line or headers sent a byte at a time (Watchdog, WatchedAdapter);
- bodies are streamed against a cap and the deadline (read_body);
- `Retry-After` is read as ASCII digits or an HTTP-date only, and never honoured past MAX_RETRY_AFTER
  (retry_after_seconds);
- a BoundedSession (the wheel index, PyPI's pages) has a total deadline for the whole command, besides the
  timeout of each exchange: a slow index fails the command in minutes, it never hangs a nightly;
- what a client waits to retry is bounded in all, not only per wait (RetryWaits, $BUILDKIT_RETRY_WAIT): a server
  that answers 503 with an hour's Retry-After costs a command one capped wait, not one per attempt;
- the clock every deadline is measured on is a parameter (`clock`), so a test sets the time a deadline sees
  instead of waiting it out.

The registry client (registry/transport.py) builds on the same pieces and adds its own rules (credentials
bound to an origin, redirects one hop at a time). Every URL a message names goes through errors.redact_urls:
an index URL often carries a CI token as its user-info.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timezone
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING

import requests
import urllib3.connection
import urllib3.exceptions
import urllib3.poolmanager
from requests.adapters import HTTPAdapter
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from buildkit.errors import Problem, UserError, printable, redact_urls

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

MAX_RETRY_AFTER = 60.0  # seconds: a Retry-After beyond this is not honoured as given
MAX_REDIRECTS = 5
ERROR_BODY_LIMIT = 64 * 1024  # of an error answer a message shows 200 characters; read no more than this
NOTICE_AFTER = 1.0  # seconds: a wait to retry this long or longer is announced
DEFAULT_TIMEOUT = 30.0  # seconds for one exchange, redirects and body included
DEFAULT_DEADLINE = 600.0  # seconds for every request of one command together, retries and waits included
# Seconds one client of a command may wait to retry, all its waits together: a server that keeps answering 503
# with a long Retry-After fails the command after one capped wait, not after the deadline.
DEFAULT_RETRY_WAIT = 90.0
RETRY_WAIT_ENV = "BUILDKIT_RETRY_WAIT"
_CHUNK = 64 * 1024
_DELAY_SECONDS_RE = re.compile(r"[0-9]+")  # RFC 9110 delay-seconds: ASCII digits only ('²'.isdigit() is true)


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """The wait a Retry-After header asks for, capped at MAX_RETRY_AFTER: delay-seconds (ASCII digits) or an
    HTTP-date (RFC 9110); None for anything else (the caller backs off on its own)."""
    text = (value or "").strip()
    if _DELAY_SECONDS_RE.fullmatch(text):
        # 20 digits already exceed any cap; int() of thousands of digits is refused by Python itself
        return min(float(int(text[:20])), MAX_RETRY_AFTER)
    if not text.isascii() or len(text) > 64:
        return None
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:  # "-0000": a date in UTC
        when = when.replace(tzinfo=timezone.utc)
    try:
        wait = when.timestamp() - (time.time() if now is None else now)
    except (OverflowError, OSError, ValueError):
        return MAX_RETRY_AFTER
    return min(max(wait, 0.0), MAX_RETRY_AFTER)


def backoff_seconds(backoff: float, attempt: int, retry_after: str | None = None) -> float:
    """How long to wait before retry `attempt` (0 first): the server's Retry-After where it gives a usable
    one, else exponential backoff with jitter."""
    asked = retry_after_seconds(retry_after)
    return asked if asked is not None else backoff * (2**attempt) * (0.5 + random.random())


# --- the deadline watchdog -------------------------------------------------------------------------------

_current = threading.local()  # the watchdog of the exchange this thread is in, if any


class Watchdog:
    """Shuts down the sockets of this thread's exchange when its deadline passes. Socket timeouts are
    per read; shutting the socket down is what wakes a read blocked on a server that sends a byte a second.
    It holds the sockets, not the connections: for an answer that ends with the connection, http.client
    hands the socket over to the response and the connection forgets it."""

    def __init__(self, seconds: float) -> None:
        self.fired = False
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        self.timer = threading.Timer(max(seconds, 0.0), self._fire)
        self.timer.daemon = True

    def __enter__(self) -> Watchdog:
        _current.watchdog = self
        self.timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
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
    with contextlib.suppress(OSError):  # closed already, or never connected: nothing to stop
        socket.socket.shutdown(sock, socket.SHUT_RDWR)  # the plain socket's: also under a TLS wrapper


class _Watched:
    """A urllib3 connection that puts itself under the current exchange's watchdog: when it connects
    (new connections connect lazily, inside request) and when a pooled one is reused."""

    def connect(self) -> None:
        super().connect()  # type: ignore[misc]  # a mixin: the urllib3 connection class beside it in the subclass has it
        watchdog = getattr(_current, "watchdog", None)
        if watchdog is not None:
            watchdog.attach(self)

    def request(self, *args: object, **kwargs: object) -> None:  # HTTPConnection.request's arguments, passed on
        watchdog = getattr(_current, "watchdog", None)
        if watchdog is not None:
            watchdog.attach(self)
        super().request(*args, **kwargs)  # type: ignore[misc]  # as connect


class _WatchedHTTPConnection(_Watched, urllib3.connection.HTTPConnection):
    pass


class _WatchedHTTPSConnection(_Watched, urllib3.connection.HTTPSConnection):
    pass


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _WatchedHTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _WatchedHTTPSConnection


_POOLS = {"http": _HTTPPool, "https": _HTTPSPool}


class WatchedAdapter(HTTPAdapter):
    """requests' adapter with connections the Watchdog can shut down, direct or through an HTTP proxy."""

    def init_poolmanager(self, connections: int, maxsize: int, block: bool = False, **pool_kwargs: object) -> None:
        super().init_poolmanager(connections, maxsize, block, **pool_kwargs)
        self.poolmanager.pool_classes_by_scheme = _POOLS

    def proxy_manager_for(self, proxy: str, **proxy_kwargs: object) -> urllib3.poolmanager.PoolManager:
        manager: urllib3.poolmanager.PoolManager = super().proxy_manager_for(proxy, **proxy_kwargs)
        if manager.pool_classes_by_scheme is urllib3.poolmanager.pool_classes_by_scheme:  # not SOCKS: its own pools
            manager.pool_classes_by_scheme = _POOLS
        return manager


class Expired(Exception):
    """The exchange's deadline passed while its answer was read."""


class TooLarge(Exception):
    """The answer is larger than the cap."""


def read_body(response: requests.Response, limit: int, deadline: float, cut: bool, clock: Callable[[], float] = time.monotonic) -> bytes:
    """The body, streamed: refused past `limit` bytes (TooLarge), or cut there for error bodies whose start
    is all a message shows, and never past the deadline on `clock` (Expired)."""
    declared = response.headers.get("Content-Length", "").strip()
    if _DELAY_SECONDS_RE.fullmatch(declared) and len(declared) < 20 and int(declared) > limit and not cut:
        raise TooLarge
    body = bytearray()
    for chunk in response.iter_content(_CHUNK):
        body += chunk
        if len(body) > limit:
            if cut:
                return bytes(body[:limit])
            raise TooLarge
        if clock() >= deadline:
            raise Expired
    return bytes(body)


def hopeless(error: BaseException) -> str | None:
    """Why a connection failed when retrying within seconds cannot help: nothing listens on the port, or
    the host name does not resolve. Other failures (a reset, a timeout, an answer cut short) are retried."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, urllib3.exceptions.NameResolutionError):
            return "its host name does not resolve"
        if isinstance(cause, ConnectionRefusedError):
            return "the connection was refused (nothing listens there)"
        cause = getattr(cause, "reason", None) or cause.__cause__ or cause.__context__
    return None


def wait(seconds: float) -> None:
    """How a session waits to retry (a function of its own, so a test can stand in for the clock)."""
    time.sleep(seconds)


def on_stderr(notice: str) -> None:
    """Where a retry notice goes when the caller gives no `notify`: stderr, where the CLI says everything
    that is not a command's result."""
    print(notice, file=sys.stderr, flush=True)


def retry_wait_budget(environ: Mapping[str, str] | None = None) -> float:
    """The seconds a client may wait to retry, in all: $BUILDKIT_RETRY_WAIT, else DEFAULT_RETRY_WAIT."""
    text = (os.environ if environ is None else environ).get(RETRY_WAIT_ENV, "").strip()
    if not text:
        return DEFAULT_RETRY_WAIT
    try:
        seconds = float(text) if len(text) < 32 else math.nan
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds >= 0):
        raise UserError(
            Problem(
                f"${RETRY_WAIT_ENV}",
                f"is {printable(text, 40)!r}; expected the seconds buildkit may wait to retry a "
                "service in all, a number of 0 or more (0: never wait; unset: "
                f"{DEFAULT_RETRY_WAIT:g})",
            )
        )
    return seconds


class RetryWaits:
    """The waits to retry of one client (a wheel index's session, a registry's transport), against the budget
    they may take in all: each Retry-After is capped (retry_after_seconds), and their sum is too. A wait is
    refused, with the reason, when it would pass the budget or the caller's own limit (a deadline); one of
    NOTICE_AFTER seconds or more is announced, with what is retried and how much of the budget it takes."""

    def __init__(self, budget: float | None = None, sleep: Callable[[float], None] | None = None, notify: Callable[[str], None] | None = None) -> None:
        self.budget = retry_wait_budget() if budget is None else budget
        self.sleep, self.notify = sleep or wait, notify or on_stderr
        self.waited = 0.0  # seconds waited so far
        self.lock = threading.Lock()

    def pause(
        self, seconds: float, *, subject: str, what: str, attempt: int, attempts: int, refuse: Callable[[str], Exception], left: float, passes: str
    ) -> None:
        """Wait `seconds` before attempt `attempt + 2` of `attempts`, or raise refuse(why). `left`: the seconds
        the caller's own limit leaves, which `passes` names ("would pass ...")."""
        if seconds >= left:
            raise refuse(passes)
        with self.lock:
            if self.waited + seconds > self.budget:
                raise refuse(
                    f"{what}, and waiting {seconds:.0f} s more to retry would pass the {self.budget:g} s buildkit waits "
                    f"to retry it in all (waited {self.waited:.0f} s so far; ${RETRY_WAIT_ENV} sets it); try again later"
                )
            self.waited += seconds
        if seconds >= NOTICE_AFTER:
            self.notify(
                printable(
                    redact_urls(
                        f"{subject}: {what}; retrying in {seconds:.0f} s (attempt {attempt + 2} of {attempts}), "
                        f"{self.waited:.0f} s of the {self.budget:g} s it may wait to retry"
                    ),
                    limit=400,
                )
            )
        self.sleep(seconds)


# --- a bounded session -----------------------------------------------------------------------------------


class RemoteFailure(UserError):
    """The service did not answer usably within the bounds: an environment failure (exit 1), not bad input."""

    exit_code = 1


@dataclass(frozen=True)
class Answer:
    """A whole answer, its body read within the cap and the deadline."""

    status: int
    headers: Mapping[str, str]  # case-insensitive
    body: bytes
    url: str  # after redirects

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class BoundedSession:
    """HTTP GETs for one command against one service (`name`: its base URL, as messages name it, user-info
    redacted). Bounds: `timeout` seconds per exchange (redirects and body included), `deadline` seconds for
    every exchange and wait of the command together, a body cap per request, `retries` on connection
    failures, 429 and 5xx (backoff with jitter, or the server's Retry-After up to MAX_RETRY_AFTER, and never
    a wait past the deadline or past the RetryWaits budget). Credentials in a URL's user-info are sent as basic auth by requests, only to
    that URL's host (requests drops them on a redirect to another one). Failures are `failure`, the
    client's own subclass of RemoteFailure. Thread-safe: one session serves a pool of workers."""

    def __init__(
        self,
        name: str,
        *,
        timeout: float | None = None,
        deadline: float | None = None,
        retries: int = 3,
        backoff: float = 0.5,
        sleep: Callable[[float], None] | None = None,
        notify: Callable[[str], None] | None = None,
        pool_size: int = 10,
        failure: type[RemoteFailure] = RemoteFailure,
        clock: Callable[[], float] = time.monotonic,
        retry_wait: float | None = None,
    ) -> None:
        self.name = redact_urls(name)
        self.failure_type = failure  # the client's own error class (WheelIndexError...)
        # The module's defaults are read here, not frozen into the signature: one place says what they are.
        self.timeout = DEFAULT_TIMEOUT if timeout is None else timeout
        self.deadline = DEFAULT_DEADLINE if deadline is None else deadline
        self.retries, self.backoff, self.clock = retries, backoff, clock
        self.waits = RetryWaits(retry_wait, sleep, notify)
        self.ends = clock() + self.deadline
        self.session = requests.Session()
        self.session.max_redirects = MAX_REDIRECTS
        adapter = WatchedAdapter(pool_maxsize=pool_size)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)
        # No compressed answers: a small gzip body can inflate past any cap before a check runs.
        self.session.headers["Accept-Encoding"] = "identity"
        self.lock = threading.Lock()
        self.requests = 0  # every exchange, retries included

    def failure(self, call: str, why: str) -> RemoteFailure:
        return self.failure_type(Problem(self.name, f"{redact_urls(call)}: {why}"))

    def get(self, url: str, *, limit: int, headers: Mapping[str, str] | None = None) -> Answer:
        """GET `url`: the final answer whatever its status (429 and 5xx after the retries), its body within
        `limit` bytes (an error answer's cut at ERROR_BODY_LIMIT). RemoteFailure when there is no complete
        answer within the bounds, or the body is larger than `limit`."""
        call = f"GET {printable(url, 300)}"
        for attempt in range(self.retries + 1):
            try:
                answer = self._exchange(url, headers or {}, limit, call)
            except requests.ConnectionError as error:
                why = hopeless(error)
                if why:
                    raise self.failure(call, f"cannot connect: {why}; check the address and the network") from None
                if attempt == self.retries:
                    raise self.failure(
                        call, f"no answer ({type(error).__name__}) after {self.retries + 1} attempts; check the address and the network, or try again later"
                    ) from None
                self._pause(backoff_seconds(self.backoff, attempt), call, "no answer", attempt)
                continue
            if (answer.status == 429 or answer.status >= 500) and attempt < self.retries:
                self._pause(backoff_seconds(self.backoff, attempt, answer.headers.get("Retry-After")), call, f"it answered {answer.status}", attempt)
                continue
            return answer
        raise AssertionError("unreachable")  # pragma: no cover

    def left(self) -> float:
        return self.ends - self.clock()

    def _pause(self, seconds: float, call: str, what: str, attempt: int) -> None:
        self.waits.pause(
            seconds,
            subject=f"{self.name}: {call}",
            what=what,
            attempt=attempt,
            attempts=self.retries + 1,
            refuse=lambda why: self.failure(call, why),
            left=self.left(),
            passes=f"{what}, and waiting {seconds:.0f} s to retry would pass the command's deadline of "
            f"{self.deadline:g} s for requests to this service; try again later",
        )

    def _exchange(self, url: str, headers: Mapping[str, str], limit: int, call: str) -> Answer:
        left = self.left()
        if left <= 0:
            raise self.failure(
                call,
                f"the command's deadline of {self.deadline:g} s for requests to this service has "
                "passed; the service is too slow or keeps stalling, try again later",
            )
        seconds = min(self.timeout, left)
        within = f"{seconds:g} s" if seconds == self.timeout else f"the {seconds:.1f} s left of the command's deadline of {self.deadline:g} s"
        deadline = self.clock() + seconds
        with self.lock:
            self.requests += 1
        with Watchdog(seconds) as watchdog:
            try:
                response = self.session.get(url, headers=dict(headers), stream=True, timeout=(seconds, seconds))
            except requests.Timeout:
                raise self.failure(call, f"no answer within {within}; try again later") from None
            except requests.TooManyRedirects:
                raise self.failure(call, f"more than {MAX_REDIRECTS} redirects") from None
            except requests.ConnectionError:
                if watchdog.fired:
                    raise self.failure(call, f"no complete answer within {within} (the server stalls or sends too slowly); try again later") from None
                raise
            except (requests.RequestException, ValueError) as error:  # InvalidURL, InvalidHeader, a bad Location
                raise self.failure(call, f"the request failed ({type(error).__name__}); check the address") from None
            try:
                body = read_body(response, limit if response.ok else min(limit, ERROR_BODY_LIMIT), deadline, not response.ok, self.clock)
            except TooLarge:
                raise self.failure(call, f"the answer is larger than {_size(limit)}; refusing to read it (is this the service it should be?)") from None
            except (Expired, requests.RequestException, urllib3.exceptions.HTTPError):
                if watchdog.fired or self.clock() >= deadline:
                    raise self.failure(call, f"no complete answer within {within} (the server stalls or sends too slowly); try again later") from None
                raise requests.ConnectionError("the answer was cut short") from None
            finally:
                response.close()
        return Answer(response.status_code, response.headers, body, response.url)


def _size(count: int) -> str:
    return f"{count >> 20} MiB" if count >= 1 << 20 else f"{count >> 10} KiB" if count >= 1 << 10 else f"{count} bytes"
