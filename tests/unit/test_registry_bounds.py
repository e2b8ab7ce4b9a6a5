"""Bounds: a total deadline per request (trickling heads and bodies, servers that never answer), a budget
per run, a cap on answer sizes; against fake origins on 127.0.0.1 that misbehave on purpose."""

from __future__ import annotations

import socket
import threading
import time
import tracemalloc

import pytest

from buildkit.adapters.registry import Registry, RegistryError
from testkit.fake_registry import Answer, FakeRegistry, endless, json_answer, trickle

DEADLINE = 1.0


@pytest.fixture
def registry():
    with FakeRegistry() as fake:
        fake.add_image("team/app", "1.0", {"a": "b"})
        yield fake


def client(fake: FakeRegistry, **options) -> Registry:
    return Registry(fake.address, retries=options.pop("retries", 0), timeout=options.pop("timeout", DEADLINE), **options)


def fails_at_the_deadline(call, expected: str = "no complete answer within 1 s") -> str:
    started = time.monotonic()
    with pytest.raises(RegistryError) as caught:
        call()
    elapsed = time.monotonic() - started
    assert DEADLINE - 0.1 <= elapsed < DEADLINE + 1.5, elapsed
    assert expected in str(caught.value)
    return str(caught.value)


def test_a_body_trickling_a_byte_at_a_time_fails_at_the_deadline(registry):
    reg = client(registry)
    reg.ping()  # the trickle then comes on a reused keep-alive connection
    registry.on("GET", r"/v2/team/app/manifests/slow", Answer(200, {"Content-Type": "application/json"},
                                                            trickle(b'{"schemaVersion": 2}' * 10), pause=0.5))
    message = fails_at_the_deadline(lambda: reg.find_manifest("team/app", "slow"))
    assert message.startswith(f"{registry.address}: GET /v2/team/app/manifests/slow:")


def test_a_trickling_status_line_and_headers_fail_at_the_deadline(registry):
    registry.on("GET", r"/v2/team/app/manifests/slow", Answer(200, {"X-Pad": "x" * 40}, b"{}", head_pause=0.5))
    fails_at_the_deadline(lambda: client(registry).find_manifest("team/app", "slow"))


def test_a_server_that_never_answers_fails_at_the_deadline_without_retrying(registry):
    registry.on("GET", r"/v2/", Answer(stall=True))
    reg = client(registry, retries=5)
    fails_at_the_deadline(reg.ping)
    assert reg.requests == 1


def test_a_200_mb_manifest_is_refused_from_its_length_without_reading_it(registry):
    registry.on("GET", r"/v2/team/app/manifests/big", Answer(200, {}, endless(200 << 20), length=(200 << 20) + 30))
    started = time.monotonic()
    with pytest.raises(RegistryError, match="larger than 4096 KiB"):
        client(registry).find_manifest("team/app", "big")
    assert time.monotonic() - started < 1.5
    assert registry.sent_bytes < 64 << 20  # what the kernel buffers took before the client hung up


def test_a_200_mb_manifest_without_a_length_is_refused_at_the_cap(registry):
    registry.on("GET", r"/v2/team/app/manifests/big", Answer(200, {}, endless(200 << 20), length=None))
    started = time.monotonic()
    with pytest.raises(RegistryError, match="larger than 4096 KiB"):
        client(registry).find_manifest("team/app", "big")
    assert time.monotonic() - started < 1.5
    assert registry.sent_bytes < 64 << 20


def test_a_huge_token_answer_is_refused(registry):
    registry.require_bearer(f"{registry.url}/token")
    registry.on("GET", r"/token", Answer(200, {}, endless(50 << 20), length=None))
    with pytest.raises(RegistryError, match="GET http://127.0.0.1:[0-9]+/token .*larger than 256 KiB"):
        client(registry).ping()


def test_a_huge_error_body_is_cut_not_read_whole(registry):
    registry.on("GET", r"/v2/", Answer(400, {}, endless(100 << 20), length=None))
    with pytest.raises(RegistryError, match="the registry answered 400"):
        client(registry).ping()
    assert registry.sent_bytes < 64 << 20


def test_the_run_budget_bounds_the_time_spent_over_all_requests(registry):
    registry.on("GET", r"/v2/", Answer(stall=True))
    reg = client(registry, budget=1.5)
    fails_at_the_deadline(reg.ping)
    started = time.monotonic()
    with pytest.raises(RegistryError, match=r"no complete answer within the 0.5 s left of the run's budget of 1.5 s"):
        reg.ping()
    assert time.monotonic() - started < 1.0
    with pytest.raises(RegistryError, match="budget of 1.5 s for registry requests is spent"):
        reg.ping()


def test_retry_after_beyond_the_budget_fails_now_instead_of_sleeping(registry):
    slept = []
    registry.on("GET", r"/v2/", Answer(503, {"Retry-After": "3600"}))
    reg = client(registry, retries=3, budget=30.0, sleep=slept.append)
    with pytest.raises(RegistryError, match="would be spent waiting to retry"):
        reg.ping()
    assert slept == [] and reg.requests == 1


