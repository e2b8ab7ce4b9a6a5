"""Bounds: a total deadline per request (trickling heads and bodies, servers that never answer), a budget
per run, a cap on answer sizes and on a listing's tags; against fake origins on 127.0.0.1 that misbehave on
purpose. Each bound is proven by its event (the watchdog's message), its counter (bytes sent, requests,
pages) or a clock the test sets (testkit.bounds.FakeClock), never by timing the call."""

from __future__ import annotations

import socket
import threading
import tracemalloc

import pytest

from buildkit.adapters.registry.client import MAX_TAGS, Registry, RegistryError
from testkit.bounds import FakeClock, hang_guard
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
    """The message is the watchdog's: only a deadline that fired says "no complete answer within" (each of these
    servers would otherwise hold the call for minutes, which the hang guard would end)."""
    with pytest.raises(RegistryError) as caught:
        hang_guard(call, "a request past its deadline")
    assert expected in str(caught.value)
    return str(caught.value)


@pytest.mark.slow
def test_a_body_trickling_a_byte_at_a_time_fails_at_the_deadline(registry):
    reg = client(registry)
    reg.ping()  # the trickle then comes on a reused keep-alive connection
    registry.on("GET", r"/v2/team/app/manifests/slow", Answer(200, {"Content-Type": "application/json"}, trickle(b'{"schemaVersion": 2}' * 10), pause=0.5))
    message = fails_at_the_deadline(lambda: reg.find_manifest("team/app", "slow"))
    assert message.startswith(f"{registry.address}: GET /v2/team/app/manifests/slow:")


@pytest.mark.slow
def test_a_trickling_status_line_and_headers_fail_at_the_deadline(registry):
    registry.on("GET", r"/v2/team/app/manifests/slow", Answer(200, {"X-Pad": "x" * 40}, b"{}", head_pause=0.5))
    fails_at_the_deadline(lambda: client(registry).find_manifest("team/app", "slow"))


@pytest.mark.slow
def test_a_server_that_never_answers_fails_at_the_deadline_without_retrying(registry):
    registry.on("GET", r"/v2/", Answer(stall=True))
    reg = client(registry, retries=5)
    fails_at_the_deadline(reg.ping)
    assert reg.requests == 1


def test_a_200_mb_manifest_is_refused_from_its_length_without_reading_it(registry):
    registry.on("GET", r"/v2/team/app/manifests/big", Answer(200, {}, endless(200 << 20), length=(200 << 20) + 30))
    with pytest.raises(RegistryError, match="larger than 4096 KiB"):
        client(registry).find_manifest("team/app", "big")
    assert registry.sent_bytes < 64 << 20  # what the kernel buffers took before the client hung up


def test_a_200_mb_manifest_without_a_length_is_refused_at_the_cap(registry):
    registry.on("GET", r"/v2/team/app/manifests/big", Answer(200, {}, endless(200 << 20), length=None))
    with pytest.raises(RegistryError, match="larger than 4096 KiB"):
        client(registry).find_manifest("team/app", "big")
    assert registry.sent_bytes < 64 << 20


def test_a_huge_token_answer_is_refused(registry):
    registry.require_bearer(f"{registry.url}/token")
    registry.on("GET", r"/token", Answer(200, {}, endless(50 << 20), length=None))
    with pytest.raises(RegistryError, match=r"GET http://127\.0\.0\.1:[0-9]+/token .*larger than 256 KiB"):
        client(registry).ping()


def test_a_huge_error_body_is_cut_not_read_whole(registry):
    registry.on("GET", r"/v2/", Answer(400, {}, endless(100 << 20), length=None))
    with pytest.raises(RegistryError, match="the registry answered 400"):
        client(registry).ping()
    assert registry.sent_bytes < 64 << 20


def taking(clock: FakeClock, seconds: float, answer: Answer) -> object:
    """A handler whose exchange takes `seconds` on the client's clock."""

    def handle(request):
        clock.advance(seconds)
        return answer

    return handle


