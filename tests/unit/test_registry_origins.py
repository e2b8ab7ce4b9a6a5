"""Credentials stay on their origin: fake registries, token services and CDNs on 127.0.0.1 (one origin per
port, some over TLS) record every Authorization header they receive, by origin."""

from __future__ import annotations

import pytest

from buildkit.adapters.registry import transport
from buildkit.adapters.registry.client import Credentials, Registry, RegistryError
from buildkit.adapters.registry.credentials import may_receive_credentials
from buildkit.adapters.registry.transport import Origin, UnsafeUrl, parse_url
from testkit.fake_registry import Answer, FakeOrigin, FakeRegistry, FakeTokenService, Journal, SelfSignedCert, json_answer

CREDENTIALS = Credentials("robot", "pa:ss@w0rd")


@pytest.fixture(scope="module")
def ca(tmp_path_factory):
    return SelfSignedCert(tmp_path_factory.mktemp("ca"))


@pytest.fixture
def journal():
    return Journal()


def client(registry: FakeOrigin, ca: SelfSignedCert | None = None, credentials=CREDENTIALS) -> Registry:
    return Registry(registry.address, credentials, insecure=registry.scheme == "http", retries=0, timeout=5, ca_bundle=ca.cert if ca else None)


def only_at(journal: Journal, origin: FakeOrigin, value: str) -> None:
    """`value` (an Authorization header) reached `origin` and no other origin."""
    holders = {where for where, values in journal.credentials_by_origin().items() if value in values}
    assert holders == {origin.url}


def test_decision_table():
    def o(url):
        return parse_url(url).origin

    https_registry, plain_local, plain_lan = o("https://ghcr.io"), o("http://127.0.0.1:5000"), o("http://10.0.0.5:5000")
    assert may_receive_credentials(https_registry, o("https://ghcr.io:443/token"))  # itself
    assert may_receive_credentials(https_registry, o("https://auth.example.com/token"))  # https elsewhere: its word holds
    assert not may_receive_credentials(https_registry, o("http://auth.example.com/token"))  # the password in clear
    assert not may_receive_credentials(https_registry, o("http://127.0.0.1:9/token"))
    assert may_receive_credentials(plain_local, o("http://127.0.0.1:5001/token"))  # both on this machine
    assert may_receive_credentials(plain_local, o("http://localhost:5001/token"))
    assert not may_receive_credentials(plain_local, o("http://evil.example.com/token"))
    assert not may_receive_credentials(plain_local, o("https://evil.example.com/token"))  # a plain challenge is anyone's
    assert may_receive_credentials(plain_lan, o("http://10.0.0.5:5000/token"))  # itself: the user chose plain http
    assert not may_receive_credentials(plain_lan, o("http://10.0.0.5:5001/token"))
    assert not may_receive_credentials(plain_lan, o("https://auth.example.com/token"))
    for refused in ("ftp://x/y", "http://x:99999/", "/relative"):
        with pytest.raises(UnsafeUrl):
            parse_url(refused)
    assert Origin("http", "::1", 5000).loopback and str(Origin("http", "::1", 5000)) == "http://[::1]:5000"


def test_token_service_over_https_elsewhere_gets_the_credentials_of_an_https_registry(ca, journal):
    with FakeRegistry(journal, tls=ca) as registry, FakeTokenService(registry, CREDENTIALS.basic, tls=ca) as tokens:
        registry.require_bearer(tokens.realm)
        registry.add_image("team/app", "1.0", {"a": "b"})
        assert client(registry, ca).image_labels("team/app", "1.0")[1] == {"a": "b"}
        only_at(journal, tokens, CREDENTIALS.basic)
        assert all(value.startswith("Bearer ") for value in journal.credentials_by_origin()[registry.url])


def test_plain_http_token_service_of_an_https_registry_is_refused_before_any_request(ca, journal):
    with FakeRegistry(journal, tls=ca) as registry, FakeTokenService(registry, CREDENTIALS.basic) as tokens:
        registry.require_bearer(tokens.realm)
        with pytest.raises(RegistryError) as caught:
            client(registry, ca).ping()
        message = str(caught.value)
        assert message.startswith(f"{registry.address}: GET /v2/: refusing to send the credentials")
        assert f"{tokens.url}/token" in message
        assert journal.at(tokens) == [] and CREDENTIALS.password not in message


