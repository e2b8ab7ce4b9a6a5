"""URL parser differentials: the origin the client's one parse names is the origin the connection layer
connects to, and a credential reaches no other. Two real origins on 127.0.0.1 (one port each) record every
request and Authorization header; Hypothesis writes URLs from the pieces parsers read differently
(backslashes, user-info, "@", odd ports, percent-encoding, separators) around their two authorities."""

from __future__ import annotations

import contextlib
import ipaddress
import socket
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from buildkit.adapters.registry.client import Credentials, Registry, RegistryError
from buildkit.adapters.registry.transport import Origin, Transport, UnsafeUrl, Url, parse_url
from testkit.fake_registry import Answer, FakeOrigin, Journal, json_answer

SECRET = "Bearer s3cret-for-the-registry-only"
CREDENTIALS = Credentials("robot", "pa:ss@w0rd")


@pytest.fixture(scope="module")
def origins():
    """(journal, the registry's origin, another origin): both answer anything with 200."""
    journal = Journal()
    with FakeOrigin(journal) as registry, FakeOrigin(journal) as other:
        for fake in (registry, other):
            fake.on("*", r".*", json_answer({}))
        yield journal, registry, other


def own_origin(fake: FakeOrigin) -> Origin:
    return parse_url(fake.url).origin


def address_of(host: str) -> str:
    """The IPv4 address a host name or literal connects to (an IPv4-mapped IPv6 literal to its IPv4)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return socket.gethostbyname(host)
    return str(address.ipv4_mapped or address) if address.version == 6 else str(address)


def landed(journal: Journal, before: int) -> list[tuple[str, str | None]]:
    """(origin URL, Authorization) of every request recorded since `before`."""
    return [(seen.origin, seen.authorization) for seen in journal.seen[before:]]


def pieces(registry: FakeOrigin, other: FakeOrigin):
    ports = [registry.server.server_address[1], other.server.server_address[1]]
    authorities = st.sampled_from(
        [
            *(f"{host}:{port}" for host in ("127.0.0.1", "localhost", "LOCALHOST", "127.1", "[::1]", "[::ffff:127.0.0.1]") for port in ports),
            *(f"127.0.0.1:{form}" for port in ports for form in (f"0{port}", f"+{port}", f" {port}", f"{port}.", f"{port}:")),
            "127.0.0.1",
            "127.0.0.1:",
            "127.0.0.1:0",
            "127.0.0.1:99999",
        ]
    )
    separators = st.sampled_from(
        [
            "\\",
            "@",
            "/",
            "\\@",
            "@\\",
            "%40",
            "%5C",
            "%5c",
            ":",
            "#",
            "?",
            "\t",
            "\n",
            " ",
            ";",
            ".",
            "user:pw@",
            "user@",
            ":@",
            "%2F",
            "//",
            "\\\\",
            "\u3002",
            "\uff0e",
            "%00",
        ]
    )
    schemes = st.sampled_from(["http://", "HTTP://", "http:/", "http:\\\\", "http:\\/", "//", "http:", "https://", " http://"])
    tails = st.sampled_from(["/probe", "", "?q=1", "#frag", "/a/../probe", "\\probe"])
    # one authority, a separator, another: where parsers split authorities differently
    two = st.builds(lambda scheme, first, between, second, tail: scheme + first + between + second + tail, schemes, authorities, separators, authorities, tails)
    anything = st.builds(lambda scheme, parts, tail: scheme + "".join(parts) + tail, schemes, st.lists(authorities | separators, min_size=1, max_size=5), tails)
    return two | anything


def test_the_leak_of_the_old_origin_check_is_refused(origins):
    """urllib.parse read the registry's own host after the backslash; urllib3 (and so requests) connects to
    the host before it. The client followed such a redirect with the registry's password."""
    journal, registry, other = origins
    before = len(journal.seen)
    location = f"http://{other.address}\\@{registry.address}/v2/"
    assert (urlsplit(location).hostname, urlsplit(location).port) == ("127.0.0.1", registry.server.server_address[1])
    with pytest.raises(UnsafeUrl, match="backslash"):
        parse_url(location)
    registry.on("GET", r"/v2/", Answer(307, {"Location": location}))
    try:
        with pytest.raises(RegistryError) as caught:
            Registry(registry.address, CREDENTIALS, retries=0, timeout=5).ping()
    finally:
        registry.on("GET", r"/v2/", json_answer({}))
    assert "which holds a backslash" in str(caught.value) and str(caught.value).endswith("; not followed")
    assert all(where == registry.url for where, _ in landed(journal, before))


