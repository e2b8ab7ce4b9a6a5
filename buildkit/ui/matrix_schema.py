"""The matrix schema for people and editors, made from the one place it lives (core/matrix/fields.py).

A JSON Schema of matrix.toml (draft 2020-12, as SchemaStore and the TOML language servers read it) and the
Markdown of docs/matrix-reference.md. Both are generated, and a test fails when the committed files fall behind
the fields. Pure.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from buildkit.core.matrix import fields
from buildkit.core.matrix.fields import REQUIRED, Field, Flag, Kind, Rules, Table, Text, Texts, Whole

if TYPE_CHECKING:
    from collections.abc import Mapping

SCHEMA_ID = "https://github.com/buildkit-images/buildkit/blob/main/docs/matrix.schema.json"
_PROBE = "\x00"  # no grammar accepts it: what a grammar says it expected instead describes it


def expected(kind: Text | Texts) -> str:
    """What a grammar accepts, in its own words ("a release version such as 2.14.1"); '' for any string."""
    return kind.grammar(_PROBE) or ""


def kind_schema(kind: Kind) -> dict[str, Any]:
    if isinstance(kind, Text):
        return _described({"type": "string"}, expected(kind))
    if isinstance(kind, Texts):
        item = _described({"type": "string"}, expected(kind))
        return {"type": "array", "items": item, "uniqueItems": True, **({} if kind.allow_empty else {"minItems": 1}), "maxItems": kind.most}
    if isinstance(kind, Flag):
        return {"type": "boolean"}
    if isinstance(kind, Whole):
        return {"type": "integer", "minimum": kind.low, "maximum": kind.high, "description": kind.expected}
    if isinstance(kind, Rules):
        rule = {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": False,
            "properties": {key: {"type": "string", "description": "a glob"} for key in fields.SELECTOR_KEYS},
        }
        return {"type": "array", "items": rule, "maxItems": kind.most}
    if isinstance(kind, Table):
        schema: dict[str, Any] = {"type": "object"}
        if kind.fields:
            schema["properties"] = {name: kind_schema(sub) for name, sub in kind.fields.items()}
            schema["additionalProperties"] = False
        if kind.each is not None:
            schema["additionalProperties"] = kind_schema(kind.each)
            schema["maxProperties"] = kind.most
        return schema
    raise TypeError(f"no JSON Schema for {type(kind).__name__}")  # a new kind must say how it reads


def _described(schema: dict[str, Any], text: str) -> dict[str, Any]:
    return {**schema, "description": text} if text else schema


def _field_schema(field: Field) -> dict[str, Any]:
    schema = kind_schema(field.kind)
    if field.doc:
        schema["description"] = field.doc + (f"; {schema['description']}" if "description" in schema else "")
    if field.default is not REQUIRED and field.default is not None:
        schema["default"] = field.default
    return schema


def matrix_json_schema() -> dict[str, Any]:
    """matrix.toml as JSON Schema: its top-level keys, each [[torch]] entry's, and [compat]."""
    top = {name: _field_schema(field) for name, field in fields.TOP.items()}
    stack = {name: _field_schema(field) for name, field in fields.STACK.items()}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "buildkit matrix",
        "description": "PyTorch x CUDA/ROCm x Python image matrix for buildkit (generated from buildkit/core/matrix/fields.py)",
        "type": "object",
        "properties": {
            **top,
            "torch": {
                "type": "array",
                "description": "one entry per torch release",
                "items": {"type": "object", "properties": stack, "required": ["version"], "additionalProperties": False},
            },
            "compat": {**kind_schema(fields.COMPAT), "description": "explicit overrides of the compatibility data"},
        },
        "additionalProperties": False,
    }


def schema_text() -> str:
    return json.dumps(matrix_json_schema(), indent=2, sort_keys=False) + "\n"


def _default(field: Field) -> str:
    if field.default is REQUIRED:
        return "required (or inherited through `extends`)"
    if field.default is None:
        return "-"
    return f"`{json.dumps(field.default)}`"


def _kind_text(kind: Kind) -> str:
    if isinstance(kind, Text):
        return expected(kind) or "a string"
    if isinstance(kind, Texts):
        return f"a list of at most {kind.most:,}: {expected(kind) or 'strings'}"
    if isinstance(kind, Flag):
        return "true or false"
    if isinstance(kind, Whole):
        return kind.expected
    if isinstance(kind, Rules):
        return f"a list of at most {kind.most:,} tables of {', '.join(fields.SELECTOR_KEYS)} = glob"
    if isinstance(kind, Table):
        return f"a table such as `{kind.example}`" if kind.example else "a table"
    return type(kind).__name__


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _rows(table: Mapping[str, Field]) -> list[str]:
    rows = ["| key | value | default | what |", "|---|---|---|---|"]
    for name, field in table.items():
        cell = _cell(_kind_text(field.kind))
        rows.append(f"| `{name}` | {cell} | {_cell(_default(field))} | {_cell(field.doc)} |")
    return rows


def reference_markdown() -> str:
    """The key tables of docs/matrix-reference.md."""
    stack_only = {name: field for name, field in fields.STACK.items() if name not in fields.TOP}
    inherited = ", ".join(f"`{name}`" for name in fields.INHERITED)
    lines = [
        "<!-- generated by `buildkit matrix schema --markdown` from buildkit/core/matrix/fields.py: edit the fields, not this table -->",
        "### Top-level keys",
        "",
        *_rows(fields.TOP),
        "",
        "### `[[torch]]` entries",
        "",
        f"Each entry names one torch release; it may also set any of the inherited keys ({inherited}) for itself.",
        "",
        *_rows(stack_only),
        "",
        "### `[compat]`",
        "",
        "Explicit overrides of the compatibility data, merged table by table over buildkit/data/compat.toml: "
        + ", ".join(f"`[compat.{name}]`" for name in fields.COMPAT.fields)
        + ".",
        "<!-- end of generated tables -->",
    ]
    return "\n".join(lines) + "\n"