def test_anonymous_client_fetches_tokens_anywhere_since_it_has_nothing_to_leak(journal):
    with FakeRegistry(journal) as registry, FakeTokenService(registry, None) as tokens:
        registry.require_bearer(tokens.realm)
        client(registry, credentials=None).ping()
        assert tokens.issued == 1 and not any(s.authorization for s in journal.at(tokens))


def test_local_registry_with_local_token_service_works_and_tokens_are_cached_per_scope(journal):
    with FakeRegistry(journal) as registry, FakeTokenService(registry, CREDENTIALS.basic) as tokens:
        registry.require_bearer(tokens.realm)
        registry.add_image("team/app", "1.0", {})
        registry.add_image("team/other", "1.0", {})
        reg = client(registry)
        for _ in range(3):
            reg.head_manifest("team/app", "1.0")
        reg.head_manifest("team/other", "1.0")
        assert tokens.issued == 2  # one per scope
        only_at(journal, tokens, CREDENTIALS.basic)


def test_an_expired_token_is_fetched_again_once(journal):
    with FakeRegistry(journal) as registry, FakeTokenService(registry, CREDENTIALS.basic) as tokens:
        registry.require_bearer(tokens.realm)
        registry.add_image("team/app", "1.0", {})
        reg = client(registry)
        reg.head_manifest("team/app", "1.0")
        registry.tokens.clear()  # every token issued so far expires
        assert reg.head_manifest("team/app", "1.0")
        assert tokens.issued == 2


def test_basic_auth_is_sent_upfront_after_the_first_challenge(journal):
    with FakeRegistry(journal) as registry:
        registry.require_basic(CREDENTIALS.basic)
        registry.add_image("team/app", "1.0", {})
        reg = client(registry)
        reg.ping()
        before = reg.requests
        reg.head_manifest("team/app", "1.0")
        assert reg.requests == before + 1  # no second challenge


def test_redirect_to_another_origin_carries_no_credentials(journal):
    with FakeRegistry(journal) as registry, FakeOrigin(journal) as cdn:
        registry.require_basic(CREDENTIALS.basic)
        digest = registry.add_image("team/app", "1.0", {"via": "cdn"})
        config_digest = next(iter(registry.blobs))
        cdn.on("GET", r"/blob", Answer(200, {}, registry.blobs[config_digest]))
        registry.on("GET", rf"/v2/team/app/blobs/{config_digest}", registry.guarded(lambda request: Answer(307, {"Location": f"{cdn.url}/blob"})))
        assert client(registry).image_labels("team/app", "1.0") == (digest, {"via": "cdn"})
        assert [s.path for s in journal.at(cdn)] == ["/blob"]
        assert journal.credentials_by_origin().get(cdn.url) is None


def test_redirect_on_the_same_origin_keeps_the_credentials(journal):
    with FakeRegistry(journal) as registry:
        registry.require_basic(CREDENTIALS.basic)
        registry.add_image("team/app", "1.0", {"here": "yes"})
        config_digest = next(iter(registry.blobs))
        registry.on("GET", r"/elsewhere", registry.guarded(lambda request: Answer(200, {}, registry.blobs[config_digest])))
        registry.on("GET", rf"/v2/team/app/blobs/{config_digest}", registry.guarded(lambda request: Answer(302, {"Location": "/elsewhere"})))
        assert client(registry).image_labels("team/app", "1.0")[1] == {"here": "yes"}


def test_netrc_credentials_are_never_added_for_hosts_the_registry_names(journal, tmp_path, monkeypatch):
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login netrc-user password netrc-secret\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    with FakeRegistry(journal) as registry:
        client(registry, credentials=None).ping()
    assert journal.credentials_by_origin() == {}


def test_off_origin_link_is_refused_and_never_requested(journal):
    with FakeRegistry(journal) as registry, FakeOrigin(journal) as elsewhere:
        registry.require_basic(CREDENTIALS.basic)
        registry.on(
            "GET",
            r"/v2/team/app/tags/list",
            registry.guarded(
                lambda request: json_answer({"name": "team/app", "tags": ["a"]}, Link=f'<{elsewhere.url}/v2/team/app/tags/list?last=a>; rel="next"')
            ),
        )
        with pytest.raises(RegistryError, match="the next page is on another origin"):
            client(registry).list_tags("team/app")
        assert journal.at(elsewhere) == []


