"""Properties of every matrix, generated with Hypothesis.

- A valid matrix (drawn over the real compatibility data: its releases, Pythons, backend versions, arch lists)
  validates, and each Dockerfile it renders has the instruction sequence and line count of the same target
  rendered with every free-text value (registry, packages, user, base images, URLs...) replaced by a benign
  placeholder: no value added or removed an instruction or a line.
- A mutated matrix (a value replaced by random text with control characters, a wrong type, a deep structure;
  a random key added; a key removed) either has that property too, or is refused by `buildkit matrix
  validate` with exit 2 and errors that each name a key path, never a traceback or an internal error.

Settings: derandomized and without an example database, so every run (and CI) tries the same examples and a
failure is reproduced by running the test again; Hypothesis prints the failing matrix, shrunk.
"""

from __future__ import annotations

import copy
import datetime
import math
import re
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from buildkit.adapters.files.bundled import compat_data
from buildkit.app.targets import Choices, select_targets
from buildkit.core.bases import base_environment
from buildkit.core.matrix.fields import TOP
from buildkit.errors import UserError

SETTINGS = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
FACTS = compat_data()
# Every character a line break can be made of, for Python (str.splitlines), Docker (\n) or an editor.
LINE_BREAK = re.compile(r"\r\n|[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")
KEY_PATH = re.compile(r"(?::\d+)?: (\S+): ")


# --- writing TOML (the test extra has no TOML writer; this one writes every value inline) -------------------


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    if isinstance(value, list):
        return "[" + ", ".join(map(toml_value, value)) + "]"
    return "{ " + ", ".join(f"{toml_string(key)} = {toml_value(item)}" for key, item in value.items()) + " }"


def toml_string(value: str) -> str:
    escapes = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    return '"' + "".join(escapes.get(c, f"\\u{ord(c):04x}" if ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F else c) for c in value) + '"'


def toml_document(matrix: dict) -> str:
    return "".join(f"{toml_string(key)} = {toml_value(value)}\n" for key, value in matrix.items())


# --- valid matrices over the real compatibility data -----------------------------------------------------------

NAME = st.from_regex(r"[a-z][a-z0-9]{0,7}", fullmatch=True)
DEBIAN = st.from_regex(r"[a-z0-9][a-z0-9+.-]{1,12}", fullmatch=True)
REQUIREMENT = st.builds(
    lambda name, extra, spec: name + extra + spec,
    NAME.filter(lambda n: n != "torch"),
    st.sampled_from(["", "[cli]", "[a,b]"]),
    st.sampled_from(["", "==1.0", ">=2", "~=0.8.1", ">=1,<3", "!=2.0.*"]),
)
HOST = st.from_regex(r"[a-z0-9]{1,8}(\.[a-z0-9]{1,8}){0,2}(:[0-9]{2,5})?", fullmatch=True)
URL = st.builds(
    lambda host, path: f"https://{host}/{path}",
    st.from_regex(r"[a-z0-9]{1,8}\.[a-z]{2,4}", fullmatch=True),
    st.from_regex(r"[a-z0-9/_.-]{0,20}", fullmatch=True),
)
IMAGE = st.builds(
    lambda repo, tag: f"{repo}:{tag}",
    st.from_regex(r"[a-z0-9]{1,8}(/[a-z0-9]{1,8}){0,2}", fullmatch=True),
    st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,15}", fullmatch=True),
)


def subset(items, min_size=1, max_size=None):
    items = list(items)
    return st.lists(st.sampled_from(items), min_size=min_size, max_size=max_size or len(items), unique=True).map(
        lambda chosen: [item for item in items if item in chosen]
    )


@st.composite
def stacks(draw, minor: str) -> dict:
    release = FACTS["torch"][minor]
    stack: dict[str, Any] = {"version": draw(st.sampled_from(release["releases"]))}
    backends = {}
    for backend in ("cuda", "rocm"):
        backends[backend] = draw(subset(release[backend], min_size=0, max_size=2))
        stack[backend] = backends[backend]
    # the default python list serves a release that has wheels for all of it (2.15 has none for 3.10)
    if draw(st.booleans()) or not set(TOP["python"].default) <= set(release["python"]):
        stack["python"] = draw(subset(release["python"], max_size=2))
    if draw(st.booleans()):
        stack["packages"] = draw(st.lists(REQUIREMENT, max_size=3, unique_by=lambda r: re.split(r"[\[=<>!~]", r)[0]))
    if draw(st.booleans()):
        stack["os_packages"] = draw(st.lists(DEBIAN, max_size=3, unique=True))
    if draw(st.booleans()):
        stack["channel"] = draw(st.sampled_from(["release", "test", "nightly"]))
    archs = {}
    for backend, versions in backends.items():
        common = [a for a in FACTS[backend][versions[0]]["archs"] if all(a in FACTS[backend][v]["archs"] for v in versions)] if versions else []
        if common and draw(st.booleans()):
            archs[backend] = draw(subset(common, max_size=3))
    if archs:
        stack["archs"] = archs
    pair = {backend: draw(st.sampled_from(versions)) for backend, versions in backends.items() if versions and draw(st.booleans())}
    if pair:
        stack["pair"] = pair
    return stack


