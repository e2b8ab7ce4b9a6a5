"""Every GitHub Actions workflow validates against the GitHub workflow schema (check-jsonschema's vendored
copy, so offline), and the nightly one keeps the properties we rely on."""

from __future__ import annotations

import re
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
    jobs = document["jobs"]
    assert document["permissions"] == {"contents": "read"}
    assert "concurrency" in document and {"schedule", "workflow_dispatch"} <= set(document["on"])
    assert "buildkit plan --matrix matrix.toml --format github" in text and "buildkit lock" in text
    build = " ".join(step.get("run", "") for step in jobs["build"]["steps"])
    assert "--gpu require" in build and "--keyless" in build and '--channel "$CHANNEL"' in build
    assert jobs["build"]["permissions"]["id-token"] == "write"
    # the tag job never builds: it moves tags for published, GPU-attested images only, on the same channel
    tags = " ".join(step.get("run", "") for step in jobs["tags"]["steps"])
    assert jobs["tags"]["needs"] == "build" and "--require-published" in tags and '--channel "$CHANNEL"' in tags
    assert "--gpu skip" not in text and "--gpu-gate off" not in text


def test_no_expression_inside_a_run_script_and_actions_pinned_by_commit():
    from ruamel.yaml import YAML

    for workflow in WORKFLOWS:
        for job in YAML(typ="safe").load(workflow.read_text())["jobs"].values():
            for step in job.get("steps", []):
                assert "${{" not in step.get("run", ""), (workflow.name, step)
                if "uses" in step:
                    assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", step["uses"]), step["uses"]
                if step.get("uses", "").startswith("actions/checkout@"):
                    assert step["with"]["persist-credentials"] is False


def test_zizmor_finds_nothing_at_medium_or_above():
    zizmor = tool("zizmor")
    if zizmor is None:
        pytest.fail("zizmor is missing: install the test extras")
    result = subprocess.run([zizmor, "--offline", "--min-severity", "medium", *map(str, WORKFLOWS)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
