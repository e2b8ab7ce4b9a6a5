"""The nightly's page on the reports of a real build of the test pair (the session's pair_build, not built again),
in a real headless Chromium: the chooser names the ROCm image for an MI300X and the CUDA one for an H100, no
page logs an error, a screenshot is kept, and with JavaScript off every image is still listed.

The SBOMs are the built images' own (`buildkit sbom --local`, read from each image in a container), as the
nightly's page job reads the registry's attestations of them.
"""

from __future__ import annotations

import pytest

from testkit import browser
from testkit.runner import run_buildkit

pytestmark = pytest.mark.engine

CUDA = "2.14.1-cuda13.0-py3.11-runtime"
ROCM = "2.14.1-rocm7.2-py3.11-runtime"
BROKEN = "2.13.0-rocm7.2-py3.11-runtime"  # its build failed (the ROCm double index has no torch 2.13.0)


@pytest.fixture(scope="module")
def site(pair_build, docker_env, tmp_path_factory):
    folder = tmp_path_factory.mktemp("site")
    (folder / "sboms").mkdir()
    for target_id, target in pair_build.targets.items():
        if target["status"] == "built":
            made = run_buildkit("sbom", "--local", target["tags"][0], "--out", folder / "sboms" / f"{target_id}.json", env=docker_env)
            assert made.returncode == 0, made.stderr
    written = run_buildkit(
        "report", "--html", folder / "out", "--matrix", pair_build.matrix, "--from", pair_build.out / "report.json", "--from", folder / "sboms", env=docker_env
    )
    assert written.returncode == 0, written.stderr
    return folder / "out", set(pair_build.targets)


def test_the_chooser_on_the_test_pairs_reports(site):
    out, _ = site
    with browser.chromium() as driver:
        driver.get((out / "index.html").as_uri())
        assert browser.choose(driver, "H100 SXM5 80GB (sm_90)", "2.14.1", "3.11") == CUDA
        assert browser.choose(driver, "Instinct MI300X (gfx942)", "2.14.1", "3.11") == ROCM
        answer = driver.find_element("id", "answer").text
        assert "--device /dev/kfd --device /dev/dri" in answer and f"Not its CUDA twin: {CUDA} is a CUDA image" in answer
        browser.screenshot(driver, "site-pair-chooser.png")
        assert browser.console_problems(driver) == []
        browser.open_image(driver, out / "index.html", ROCM)
        page = driver.find_element("id", ROCM).text
        assert "2.14.1+rocm7.2" in page  # torch as the image's own SBOM lists it
        assert "passed" in page and "skipped (no AMD GPU on this host)" in page  # its smoke test ran without kernels
        browser.screenshot(driver, "site-pair-rocm.png")
        browser.open_image(driver, out / "index.html", BROKEN)
        assert "failed" in driver.find_element("id", BROKEN).text
        assert browser.console_problems(driver) == []


def test_without_javascript_the_test_pairs_images_are_listed(site):
    out, images = site
    with browser.chromium(javascript=False) as driver:
        driver.get((out / "index.html").as_uri())
        assert browser.listed_images(driver) == images
        assert browser.console_problems(driver) == []