@st.composite
def valid_matrices(draw) -> dict:
    minors = draw(subset([m for m, facts in FACTS["torch"].items() if facts.get("releases")], max_size=2))
    matrix: dict[str, Any] = {
        "schema": 1,
        "registry": draw(HOST),
        "repository": draw(st.from_regex(r"[a-z0-9]{1,8}(/[a-z0-9]{1,8}){0,2}", fullmatch=True)),
        "source": draw(URL),
        "torch": [draw(stacks(minor)) for minor in minors],
    }
    optional = {
        "tag_prefix": st.from_regex(r"[a-z0-9][a-z0-9-]{0,7}", fullmatch=True),
        "wheel_index": URL,
        "runtime_base": IMAGE.map(lambda image: image.replace(":", ":{python}-", 1)),
        "source_runtime_base": IMAGE,
        "user": st.fixed_dictionaries({"name": st.from_regex(r"[a-z_][a-z0-9_-]{0,10}", fullmatch=True), "uid": st.integers(1, 65534)}),
        "run_as_root": st.booleans(),
        "compile": st.booleans(),
        "flavors": subset(["runtime", "devel", "source"]),
        "os_packages": st.lists(DEBIAN, max_size=3, unique=True),
        "packages": st.lists(REQUIREMENT, max_size=2, unique_by=lambda r: re.split(r"[\[=<>!~]", r)[0]),
        "exclude": st.lists(st.fixed_dictionaries({"python": st.sampled_from(["3.10", "3.1[13]", "3.9*"])}), max_size=1),
        "compat": st.fixed_dictionaries(
            {},
            optional={
                "wheel_index": st.fixed_dictionaries(
                    {}, optional={"url": URL, "channels": st.fixed_dictionaries({}, optional={"test": st.from_regex(r"[a-z0-9]{1,6}/", fullmatch=True)})}
                ),
                "cuda": st.fixed_dictionaries({"13.0": st.fixed_dictionaries({"devel_base": IMAGE.map(lambda i: i + "-ubuntu24.04")})}),
            },
        ),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            matrix[key] = draw(strategy)
    return matrix


# --- free text replaced by placeholders -----------------------------------------------------------------------------


def benign(matrix: dict) -> dict:
    """The same matrix with every free-text value replaced by a plain placeholder of the same kind (the
    structure, versions, flavors and lists' lengths kept), so it renders the same instructions."""
    plain = dict(matrix.items())
    placeholders = {
        "registry": "registry.example",
        "repository": "team/images",
        "source": "https://example.com/src",
        "wheel_index": "https://index.example/whl",
        "runtime_base": "python:{python}-slim",
        "source_runtime_base": "python:3.12-slim",
    }
    plain.update({key: value for key, value in placeholders.items() if isinstance(plain.get(key), str)})
    for key in ("runtime_base", "source_runtime_base"):  # a base buildkit knows is assembled on; others keep FROM
        if isinstance(matrix.get(key), str) and base_environment(matrix[key].replace("{python}", "3.12")) is None:
            plain[key] = "vendor/" + plain[key]
    if isinstance(plain.get("user"), dict) and isinstance(plain["user"].get("name"), str):
        plain["user"] = {**plain["user"], "name": "someone"}

    def lists_of(entry: dict) -> dict:
        entry = dict(entry)
        for key, stem in (("packages", "pkg"), ("os_packages", "deb")):
            if isinstance(entry.get(key), list):
                entry[key] = [f"{stem}{index}" for index in range(len(entry[key]))]
        return entry

    plain = lists_of(plain)
    if isinstance(plain.get("torch"), list):
        plain["torch"] = [lists_of(entry) if isinstance(entry, dict) else entry for entry in plain["torch"]]
    compat = plain.get("compat")
    if isinstance(compat, dict):
        compat = plain["compat"] = dict(compat)
        index = compat.get("wheel_index")
        if isinstance(index, dict):
            index = compat["wheel_index"] = dict(index)
            if isinstance(index.get("url"), str):
                index["url"] = "https://index.example/whl"
            if isinstance(index.get("channels"), dict):
                index["channels"] = {name: ("c/" if path else path) for name, path in index["channels"].items()}
        for backend in ("cuda", "rocm"):
            if isinstance(compat.get(backend), dict):
                compat[backend] = {
                    version: {**facts, "devel_base": "vendor/devel:1-ubuntu24.04"} if isinstance(facts, dict) and "devel_base" in facts else facts
                    for version, facts in compat[backend].items()
                }
    return plain


def instructions(dockerfile: str) -> list[str]:
    """The Dockerfile's instruction keywords in order, continuation lines joined and comments skipped."""
    found, continued = [], False
    for line in dockerfile.split("\n"):
        stripped = line.strip()
        if not continued and stripped and not stripped.startswith("#"):
            found.append(stripped.split(None, 1)[0].upper())
        if not stripped.startswith("#"):
            continued = stripped.endswith("\\")
    return found


def renderings(path: Path) -> dict[tuple, tuple[list[str], int]]:
    """Each target (by what it is, not by its tags) -> its Dockerfile's instructions and line count. A valid
    matrix that describes no target at all (no backend version, or excludes that remove them all) is refused
    for that, and only that: {"refused": the messages}."""
    try:
        rendered = select_targets(Choices(matrix=path)).render()
    except UserError as error:
        messages = tuple(problem.message for problem in error.problems)
        if not all("describes no target" in message or "removes the last targets" in message for message in messages):
            raise
        return {("refused",): (list(messages), 0)}
    return {
        (t.target.torch, t.target.backend, t.target.backend_version, t.target.python, t.target.flavor): (
            instructions(t.dockerfile),
            len(LINE_BREAK.split(t.dockerfile)),
        )
        for t in rendered
    }


def assert_renders_like_placeholders(folder: Path, matrix: dict) -> None:
    path, reference = folder / "matrix.toml", folder / "benign.toml"
    path.write_text(toml_document(matrix), encoding="utf-8")
    reference.write_text(toml_document(benign(matrix)), encoding="utf-8")
    rendered = renderings(path)
    assert rendered == renderings(reference)
    for subject, (keywords, _) in rendered.items():
        assert subject == ("refused",) or (keywords[0] == "FROM" and keywords[-1] == "CMD"), keywords


# --- the properties ------------------------------------------------------------------------------------------------


@pytest.mark.slow
@SETTINGS
@given(valid_matrices())
def test_valid_matrix_renders_the_instructions_of_its_placeholders(matrix):
    with tempfile.TemporaryDirectory() as folder:
        assert_renders_like_placeholders(Path(folder), matrix)  # a UserError here: a valid matrix refused


HOSTILE_TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
CONTROL = st.sampled_from(["\n", "\r", "\r\n", "\0", "\t", "\x0b", "\x1b", "\x85", "\u2028", "\u2029", "\u200b", "\ufeff", " ", "$(id)", '"', "\\", "${HOME}"])
SCALARS = st.one_of(
    HOSTILE_TEXT,
    st.integers(-(2**63), 2**63 - 1),
    st.floats(),
    st.booleans(),
    st.dates(),
    st.sampled_from(["9" * 5000, "2.14.1\nRUN id", "..", "/", "default", "*", "2.14.01", "13.0.0"]),
)
HOSTILE_VALUES = st.one_of(
    SCALARS,
    st.recursive(SCALARS, lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(HOSTILE_TEXT, children, max_size=3)), max_leaves=6),
    st.integers(1, 60).map(lambda depth: nested(depth)),
)


