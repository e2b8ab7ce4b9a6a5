"""Every GitHub Actions workflow and composite action validates against GitHub's schemas (check-jsonschema's
vendored copies, so offline) and passes zizmor, and the workflows keep the properties we rely on."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from testkit.runner import tool

GITHUB = Path(__file__).resolve().parents[2] / ".github"
WORKFLOWS = sorted((GITHUB / "workflows").glob("*.yml"))
ACTIONS = sorted((GITHUB / "actions").glob("*/action.yml"))
SETUP = "./.github/actions/setup-buildkit"


@pytest.fixture(scope="module")
def checker() -> str:
    found = tool("check-jsonschema")
    if found is None:
        pytest.fail("check-jsonschema is missing: install the test extras")
    return found


@pytest.mark.slow
@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_matches_the_schema(checker, workflow):
    result = subprocess.run([checker, "--builtin-schema", "vendor.github-workflows", str(workflow)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("action", ACTIONS, ids=lambda p: p.parent.name)
def test_action_matches_the_schema(checker, action):
    result = subprocess.run([checker, "--builtin-schema", "vendor.github-actions", str(action)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
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
    # compat check runs first and turns what the indexes published into a pull request; plan waits for it
    compat = " ".join(step.get("run", "") for step in jobs["compat"]["steps"])
    assert "buildkit compat check --write" in compat and "gh pr create" in compat
    assert jobs["compat"]["permissions"] == {"contents": "write", "pull-requests": "write"} and jobs["plan"]["needs"] == "compat"
    # the page: after the tag job, from the reports and the registry's verified documents, published to GitHub Pages
    pages = " ".join(step.get("run", "") for step in jobs["pages"]["steps"])
    assert jobs["pages"]["needs"] == ["build", "tags"] and "buildkit report" in pages and "--html site" in pages
    assert "buildkit verify" in pages and "--certificate-identity" in pages and "buildkit sbom" in pages
    assert jobs["pages"]["permissions"] == {"contents": "read", "packages": "read", "pages": "write", "id-token": "write"}
    assert any(step.get("uses", "").startswith("actions/deploy-pages@") for step in jobs["pages"]["steps"])
    # a second, evening schedule runs the compat job alone: a release published in the (UTC) afternoon becomes its
    # pull request the same day; nothing is built or tagged on that run
    crons = [entry["cron"] for entry in document["on"]["schedule"]]
    evening = next(cron for cron in crons if int(cron.split()[1]) >= 16)
    assert len(crons) == 2 and "if" not in jobs["compat"]
    for name in ("plan", "tags", "pages"):
        assert f"github.event.schedule != '{evening}'" in jobs[name]["if"], name


def _steps():
    from ruamel.yaml import YAML

    for workflow in WORKFLOWS:
        for job in YAML(typ="safe").load(workflow.read_text())["jobs"].values():
            for step in job.get("steps", []):
                yield workflow.name, step
    for action in ACTIONS:
        for step in YAML(typ="safe").load(action.read_text())["runs"]["steps"]:
            yield action.parent.name, step


def test_no_expression_inside_a_run_script_and_actions_pinned_by_commit():
    steps = list(_steps())
    assert {where for where, _ in steps} >= {"ci.yml", "nightly.yml", "setup-buildkit"}
    for where, step in steps:
        assert "${{" not in step.get("run", ""), (where, step)
        if "uses" in step and not step["uses"].startswith("./"):  # a local action is this commit's own
            # owner/repo, or an action in a folder of it (actions/cache/restore), at a full commit
            assert re.fullmatch(r"[\w.-]+/[\w.-]+(/[\w.-]+)*@[0-9a-f]{40}", step["uses"]), step["uses"]
        if step.get("uses", "").startswith("actions/checkout@"):
            assert step["with"]["persist-credentials"] is False


def test_nightly_jobs_share_one_set_up():
    """Each job checks out, then takes the composite action's set-up instead of repeating Python, cosign and
    the install in every job."""
    from ruamel.yaml import YAML

    jobs = YAML(typ="safe").load((GITHUB / "workflows" / "nightly.yml").read_text())["jobs"]
    for name, job in jobs.items():
        uses = [step.get("uses", "") for step in job["steps"]]
        assert uses[0].startswith("actions/checkout@") and uses[1] == SETUP, name
        assert not any(u.startswith(("actions/setup-python@", "sigstore/cosign-installer@")) for u in uses), name
        assert all("pip install" not in step.get("run", "") for step in job["steps"]), name
    # cosign where a job signs (build) or verifies signed attestations (tags; pages, which reads them for the site)
    signing = {name for name, job in jobs.items() if any(step.get("with", {}).get("cosign") == "true" for step in job["steps"])}
    assert signing == {"build", "tags", "pages"}


def test_ci_runs_the_ci_script_on_the_runner_without_debian_suites():
    """GitHub's ubuntu-24.04 runner has no Debian sources: the workflow gives .ci/run what it would otherwise
    take from trixie (cosign; Docker and buildx are preinstalled) and a base image it can pull."""
    text = (GITHUB / "workflows" / "ci.yml").read_text()
    assert "runs-on: ubuntu-24.04" in text and "sigstore/cosign-installer@" in text
    assert 'sudo env "PATH=$PATH" CI=true BASE_IMAGE_PULL=1 bash .ci/run' in text
    assert "trixie" not in text.split("jobs:", 1)[1] and "debian.sources" not in text


def test_zizmor_finds_nothing_at_medium_or_above():
    zizmor = tool("zizmor")
    if zizmor is None:
        pytest.fail("zizmor is missing: install the test extras")
    result = subprocess.run([zizmor, "--offline", "--min-severity", "medium", *map(str, WORKFLOWS), *map(str, ACTIONS)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
