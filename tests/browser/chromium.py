"""Headless Chromium for the browser tests: Debian's chromium and chromedriver under Selenium.

A module of its own, not in ``conftest.py``, so that ``test_lab.py`` imports it by a
name no other conftest of the tree shares.
"""

from __future__ import annotations

import os
import shutil

import pytest

#: Requests the browser refuses: everything that would leave the machine.
BLOCKED = ["http://*", "https://*", "ws://*", "wss://*", "ftp://*"]


def _browser_paths() -> tuple[str | None, str | None]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    return browser, shutil.which("chromedriver")


def chrome(flags: tuple[str, ...] = (), blocked: list[str] = BLOCKED):
    """Headless Chromium under Selenium, with the requests matching ``blocked`` refused.

    Parameters
    ----------
    flags : tuple of str
        Command-line flags added to the common ones (headless, no sandbox, no
        background networking, a 1280 x 1000 window).
    blocked : list of str
        URL patterns the DevTools protocol blocks (``Network.setBlockedURLs``).

    Returns
    -------
    selenium.webdriver.Chrome
        The driver; the caller quits it. Skips the test (fails it under
        ``ATTNCOURSE_REQUIRE_BROWSER=1``) without chromium or chromedriver.
    """
    browser, chromedriver = _browser_paths()
    if browser is None or chromedriver is None:
        message = ("browser tests need Debian's chromium and chromium-driver "
                   "(sudo apt-get install chromium chromium-driver)")
        if os.environ.get("ATTNCOURSE_REQUIRE_BROWSER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    # Both paths given: Selenium Manager, which would try to download a driver, never runs.
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", "--disable-quic", "--window-size=1280,1000", *flags):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(chromedriver))
    driver.set_page_load_timeout(60)
    driver.set_script_timeout(60)
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.setBlockedURLs", {"urls": blocked})
    return driver
