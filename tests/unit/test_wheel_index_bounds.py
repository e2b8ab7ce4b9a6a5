"""The wheel-index client's bounds, as `compat check` and `lock` meet them: an index on 127.0.0.1 that
trickles, stalls, asks to be retried in an hour or in Unicode digits, lists thousands of folders, names
versions of 5,000 digits, or fails while its URL carries a CI token. Each is one message and exit 1 (or a
result), within the bounds, never a hang or a traceback, and never the token. A bound is proven by its event
(the deadline's message) or its counter (requests, waits recorded instead of slept), never by timing the call."""

from __future__ import annotations

import email.utils
import time

import pytest

from buildkit.adapters import bounded_http
from buildkit.adapters.bounded_http import DEFAULT_RETRY_WAIT, MAX_RETRY_AFTER, retry_after_seconds
from testkit.bounds import hang_guard
from testkit.fake_registry import Answer, FakeOrigin, trickle

# compat check reads only the index under test: PyPI and the layout indexes of the data are left out
OFFLINE = ("--pypi", "none", "--layout-index", "amd-whl-next=none")

TOKEN = "ci-token-5ec7e7"
PAGE = "<!DOCTYPE html><html><body>{}</body></html>"


@pytest.fixture
def origin():
    with FakeOrigin() as fake:
        yield fake


@pytest.fixture
def waits(monkeypatch):
    """Retry waits recorded instead of slept: what the client would wait, without the test waiting it."""
    slept: list[float] = []
    monkeypatch.setattr(bounded_http, "wait", slept.append)
    return slept


def html(*hrefs: str) -> bytes:
    return PAGE.format("".join(f'<a href="{href}">{href}</a>\n' for href in hrefs)).encode()


def locking(team_matrix, requirement: str = "timm>=1.0") -> str:
    """A matrix whose lock needs one package range and no base image from a registry (digest-pinned bases)."""
    digest = "sha256:" + "a" * 64
    return str(
        team_matrix(f'''
        extends = "default"
        runtime_base = "python@{digest}"
        include = [{{ torch = "2.14.1", python = "3.12", flavor = "runtime" }}]
        packages = ["{requirement}"]
    ''')
    )