def test_the_adapter_attaches_nothing_where_the_connection_goes_elsewhere(origins):
    """The last line: a Url whose origin claims the registry but whose text leads to the other origin (as a
    parser bug would make one) reaches the other origin without the credential."""
    journal, registry, other = origins
    before = len(journal.seen)
    lying = Url(f"{other.url}/probe", own_origin(registry))
    Transport("test", retries=0, timeout=5).send("GET", lying, limit=1024, authorization=SECRET, bound_to=own_origin(registry))
    assert landed(journal, before) == [(other.url, None)]


@pytest.mark.slow
@settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_the_origin_check_names_what_the_connection_layer_connects_to(origins, data):
    journal, registry, other = origins
    text = data.draw(pieces(registry, other))
    transport = Transport("test", retries=0, timeout=3, sleep=lambda seconds: None)
    before = len(journal.seen)
    try:
        url = parse_url(text)
    except UnsafeUrl:
        with pytest.raises(RegistryError, match=r"^test: .*; not requested$"):
            transport.send("GET", text, limit=1024, authorization=SECRET, bound_to=own_origin(registry))
        assert landed(journal, before) == []  # refused before any connection
        return
    # Accepted: the standard library's parser reads the same authority (nothing two parsers split differently).
    plain = urlsplit(url.text)
    assert (plain.scheme, (plain.hostname or "").lower(), plain.port or {"http": 80, "https": 443}[plain.scheme]) == (
        url.origin.scheme,
        url.origin.host,
        url.origin.port,
    )
    for bound_to in (own_origin(registry), url.origin):
        before = len(journal.seen)
        with contextlib.suppress(RegistryError):  # nothing listens there, or not TLS: no server recorded anything
            transport.send("GET", url, limit=1024, authorization=SECRET, bound_to=bound_to)
        arrived = landed(journal, before)
        assert len(arrived) <= 1
        for where, authorization in arrived:
            # the request went to the host and port the parse named (127.1, localhost and 127.0.0.1 are one host)
            assert address_of(url.origin.host) == "127.0.0.1" and where == f"http://127.0.0.1:{url.origin.port}"
            # and the credential only where it is bound, by the parse's origin
            assert (authorization == SECRET) == (url.origin == bound_to), (text, url, arrived)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(data=st.data())
def test_no_redirect_carries_the_registry_password_to_another_origin(origins, data):
    journal, registry, other = origins
    location = data.draw(pieces(registry, other) | st.sampled_from(["/probe", "//" + other.address + "/probe", "probe"]))
    registry.on(
        "GET",
        r"/v2/",
        lambda request: (
            Answer(401, {"WWW-Authenticate": 'Basic realm="r"'})
            if request.headers.get("Authorization") != CREDENTIALS.basic
            else Answer(307, {"Location": location})
        ),
    )
    before = len(journal.seen)
    failure = ""
    try:
        Registry(registry.address, CREDENTIALS, retries=0, timeout=3, sleep=lambda seconds: None).ping()
    except RegistryError as error:
        failure = str(error)
    finally:
        registry.on("GET", r"/v2/", json_answer({}))
    assert CREDENTIALS.password not in failure
    assert {where for where, authorization in landed(journal, before) if authorization} <= {registry.url}