def test_the_run_budget_bounds_the_time_spent_over_all_requests(registry):
    """A first exchange takes 0.9 s of a 1.5 s budget; the next one gets the 0.6 s left (its watchdog fires then,
    on the real clock: the server stalls), and once the budget is spent no request is sent."""
    clock = FakeClock()
    registry.on("GET", r"/v2/", taking(clock, 0.9, json_answer({})))
    reg = client(registry, budget=1.5, clock=clock)
    reg.ping()
    registry.on("GET", r"/v2/", taking(clock, 0.6, Answer(stall=True)))
    fails_at_the_deadline(reg.ping, "no complete answer within the 0.6 s left of the run's budget of 1.5 s")
    sent = reg.requests
    with pytest.raises(RegistryError, match=r"budget of 1\.5 s for registry requests is spent"):
        reg.ping()
    assert reg.requests == sent


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
    notices, slept = [], []
    reg = Registry(address, timeout=DEADLINE, notify=notices.append, sleep=slept.append)  # the default retries
    with pytest.raises(RegistryError) as caught:
        reg.ping()
    assert str(caught.value) == (
        f"{address}: GET /v2/: cannot connect to http://{address}: the connection was refused "
        "(nothing listens there); check that the registry is up and the address is right"
    )
    assert reg.requests == 1 and notices == [] and slept == []


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
        with pytest.raises(RegistryError, match=r"cannot reach the registry .* after 3 attempts"):
            reg.ping()
    finally:
        stop.set()
        listener.close()
    assert len(slept) == 2 and reg.requests == 3
    assert [notice.split(" (attempt")[0].rsplit(" ", 2)[0] for notice in notices] == [f"{address}: GET /v2/: cannot reach the registry; retrying in"] * 2
    assert [notice.rsplit("(", 1)[1].split(")")[0] for notice in notices] == ["attempt 2 of 3", "attempt 3 of 3"]


def test_a_short_wait_is_not_announced(registry):
    answers = [Answer(503), json_answer({})]
    registry.on("GET", r"/v2/", lambda request: answers.pop(0))
    notices = []
    client(registry, retries=1, backoff=0.01, notify=notices.append).ping()
    assert notices == []


@pytest.mark.slow
def test_a_tag_listing_of_hundreds_of_large_pages_is_read_a_page_at_a_time(registry):
    """106 pages of 4 MiB once ended in MemoryError: tags stream page by page, so memory holds about a page
    (publish --keep keeps only this target's date tags of them)."""
    page_tags = [f"{'x' * 100}-{index:06d}" for index in range(8_000)]  # about 0.9 MiB of JSON per page
    pages = 60  # 480,000 tags, under MAX_TAGS

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
    assert count < MAX_TAGS
    assert peak < 16 << 20, f"{peak >> 20} MiB held for {pages} pages of about 0.9 MiB"


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


def test_a_tag_listing_past_the_tag_cap_stops_with_one_message(registry):
    """Pages of 380,000 tags, each linking the next, 232 times, once cost publish --keep 44 s of CPU before the
    page cap: the listing now stops at MAX_TAGS, after the pages that reach it."""
    per_page = MAX_TAGS // 2 + 1
    tags = [f"t{index}" for index in range(per_page)]

    def page(request):
        number = int(request.query.get("page", "0"))
        return json_answer({"name": "team/app", "tags": tags}, Link=f'</v2/team/app/tags/list?n=100&page={number + 1}>; rel="next"')

    registry.on("GET", r"/v2/team/app/tags/list", page)
    reg = client(registry, timeout=30)
    with pytest.raises(RegistryError, match=f"the tag list runs past {MAX_TAGS:,} tags over 2 pages"):
        sum(1 for _ in reg.iter_tags("team/app"))
    assert reg.requests == 2


def test_the_retries_of_a_run_wait_no_more_than_its_retry_budget(registry):
    """A registry that answers 503 with the longest Retry-After honoured: the first wait is taken and said with
    the budget it uses, the next would pass the 90 s budget and ends the run instead."""
    slept, notices = [], []
    registry.on("GET", r"/v2/", Answer(503, {"Retry-After": "60"}))
    reg = client(registry, retries=5, sleep=slept.append, notify=notices.append)
    with pytest.raises(
        RegistryError,
        match=r"it answered 503, and waiting 60 s more to retry would pass the 90 s buildkit "
        r"waits to retry it in all \(waited 60 s so far; \$BUILDKIT_RETRY_WAIT sets it\)",
    ):
        reg.ping()
    assert slept == [60.0] and reg.requests == 2
    assert notices == [f"{registry.address}: GET /v2/: it answered 503; retrying in 60 s (attempt 2 of 6), 60 s of the 90 s it may wait to retry"]
