"""A real headless Chromium (Debian's `chromium` and `chromium-driver`, which .ci/run installs) driven by Selenium,
for the tests of `buildkit report --html`.

The machine's network is closed and nothing may reach out: Chromium starts with its background traffic, its
component updates and sync off, QUIC off, and a fresh profile per session. Selenium is given both binaries, so
its own manager never looks for (or downloads) a driver. Without Chromium the tests skip on a laptop and fail
under CI (BUILDKIT_REQUIRE_DOCKER=1, as for the engine).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

    from selenium.webdriver import Chrome
    from selenium.webdriver.remote.webelement import WebElement

REPO = Path(__file__).resolve().parent.parent
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def artifacts() -> Path:
    """Where tests leave what a person looks at (screenshots): $BUILDKIT_TEST_ARTIFACTS, else test-artifacts/ in
    the checkout (git ignores it; CI uploads it)."""
    folder = Path(os.environ.get("BUILDKIT_TEST_ARTIFACTS") or REPO / "test-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _binaries() -> tuple[str, str]:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium and driver:
        return chromium, driver
    reason = "Chromium is not installed (apt-get install chromium chromium-driver; .ci/run installs them)"
    if os.environ.get("BUILDKIT_REQUIRE_DOCKER") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@contextmanager
def chromium(javascript: bool = True, width: int = 1280, height: int = 1000, dark: bool = False) -> Iterator[Chrome]:
    """A Selenium WebDriver on a fresh headless Chromium; `javascript` False turns scripts off for every page,
    `dark` makes pages see prefers-color-scheme: dark."""
    binary, driver_path = _binaries()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = binary
    profile = tempfile.mkdtemp(prefix="buildkit-chromium-")
    for flag in (*FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    try:
        driver.set_page_load_timeout(60)  # a hang guard: a local page loads in well under a second
        if not javascript:
            driver.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})
        if dark:
            driver.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]})
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def console_problems(driver: Chrome) -> list[str]:
    """What the page logged as errors or warnings (a script error, a CSP violation, a resource that failed)."""
    return [entry["message"] for entry in driver.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]


def screenshot(driver: Chrome, name: str) -> Path:
    """The whole page as a PNG in artifacts()."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(driver.get_window_size()["width"], min(max(height, 600), 6000))
    path = artifacts() / name
    driver.save_screenshot(str(path))
    return path


def choose(driver: Chrome, gpu: str, torch: str, python: str) -> str:
    """Pick a GPU (its label), a torch release and a Python in the page's chooser; the id of the image it names
    ("" when none fits)."""
    from selenium.webdriver.support.ui import Select

    form = driver.find_element("id", "chooser")
    Select(form.find_element("name", "torch")).select_by_visible_text(torch)
    Select(form.find_element("name", "python")).select_by_visible_text(python)
    Select(form.find_element("name", "gpu")).select_by_visible_text(gpu)
    return driver.find_element("id", "answer").get_attribute("data-image") or ""


def listed_images(driver: Chrome) -> set[str]:
    """The images the page lists where a reader sees them: displayed links to an image's part of its row's page
    (images/ROW.html#IMAGE)."""
    links = driver.find_elements("css selector", "a[href^='images/'][href*='#']")
    return {_href(link).rpartition("#")[2] for link in links if link.is_displayed()}


def open_image(driver: Chrome, index: Path, image: str) -> None:
    """Open an image's part of the site the way a reader does: by its link in the pair matrix of the index."""
    driver.get(index.as_uri())
    driver.get(_href(driver.find_element("css selector", f"a[href$='#{image}']")))


def _href(link: WebElement) -> str:
    """A link's address, resolved (the selectors above match only links that have one)."""
    href = link.get_attribute("href")
    assert href is not None, link.get_attribute("outerHTML")
    return href