def assert_one_failure(result, *expected: str) -> None:
    assert "Traceback" not in result.err and "internal error" not in result.err, result.err
    assert result.code == 1, (result.code, result.out, result.err)
    errors = [line for line in result.err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.err
    for text in expected:
        assert text in errors[0], result.err


@pytest.mark.parametrize(
    "value, seconds",
    [
        ("5", 5.0),
        (" 7 ", 7.0),
        ("0", 0.0),
        ("3600", MAX_RETRY_AFTER),
        ("9" * 5000, MAX_RETRY_AFTER),
        ("²", None),
        ("٣", None),
        ("1.5", None),
        ("-1", None),
        ("soon", None),
        ("", None),
        (None, None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),  # in the past: retry now
        ("Mon, 99 Foo 9999 99:99:99 GMT", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT" + "x" * 100, None),
    ],
)
def test_retry_after_is_ascii_delay_seconds_or_an_http_date_and_capped(value, seconds):
    assert retry_after_seconds(value) == seconds


def test_an_http_date_retry_after_is_the_time_until_then():
    now = time.time()
    assert retry_after_seconds(email.utils.formatdate(now + 20, usegmt=True), now=now) == pytest.approx(20, abs=1)
    assert retry_after_seconds(email.utils.formatdate(now + 86400, usegmt=True), now=now) == MAX_RETRY_AFTER


@pytest.mark.slow
def test_a_page_trickling_a_byte_at_a_time_fails_at_the_timeout(cli, origin, monkeypatch):
    monkeypatch.setattr(bounded_http, "DEFAULT_TIMEOUT", 1.0)
    origin.on("GET", r"/whl/", Answer(200, {"Content-Type": "text/html"}, trickle(html("cu130/") * 10), length=None, pause=0.3))
    result = hang_guard(lambda: cli("compat", "check", *OFFLINE, "--index", f"{origin.url}/whl"), "compat check")
    assert_one_failure(result, "GET ", "/whl/: no complete answer within 1 s")  # the watchdog's message


@pytest.mark.slow
def test_every_request_of_a_command_fits_in_its_deadline(cli, origin, monkeypatch):
    """Each page answers within the timeout, but all of them together would take minutes: the command's
    deadline ends them."""
    monkeypatch.setattr(bounded_http, "DEFAULT_DEADLINE", 2.0)
    origin.on("GET", r"/whl/", Answer(200, {}, html()))
    origin.on("GET", r"/whl/.+/torch/", Answer(404, {}, b"", head_pause=0.01))  # about a second per answer
    result = hang_guard(lambda: cli("compat", "check", *OFFLINE, "--index", f"{origin.url}/whl"), "compat check")
    assert_one_failure(result, "deadline of 2 s")


def test_a_retry_after_of_an_hour_is_waited_at_most_the_cap_and_announced(cli, origin, waits):
    answers = iter([Answer(503, {"Retry-After": "3600"}), Answer(200, {}, html())])
    origin.on("GET", r"/whl/", lambda request: next(answers))
    origin.on("GET", r"/whl/.+/torch/", Answer(404))
    result = cli("compat", "check", *OFFLINE, "--index", f"{origin.url}/whl")
    assert waits == [MAX_RETRY_AFTER]
    assert (
        f"it answered 503; retrying in {MAX_RETRY_AFTER:.0f} s (attempt 2 of 4), {MAX_RETRY_AFTER:.0f} s of the {DEFAULT_RETRY_WAIT:.0f} s it may wait to retry"
    ) in result.err
    assert_one_failure(result, "none of")  # the index then answered, with no variant folder


def test_a_retry_after_past_the_deadline_fails_at_once(cli, origin, waits, monkeypatch):
    monkeypatch.setattr(bounded_http, "DEFAULT_DEADLINE", 30.0)
    origin.on("GET", r"/whl/", Answer(503, {"Retry-After": "50"}))
    result = cli("compat", "check", *OFFLINE, "--index", f"{origin.url}/whl")
    assert waits == []
    assert_one_failure(result, "it answered 503, and waiting 50 s to retry would pass the command's deadline of 30 s")


def test_an_index_that_keeps_asking_for_an_hour_costs_one_capped_wait(cli, origin, waits):
    """503 with Retry-After: 3600, every time: once waited 60 s a retry, three times, inside the 600 s deadline.
    The first wait is taken; the next would pass the retry budget and ends the command, saying how to raise it."""
    origin.on("GET", r"/whl/", Answer(503, {"Retry-After": "3600"}))
    result = cli("compat", "check", *OFFLINE, "--index", f"{origin.url}/whl")
    assert waits == [MAX_RETRY_AFTER] and len(origin.journal.seen) == 2
    assert_one_failure(
        result,
        "it answered 503, and waiting 60 s more to retry would pass the 90 s buildkit waits to retry it "
        "in all (waited 60 s so far; $BUILDKIT_RETRY_WAIT sets it)",
    )


def test_the_retry_budget_is_the_users_to_set(cli, origin, waits, monkeypatch):
    monkeypatch.setenv("BUILDKIT_RETRY_WAIT", "0")
    origin.on("GET", r"/whl/", Answer(503, {"Retry-After": "5"}))
    result = cli("compat", "check", *OFFLINE, "--index", f"{origin.url}/whl")
    assert waits == [] and len(origin.journal.seen) == 1
    assert_one_failure(result, "would pass the 0 s buildkit waits to retry it in all")


@pytest.mark.parametrize("value", ["soon", "-1", "nan", "inf", "9" * 400])
def test_a_retry_budget_that_is_not_seconds_is_one_input_error(cli, origin, monkeypatch, value):
    monkeypatch.setenv("BUILDKIT_RETRY_WAIT", value)
    result = cli("compat", "check", *OFFLINE, "--index", f"{origin.url}/whl")
    assert result.code == 2 and "Traceback" not in result.err, result.err
    assert result.err.startswith("error: $BUILDKIT_RETRY_WAIT: is ") and "a number of 0 or more" in result.err
    assert origin.journal.seen == []


@pytest.mark.parametrize("value", ["²", "¹²", "1e9", "Fri, 31 Dec 99999 23:59:59 GMT", "\x7f"])
def test_an_unreadable_retry_after_is_backoff_not_an_internal_error(cli, origin, waits, value):
    """Headers arrive as Latin-1: superscript digits are what a server can send that str.isdigit() accepts."""
    origin.on("GET", r"/whl/", Answer(429, {"Retry-After": value}))
    result = cli("compat", "check", *OFFLINE, "--index", f"{origin.url}/whl")
    assert len(waits) == 3 and all(wait < 5 for wait in waits), waits  # backoff with jitter: 0.5, 1, 2 s
    assert_one_failure(result, "the index answered 429")


def test_a_root_page_of_thousands_of_folders_is_refused_without_reading_them(cli, origin):
    origin.on("GET", r"/whl/", Answer(200, {}, html(*(f"cu{number}/" for number in range(1000, 4000)))))
    origin.on("GET", r"/whl/.+/torch/", Answer(404))
    result = cli("compat", "check", *OFFLINE, "--index", f"{origin.url}/whl")
    assert_one_failure(result, "variant folders to read, more than the 500 a wheel index can have")
    assert len(origin.journal.seen) == 1


def test_folder_names_of_5000_digits_are_no_variants(cli, origin):
    origin.on("GET", r"/whl/", Answer(200, {}, html("cu" + "1" * 5000 + "/", "rocm" + "7." * 3000 + "1/")))
    origin.on("GET", r"/whl/.+/torch/", Answer(404))
    result = cli("compat", "check", *OFFLINE, "--index", f"{origin.url}/whl")
    assert_one_failure(result, "has a torch page; is this a PyTorch wheel index?")


def test_wheel_names_with_5000_digit_versions_are_skipped(cli, origin, team_matrix):
    huge = "1" * 5000
    origin.on(
        "GET",
        r"/simple/timm/",
        Answer(
            200,
            {},
            html(
                f"timm-{huge}-py3-none-any.whl",
                f"timm-1.{huge}.tar.gz",
                "timm-1.0.9-py3-none-any.whl",
                "timm-1.0.10.tar.gz",
            ),
        ),
    )
    result = cli("lock", "--matrix", locking(team_matrix), "--package-index", f"{origin.url}/simple")
    assert result.code == 0, result.err
    assert "timm>=1.0 -> 1.0.10" in result.out


def test_a_token_in_pip_index_url_is_never_shown(cli, origin, team_matrix, monkeypatch):
    """PIP_INDEX_URL=http://user:TOKEN@host/simple is how CI hands pip a private index."""
    monkeypatch.setenv("PIP_INDEX_URL", f"http://robot:{TOKEN}@{origin.address}/simple")
    origin.on("GET", r"/simple/timm/", Answer(500, {}, f"upstream failed for robot:{TOKEN}".encode()))
    monkeypatch.setattr(bounded_http, "wait", lambda seconds: None)
    result = cli("lock", "--matrix", locking(team_matrix))
    assert_one_failure(result, f"http://****@{origin.address}/simple: GET http://****@{origin.address}/simple/timm/: the index answered 500")
    assert TOKEN not in result.err + result.out and "robot" not in result.err + result.out
    assert {seen.authorization for seen in origin.journal.seen} == {"Basic cm9ib3Q6Y2ktdG9rZW4tNWVjN2U3"}  # sent, to the index only

    origin.on("GET", r"/simple/timm/", Answer(200, {}, html("timm-0.9.0-py3-none-any.whl")))
    result = cli("lock", "--matrix", locking(team_matrix))
    assert result.code == 2 and f"no release on http://****@{origin.address}/simple satisfies it" in result.err
    assert TOKEN not in result.err + result.out
