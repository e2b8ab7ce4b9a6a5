"""Every GitHub Actions workflow validates against the GitHub workflow schema (check-jsonschema's vendored
copy, so offline), and the nightly one keeps the properties we rely on."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from testkit.runner import tool

WORKFLOWS = sorted((Path(__file__).resolve().parents[2] / ".github" / "workflows").glob("*.yml"))


@pytest.fixture(scope="module")
def checker() -> str:
    found = tool("check-jsonschema")
    if found is None:
        pytest.fail("check-jsonschema is missing: install the test extras")
    return found


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_matches_the_schema(checker, workflow):
    result = subprocess.run([checker, "--builtin-schema", "vendor.github-workflows", str(workflow)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_check_catches_a_broken_workflow(checker, tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  x:\n    runs-on: ubuntu-24.04\n    steps: nope\n")
    assert subprocess.run([checker, "--builtin-schema", "vendor.github-workflows", str(broken)], capture_output=True).returncode != 0


def test_nightly_workflow_shape():
    from ruamel.yaml import YAML  # installed with check-jsonschema

    text = (WORKFLOWS[0].parent / "nightly.yml").read_text()
    document = YAML(typ="safe").load(text)
    assert document["permissions"] == {"contents": "read"}
    assert "concurrency" in document and {"schedule", "workflow_dispatch"} <= set(document["on"])
    assert "buildkit plan --format github" in text and "--gpu require" in text
    assert document["jobs"]["tags"]["needs"] == "build"
