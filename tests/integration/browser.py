"""Headless Chromium (Debian's `chromium` and `chromium-driver`) driven by Selenium, for the
tests of `rl view`'s pages. Without the browser a test is skipped, except in CI (CI=true),
where a missing browser fails: CI must run these tests."""

import os
import shutil

import pytest

CHROMIUM = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
DRIVER = ("/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver")


def found(candidates: tuple[str, ...], name: str) -> str | None:
    return next((c for c in candidates if os.access(c, os.X_OK)), None) or shutil.which(name)


def start_chromium(width: int = 1280, height: int = 900):
    """A headless Chromium session; pytest.skip (fail in CI) when the browser is not here."""
    browser, driver = found(CHROMIUM, "chromium"), found(DRIVER, "chromedriver")
    if browser is None or driver is None:
        message = (
            "Debian's chromium and chromium-driver are not installed (apt-get install "
            "chromium chromium-driver)"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
        "--disable-extensions",
    ):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(driver), options=options)


def wait_until(session, condition, timeout_s: float = 20.0, what: str = "the page"):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(session, timeout_s, poll_frequency=0.2).until(
        lambda s: condition(s), message=f"timed out waiting for {what}"
    )
