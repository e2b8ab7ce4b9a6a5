"""The JSON Schema of matrix files and the matrix reference are generated from core/matrix/fields.py: the committed
copies are current, editors that validate with the schema accept the shipped and documented matrices, and
the schema refuses what validation refuses."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from buildkit.adapters.files.bundled import tomllib
from buildkit.ui.matrix_schema import schema_text

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "matrix.schema.json").read_text())


def test_the_committed_schema_is_the_generated_one(cli):
    assert (ROOT / "docs" / "matrix.schema.json").read_text() == schema_text(), "run: buildkit matrix schema > docs/matrix.schema.json"
    printed = cli("matrix", "schema")
    assert printed.code == 0 and json.loads(printed.out) == SCHEMA


def test_the_default_matrix_is_valid_under_its_schema():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    data = tomllib.loads((ROOT / "matrix.toml").read_text())
    assert list(jsonschema.Draft202012Validator(SCHEMA).iter_errors(data)) == []


@pytest.mark.parametrize(
    "change, where",
    [
        ({"registy": "ghcr.io"}, "registy"),  # a misspelled key
        ({"run_as_root": "yes"}, "run_as_root"),
        ({"torch": [{"cuda": ["13.0"]}]}, "version"),  # an entry without its release
        ({"include": [{"pyton": "3.12"}]}, "pyton"),
    ],
)
def test_the_schema_refuses_what_validation_refuses(change, where):
    data = {**tomllib.loads((ROOT / "matrix.toml").read_text()), **change}
    errors = list(jsonschema.Draft202012Validator(SCHEMA).iter_errors(data))
    assert errors and any(where in error.message or where in str(list(error.path)) for error in errors)
