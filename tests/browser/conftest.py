"""A real browser for the built book: Debian's Chromium driven by Selenium, offline.

The tests read the book that ``make test`` built (``ATTNCOURSE_BOOK_HTML``, the
folder holding ``index.html``). Chromium runs headless with every ``http``,
``https`` and ``ws`` request blocked through the DevTools protocol, so a page
that needs the network fails its checks instead of quietly fetching. Without
``chromium`` and ``chromedriver`` on the PATH the tests are skipped, unless
``ATTNCOURSE_REQUIRE_BROWSER=1`` (CI) makes that an error. ``test_lab.py`` drives
the same Chromium (:func:`chromium.chrome`) through JupyterLab, which it starts itself.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from chromium import chrome

#: Where screenshots go, for a person to look at.
SHOTS = Path(__file__).resolve().parents[2] / "_build" / "browser"


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
    """Chromium for the book's pages (``file://``): every network request blocked."""
    book_chrome = chrome(("--host-resolver-rules=MAP * ~NOTFOUND",))
    try:
        yield book_chrome
    finally:
        book_chrome.quit()
