"""A real browser for the built book: Debian's Chromium driven by Selenium, offline.

The tests read the book that ``make test`` built (``ATTNCOURSE_BOOK_HTML``, the
folder holding ``index.html``). Chromium runs headless with every ``http``,
``https`` and ``ws`` request blocked through the DevTools protocol, so a page
that needs the network fails its checks instead of quietly fetching. Without
``chromium`` and ``chromedriver`` on the PATH the tests are skipped, unless
``ATTNCOURSE_REQUIRE_BROWSER=1`` (CI) makes that an error.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

#: Requests the browser refuses: everything that would leave the machine.
BLOCKED = ["http://*", "https://*", "ws://*", "wss://*", "ftp://*"]
#: Where screenshots go, for a person to look at.
SHOTS = Path(__file__).resolve().parents[2] / "_build" / "browser"


def _browser_paths() -> tuple[str | None, str | None]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    return browser, shutil.which("chromedriver")


@pytest.fixture(scope="session")
def book_html() -> Path:
    """The built book's HTML folder."""
    root = Path(os.environ.get("ATTNCOURSE_BOOK_HTML", "_build/html")).resolve()
    if not (root / "index.html").is_file():
        pytest.fail(f"no built book at {root} (set ATTNCOURSE_BOOK_HTML to the folder holding index.html)")
    return root


@pytest.fixture(scope="session")
def shots() -> Path:
    """The folder for screenshots, ``_build/browser/``."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    return SHOTS


@pytest.fixture(scope="session")
def driver():
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
                 "--no-first-run", "--disable-quic", "--window-size=1280,1000",
                 "--host-resolver-rules=MAP * ~NOTFOUND"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    chrome = webdriver.Chrome(options=options, service=Service(chromedriver))
    chrome.set_page_load_timeout(60)
    chrome.set_script_timeout(60)
    chrome.execute_cdp_cmd("Network.enable", {})
    chrome.execute_cdp_cmd("Network.setBlockedURLs", {"urls": BLOCKED})
    try:
        yield chrome
    finally:
        chrome.quit()