def nested(depth: int) -> list:
    """[[[...]]]: arrays nested `depth` deep."""
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a parsed matrix: dict keys and list indices, outermost first."""
    found = []
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found.append((*prefix, key))
        found.extend(paths(item, (*prefix, key)))
    return found


def mutate(matrix: dict, path: tuple, kind: str, value: Any) -> dict:
    mutated = copy.deepcopy(matrix)
    parent = mutated
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if kind == "delete":
        del parent[last]
    elif kind == "insert":
        key, item = value
        if isinstance(parent[last], dict):
            parent[last][key] = item
        else:
            parent[last] = item
    elif kind == "append":
        parent[last] = parent[last] + value if isinstance(parent[last], str) else value
    else:
        parent[last] = value
    return mutated


@st.composite
def mutated_matrices(draw) -> dict:
    matrix = draw(valid_matrices())
    path = draw(st.sampled_from(paths(matrix)))
    kind = draw(st.sampled_from(["replace", "append", "insert", "delete"]))
    value = {"append": CONTROL, "insert": st.tuples(HOSTILE_TEXT, HOSTILE_VALUES)}.get(kind, HOSTILE_VALUES)
    return mutate(matrix, path, kind, draw(value))


@pytest.mark.slow
@SETTINGS
@given(mutated_matrices())
def test_mutated_matrix_renders_safely_or_is_refused_with_keys(cli, matrix):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "matrix.toml"
        path.write_text(toml_document(matrix), encoding="utf-8")
        result = cli("matrix", "validate", "--matrix", path)
        assert "Traceback" not in result.err and "internal error" not in result.err, result.err
        event("accepted" if result.code == 0 else "refused")
        if result.code == 0:
            assert_renders_like_placeholders(Path(folder), matrix)
            return
        assert result.code == 2 and result.out == "", (result.code, result.out, result.err)
        shown = f"error: {path}"
        for line in result.err.splitlines():
            assert line.startswith(shown) and KEY_PATH.match(line[len(shown) :]), f"not located at a key: {line!r}"
