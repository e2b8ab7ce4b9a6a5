"""Generated registry answers never crash the client: for any sequence of statuses, headers and bodies a
scripted origin on 127.0.0.1 sends, every client operation returns or raises RegistryError / UserError,
and no message carries the credentials. Hypothesis generates the answers, mixing well-formed manifests,
indexes, configs, tag lists and tokens with damaged ones and plain noise."""

from __future__ import annotations

import hashlib
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from buildkit.adapters.registry.client import MANIFEST_TYPES, Credentials, Manifest, Registry
from buildkit.adapters.registry.deletion import deletion_for
from buildkit.errors import UserError
from testkit.fake_registry import Answer, FakeOrigin, Request

CREDENTIALS = Credentials("robot", "hyp-s3cret:@pw")
SECRETS = (CREDENTIALS.password, CREDENTIALS.basic.split()[1])
DIGEST = "sha256:" + "d" * 64


class Script:
    """The answers of one example, in order (the last repeats); placeholders filled at answer time:
    SELF, this origin's URL; BODY, the body's own digest."""

    def __init__(self):
        self.answers: list[Answer] = [Answer()]

    def __call__(self, request: Request, url: str) -> Answer:
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        body = answer.body if isinstance(answer.body, bytes) else b""
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        headers = {key: value.replace("SELF", url).replace("BODY", digest) for key, value in answer.headers.items()}
        return Answer(answer.status, headers, body.replace(b"BODY", digest.encode()), answer.length)


@pytest.fixture(scope="module")
def origin():
    script = Script()
    with FakeOrigin() as fake:
        fake.on("*", r".*", lambda request: script(request, fake.url))
        fake.script = script
        yield fake


header_text = st.text(st.characters(min_codepoint=32, max_codepoint=255, exclude_characters="\x7f"), max_size=40)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 2**70) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3),
    max_leaves=6,
)
digests = st.sampled_from([DIGEST, "BODY", "sha256:abc", "../../x", "", "sha512:" + "e" * 128]) | header_text
platforms = (
    st.fixed_dictionaries(
        {"os": st.sampled_from(["linux", "unknown", "windows"]), "architecture": st.sampled_from(["amd64", "arm64", "unknown", "arm"])},
        optional={"variant": st.sampled_from(["v8", "v7", ""])},
    )
    | json_values
)
descriptors = (
    st.fixed_dictionaries(
        {"digest": digests},
        optional={
            "mediaType": st.sampled_from(MANIFEST_TYPES),
            "size": st.integers(0, 10**6),
            "platform": platforms,
            "annotations": st.just({"vnd.docker.reference.type": "attestation-manifest"}) | json_values,
        },
    )
    | json_values
)
documents = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "schemaVersion": st.just(2),
            "mediaType": st.sampled_from(MANIFEST_TYPES) | header_text,
            "config": descriptors,
            "layers": st.lists(descriptors, max_size=2),
            "manifests": st.lists(descriptors, max_size=3) | json_values,
        },
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "os": st.sampled_from(["linux"]) | json_values,
            "architecture": st.just("amd64"),
            "config": st.fixed_dictionaries({}, optional={"Labels": st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3) | json_values})
            | json_values,
        },
    ),
    st.fixed_dictionaries({}, optional={"name": json_values, "tags": st.lists(st.text(max_size=8), max_size=3) | json_values}),
    st.fixed_dictionaries({}, optional={"token": st.sampled_from(["tok3n", "a b", ""]) | json_values, "access_token": json_values}),
    st.fixed_dictionaries(
        {}, optional={"errors": st.lists(st.fixed_dictionaries({"code": st.sampled_from(["UNSUPPORTED", "DENIED"]) | json_values}), max_size=2) | json_values}
    ),
    st.lists(st.fixed_dictionaries({"id": st.integers(0, 9) | json_values, "name": digests}), max_size=3),
)
bodies = st.one_of(
    documents.map(lambda d: json.dumps(d).encode()),
    st.binary(max_size=120),
    st.sampled_from([b"<html><body>login</body></html>", b'{"schemaVersion": 2, "conf', b"", b"BODY"]),
)
headers = st.fixed_dictionaries(
    {},
    optional={
        "Content-Type": st.sampled_from([*MANIFEST_TYPES, "application/json", "text/html", "", "x/y; charset=\xff"]),
        "Docker-Content-Digest": digests,
        "Link": st.sampled_from(
            [
                '<SELF/v2/team/app/tags/list?last=a>; rel="next"',
                '</v2/team/app/tags/list?n=100>; rel="next"',
                '<http://127.0.0.1:1/x>; rel="next"',
                "<>; rel=next",
                '<SELF/next>; rel="prev"',
            ]
        )
        | header_text,
        "WWW-Authenticate": st.sampled_from(
            [
                'Bearer realm="SELF/token",service="s"',
                'Bearer realm="http://192.0.2.1/token"',
                'Bearer realm="https://127.0.0.1:1/t"',
                "Basic realm=x",
                "Bearer",
                "Negotiate",
            ]
        )
        | header_text,
        "Location": st.sampled_from(["/v2/", "SELF/elsewhere", "http://127.0.0.1:1/x", "ftp://x/", "", "http://[::1"]) | header_text,
        "Retry-After": st.sampled_from(["0", "1", "x", "99999"]),
        "Transfer-Encoding": st.sampled_from(["chunked", "gzip"]),
        "Content-Encoding": st.sampled_from(["gzip", "br"]),
    },
)
answers = st.builds(
    Answer,
    status=st.sampled_from([200, 200, 200, 201, 202, 204, 206, 301, 302, 303, 307, 308, 400, 401, 403, 404, 405, 429, 500, 503, 599]),
    headers=headers,
    body=bodies,
    length=st.sampled_from(["auto", "auto", "auto", None, 0, 7, 1000, "-1", "abc"]),
)

OPERATIONS = {
    "ping": lambda r: r.ping(),
    "head": lambda r: r.head_manifest("team/app", "1.0"),
    "head by digest": lambda r: r.head_manifest("team/app", DIGEST),
    "find": lambda r: r.find_manifest("team/app", "1.0"),
    "labels": lambda r: r.image_labels("team/app", "1.0"),
    "labels arm64": lambda r: r.image_labels("team/app", "1.0", platform="linux/arm64"),
    "per platform": lambda r: r.platform_labels("team/app", "1.0"),
    "resolve": lambda r: r.resolve_digest("team/app", DIGEST, "linux/arm64"),
    "tags": lambda r: r.list_tags("team/app"),
    "put": lambda r: r.put_manifest("team/app", "2.0", Manifest(DIGEST, MANIFEST_TYPES[0], b"{}")),
    "delete": lambda r: deletion_for(r, github_api=r.base).delete("octo/app", DIGEST),
}


@pytest.mark.slow
@settings(max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(script=st.lists(answers, min_size=1, max_size=5), operation=st.sampled_from(sorted(OPERATIONS)))
def test_generated_answers_never_crash_the_client(origin, script, operation):
    origin.script.answers = script
    client = Registry(origin.address, CREDENTIALS, retries=1, timeout=2, budget=30, sleep=lambda seconds: None)
    try:
        OPERATIONS[operation](client)
    except UserError as error:  # RegistryError included
        message = str(error)
        assert not any(secret in message for secret in SECRETS), message
        assert message.startswith(f"{origin.address}: "), message