@pytest.mark.parametrize("value", ["²", "¹²", "1e9", "Fri, 31 Dec 99999 23:59:59 GMT"])
def test_an_unreadable_retry_after_is_backoff_not_an_internal_error(registry, value):
    """'²'.isdigit() is true and float('²') raises: only ASCII digits or an HTTP-date are a Retry-After."""
    slept, answers = [], [Answer(503, {"Retry-After": value}), json_answer({})]
    registry.on("GET", r"/v2/", lambda request: answers.pop(0))
    reg = client(registry, retries=2, sleep=slept.append)
    reg.ping()
    assert reg.requests == 2 and len(slept) == 1 and slept[0] < 1


def test_retries_through_429_and_500_keep_working(registry):
    slept, answers = [], [Answer(500), Answer(429, {"Retry-After": "1"}), json_answer({})]
    registry.on("GET", r"/v2/", lambda request: answers.pop(0))
    reg = client(registry, retries=5, sleep=slept.append)
    reg.ping()
    assert reg.requests == 3 and slept[1] == 1.0


def test_a_refused_connection_fails_at_once_and_says_so(registry):
    """Nothing listens: retrying for seconds (the default five retries once took 14-17 s, silently) cannot help."""
    address = registry.address
    registry.stop()
    notices = []
    reg = Registry(address, timeout=DEADLINE, notify=notices.append)  # the default retries, real sleeps
    started = time.monotonic()
    with pytest.raises(RegistryError) as caught:
        reg.ping()
    assert time.monotonic() - started < 5
    assert str(caught.value) == (f"{address}: GET /v2/: cannot connect to http://{address}: the connection was refused "
                                 "(nothing listens there); check that the registry is up and the address is right")
    assert reg.requests == 1 and notices == []


def test_a_host_name_that_does_not_resolve_fails_at_once():
    reg = Registry("no-such-host.invalid:5000", insecure=True, timeout=DEADLINE, sleep=pytest.fail)
    with pytest.raises(RegistryError, match=r"cannot connect to http://no-such-host\.invalid:5000: its host name does not resolve"):
        reg.ping()
    assert reg.requests == 1


def test_a_dropped_connection_is_retried_and_each_long_wait_is_announced():
    """A server that accepts and hangs up is retried; a wait of a second or more says what is retried."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    stop = threading.Event()

    def hang_up():
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            connection.close()

    threading.Thread(target=hang_up, daemon=True).start()
    address = f"127.0.0.1:{listener.getsockname()[1]}"
    slept, notices = [], []
    try:
        reg = Registry(address, retries=2, backoff=2.0, timeout=DEADLINE, sleep=slept.append, notify=notices.append)
        with pytest.raises(RegistryError, match="cannot reach the registry .* after 3 attempts"):
            reg.ping()
    finally:
        stop.set()
        listener.close()
    assert len(slept) == 2 and reg.requests == 3
    assert [notice.split(" (attempt")[0].rsplit(" ", 2)[0] for notice in notices] == [
        f"{address}: GET /v2/: cannot reach the registry; retrying in"] * 2
    assert [notice.rsplit("(", 1)[1] for notice in notices] == ["attempt 2 of 3)", "attempt 3 of 3)"]


def test_a_short_wait_is_not_announced(registry):
    answers = [Answer(503), json_answer({})]
    registry.on("GET", r"/v2/", lambda request: answers.pop(0))
    notices = []
    client(registry, retries=1, backoff=0.01, notify=notices.append).ping()
    assert notices == []


def test_a_tag_listing_of_hundreds_of_large_pages_is_read_a_page_at_a_time(registry):
    """106 pages of 4 MiB once ended in MemoryError: tags stream page by page, so memory holds about a page
    (publish --keep keeps only this target's date tags of them)."""
    page_tags = [f"{'x' * 100}-{index:06d}" for index in range(15_000)]  # about 1.6 MiB of JSON per page
    pages = 60

    def page(request):
        number = int(request.query.get("page", "0"))
        following = {"Link": f'</v2/team/app/tags/list?n=100&page={number + 1}>; rel="next"'} if number + 1 < pages else {}
        return json_answer({"name": "team/app", "tags": [f"{tag}-{number}" for tag in page_tags]}, **following)

    registry.on("GET", r"/v2/team/app/tags/list", page)
    reg = client(registry, timeout=30)
    tracemalloc.start()
    try:
        count = sum(1 for _ in reg.iter_tags("team/app"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert count == pages * len(page_tags)
    assert peak < 24 << 20, f"{peak >> 20} MiB held for {pages} pages of about 1.6 MiB"


def test_an_index_of_thousands_of_platforms_is_refused_without_a_request_per_child(registry):
    image = registry.add_image("team/app", None, {"a": "b"})
    images = {f"linux/arch{index}": image for index in range(5000)}
    registry.add_index("team/app", "many", images)
    reg = client(registry)
    with pytest.raises(RegistryError, match="the index lists 5000 images, more than the 64 platforms buildkit reads"):
        reg.platform_labels("team/app", "many")
    with pytest.raises(RegistryError, match="more than the 64 platforms"):
        reg.image_labels("team/app", "many", "linux/arch7")
    assert reg.requests == 2  # the index, twice: no child manifest, no config