def test_self_referencing_link_stops_at_once(journal):
    with FakeRegistry(journal) as registry:
        registry.on(
            "GET",
            r"/v2/team/app/tags/list",
            lambda request: json_answer({"name": "team/app", "tags": ["a"]}, Link='</v2/team/app/tags/list?n=100>; rel="next"'),
        )
        with pytest.raises(RegistryError, match="the listing loops") as caught:
            client(registry).list_tags("team/app")
        assert str(caught.value).startswith(f"{registry.address}: GET /v2/team/app/tags/list?n=100:")
        assert len(journal.at(registry)) == 1


def test_two_pages_pointing_at_each_other_stop(journal):
    with FakeRegistry(journal) as registry:

        def page(request):
            other = "b" if request.query.get("last") != "b" else "a"
            return json_answer({"tags": [other]}, Link=f'</v2/team/app/tags/list?last={other}>; rel="next"')

        registry.on("GET", r"/v2/team/app/tags/list", page)
        with pytest.raises(RegistryError, match="the listing loops"):
            client(registry).list_tags("team/app")
        assert len(journal.at(registry)) == 3


def test_endless_distinct_pages_stop_at_the_page_cap(journal, monkeypatch):
    monkeypatch.setattr(transport, "MAX_PAGES", 25)
    with FakeRegistry(journal) as registry:
        registry.on(
            "GET",
            r"/v2/team/app/tags/list",
            lambda request: json_answer({"tags": ["t"]}, Link=f'</v2/team/app/tags/list?last={int(request.query.get("last", 0)) + 1}>; rel="next"'),
        )
        with pytest.raises(RegistryError, match="more than 25 pages"):
            client(registry).list_tags("team/app")
        assert len(journal.at(registry)) == 25


def test_pagination_on_the_registry_collects_every_page(journal):
    with FakeRegistry(journal) as registry:

        def page(request):
            start = int(request.query.get("last", 0))
            link = {"Link": f'</v2/team/app/tags/list?n=2&last={start + 2}>; rel="next"'} if start < 4 else {}
            return json_answer({"tags": [f"t{start}", f"t{start + 1}"]}, **link)

        registry.on("GET", r"/v2/team/app/tags/list", page)
        assert client(registry).list_tags("team/app") == ["t0", "t1", "t2", "t3", "t4", "t5"]


def test_redirect_loops_and_non_http_locations_are_refused(journal):
    with FakeRegistry(journal) as registry:
        registry.on("GET", r"/v2/", Answer(302, {"Location": "/v2/"}))
        with pytest.raises(RegistryError, match="more than 5 redirects"):
            client(registry).ping()
        registry.on("GET", r"/v2/", Answer(302, {"Location": "file:///etc/passwd"}))
        with pytest.raises(RegistryError, match="not an http"):
            client(registry).ping()


def test_an_untrusted_certificate_is_one_clear_error_and_no_retry(ca, journal, monkeypatch):
    monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
    monkeypatch.delenv("CURL_CA_BUNDLE", raising=False)
    with FakeRegistry(journal, tls=ca) as registry:
        reg = Registry(registry.address, CREDENTIALS, insecure=False, retries=3, timeout=5)
        with pytest.raises(RegistryError, match=r"GET /v2/: the TLS connection failed .* \$REQUESTS_CA_BUNDLE"):
            reg.ping()
        assert reg.requests == 1 and journal.credentials_by_origin() == {}


def test_a_token_service_redirecting_elsewhere_sends_no_credentials_along(journal):
    with FakeRegistry(journal) as registry, FakeTokenService(registry, CREDENTIALS.basic) as tokens, FakeTokenService(registry, None) as elsewhere:
        registry.require_bearer(tokens.realm)
        tokens.on("GET", r"/token", lambda request: Answer(307, {"Location": f"{elsewhere.url}/token?{request.path.split('?')[1]}"}))
        client(registry).ping()
        assert elsewhere.issued == 1 and not any(s.authorization for s in journal.at(elsewhere))
        only_at(journal, tokens, CREDENTIALS.basic)
