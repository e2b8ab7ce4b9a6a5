"""The site in a real headless Chromium, on documents made from a plan without an engine (testkit.site_documents):
the chooser names the image `buildkit run --print` starts on an MI300X and on an H100 host, no page logs an error,
dark mode is dark, and with JavaScript off every image is still listed. tests/integration/test_site_pair.py runs
the same on the reports of a real build of the test pair.
"""

from __future__ import annotations

import json

import pytest

from buildkit.app.targets import Choices, select_targets
from testkit import browser, hosts
from testkit import site_documents as documents

pytestmark = pytest.mark.slow

SELECT = ["--select", "torch=2.1[45]*", "--select", "python=3.12"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    from buildkit.cli import main

    folder = tmp_path_factory.mktemp("site")
    items = select_targets(Choices(selectors=tuple(SELECT[1::2]))).plan()
    docs = folder / "docs"
    docs.mkdir()
    (docs / "publish.json").write_text(json.dumps(documents.publish_report([i.target for i in items], failed=[items[-1].target.id])))
    for item in items[:-1]:
        (docs / f"{item.target.id}.sbom.json").write_text(json.dumps(documents.sbom(item)))
        (docs / f"{item.target.id}.verify.json").write_text(json.dumps(documents.verification(item)))
    assert main(["report", "--html", str(folder / "out"), *SELECT, "--from", str(docs)]) == 0
    return folder / "out", [item.target.id for item in items]


def printed_image(cli, root, torch: str, python: str) -> str:
    """The image `buildkit run --print` starts on a host tree: its immutable tag's name."""
    result = cli("run", "--print", "--host-root", root, "--select", f"torch={torch}", "--python", python)
    assert result.code == 0, result.err
    return result.out.split()[-1].rpartition(":")[2]


def test_the_chooser_names_run_prints_image_and_logs_nothing(site, cli, tmp_path):
    out, _ = site
    expected = {
        "Instinct MI300X (gfx942)": printed_image(cli, hosts.mi300x(tmp_path / "mi300x"), "2.14.1", "3.12"),
        "H100 SXM5 80GB (sm_90)": printed_image(cli, hosts.h100(tmp_path / "h100"), "2.14.1", "3.12"),
    }
    assert expected["Instinct MI300X (gfx942)"].startswith("2.14.1-rocm") and expected["H100 SXM5 80GB (sm_90)"].startswith("2.14.1-cuda")
    with browser.chromium() as driver:
        driver.get((out / "index.html").as_uri())
        for gpu, image in expected.items():
            assert browser.choose(driver, gpu, "2.14.1", "3.12") == image
            answer = driver.find_element("id", "answer").text
            assert "docker run --rm -it" in answer and image in answer
            twin = "CUDA" if "rocm" in image else "ROCm"
            assert f"Not its {twin} twin:" in answer and "run on the CPU" in answer
        browser.screenshot(driver, "site-unit-chooser.png")
        driver.find_element("css selector", "#answer .pick a").click()  # the image's part of its row's page
        image = expected["H100 SXM5 80GB (sm_90)"]
        assert driver.current_url.endswith(f"#{image}") and driver.title.startswith("torch 2.14.1 · Python 3.12")
        assert driver.find_element("css selector", "section:target h2").text.endswith(image)
        assert browser.console_problems(driver) == []


def test_dark_mode_is_dark(site):
    out, images = site
    with browser.chromium(dark=True) as driver:
        browser.open_image(driver, out / "index.html", images[0])
        background = driver.execute_script("return getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(13, 17, 23)"
        browser.screenshot(driver, "site-unit-image-dark.png")
        assert browser.console_problems(driver) == []


def test_without_javascript_every_image_is_listed(site):
    out, images = site
    with browser.chromium(javascript=False) as driver:
        driver.get((out / "index.html").as_uri())
        assert browser.listed_images(driver) == set(images)
        assert not driver.find_element("id", "chooser").is_displayed()
        assert "Choosing needs JavaScript" in driver.find_element("tag name", "body").text
        assert browser.console_problems(driver) == []
