"""Every page of the built book, in a real browser, offline, from file://.

For each page in ``_toc.yml``: it loads with no console error, no failed request
and no request off the machine; MathJax has typeset every formula; every image
has loaded. On each chapter page every explorer is there, and its Next (or
Previous) button and its first dropdown change the frame and the caption; the
first explorer's screenshot is saved under ``_build/browser/``. axe-core (from
axe-selenium-python) finds no violation of impact ``critical`` or ``serious``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jupytext
import pytest
import yaml
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

import attncourse.chapters as chapters
import attncourse.widgets as widgets
from attncourse.widgets.base import Explorer

ROOT = Path(__file__).resolve().parents[2]
#: Every explorer class the package offers (the shared ones and each chapter's own): a chapter
#: that displays one gets it on its page.
# the package's names through getattr: attncourse.widgets imports them lazily (PEP 562),
# so vars() would miss them
EXPLORER_NAMES = sorted({name for module in [widgets, *chapters.modules("explorer")]
                         for name in set(getattr(module, "__all__", ())) | set(vars(module))
                         if isinstance(obj := getattr(module, name, None), type)
                         and issubclass(obj, Explorer) and obj is not Explorer})
#: A call that builds one: the class itself, or one of its ``from_...`` constructors.
EXPLORERS = re.compile(r"\b(" + "|".join(EXPLORER_NAMES) + r")(\.from_\w+)?\(")
#: Schemes a page may use without leaving the machine.
LOCAL = ("file:", "data:", "blob:", "about:", "chrome:", "devtools:")
#: TeX left in the visible text: $...$, $$, \( or \[ (code, scripts and typeset maths removed first).
RAW_MATH = re.compile(r"\$\$|\\\(|\\\[|(?<![\w$])\$[^\s$][^$\n]{0,200}?\$")


def toc_pages() -> list[str]:
    """The book's documents, in the order of ``_toc.yml``, as paths without suffix."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    pages = [toc["root"]]
    for part in toc.get("parts", []):
        pages += [chapter["file"] for chapter in part.get("chapters", [])]
    return pages


def expected_explorers(page: str) -> int:
    """How many explorers the chapter's code cells display (0 for a page that is not a notebook)."""
    source = ROOT / f"{page}.md"
    notebook = jupytext.read(source)
    if "kernelspec" not in notebook.metadata:
        return 0
    return sum(len(EXPLORERS.findall(cell.source)) for cell in notebook.cells if cell.cell_type == "code")


PAGES = toc_pages()
CHAPTERS = [page for page in PAGES if page.startswith("notebooks/")]


def load(driver, path: Path) -> dict:
    """Open ``path`` and wait for MathJax; return its console errors and its requests."""
    driver.get_log("browser")  # empty the logs of the previous page
    driver.get_log("performance")
    driver.get(path.as_uri())
    mathjax = driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        if (!window.MathJax || !MathJax.startup || !MathJax.startup.promise) { done("none"); return; }
        MathJax.startup.promise.then(() => done("typeset"), (e) => done("error: " + e));
    """)
    urls, failed = {}, []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        params = message.get("params", {})
        if message["method"] == "Network.requestWillBeSent":
            urls[params["requestId"]] = params["request"]["url"]
        elif message["method"] == "Network.loadingFailed":
            failed.append(f"{urls.get(params['requestId'], '?')} ({params.get('errorText')})")
    errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    remote = sorted({url for url in urls.values() if not url.startswith(LOCAL)})
    return {"mathjax": mathjax, "errors": errors, "failed": failed, "remote": remote}


@pytest.mark.parametrize("page", PAGES)
def test_page_loads_offline_with_maths_and_images(driver, book_html, page):
    path = book_html / f"{page}.html"
    assert path.is_file(), f"{page}.html was not built"
    result = load(driver, path)
    assert not result["remote"], f"{page}: requests off the machine: {result['remote']}"
    assert not result["failed"], f"{page}: failed requests: {result['failed']}"
    assert not result["errors"], f"{page}: console errors: {result['errors']}"
    assert not result["mathjax"].startswith("error"), f"{page}: MathJax {result['mathjax']}"
    text = driver.execute_script("""
        const main = (document.querySelector("main") || document.body).cloneNode(true);
        main.querySelectorAll("pre, code, script, style, mjx-container, .highlight").forEach((e) => e.remove());
        return main.textContent;
    """)
    raw = RAW_MATH.findall(text)
    assert not raw, f"{page}: maths left untypeset: {raw[:5]}"
    broken = driver.execute_script("""
        return Array.from(document.images).filter((i) => !(i.complete && i.naturalWidth > 0))
            .map((i) => (i.getAttribute("src") || "").slice(0, 80));
    """)
    assert not broken, f"{page}: images that did not load: {broken}"
    # No widget view is left for a kernel that the static page does not have.
    assert not driver.find_elements(By.CSS_SELECTOR, 'script[type="application/vnd.jupyter.widget-view+json"]')


def frame_and_caption(explorer) -> tuple[str, str]:
    image = explorer.find_element(By.CSS_SELECTOR, "img.ax-frame")
    return image.get_attribute("src"), explorer.find_element(By.CSS_SELECTOR, ".ax-caption").text


@pytest.mark.parametrize("page", CHAPTERS)
def test_every_explorer_works_without_a_kernel(driver, book_html, shots, page):
    load(driver, book_html / f"{page}.html")
    explorers = driver.find_elements(By.CSS_SELECTOR, ".attncourse-explorer")
    assert len(explorers) == expected_explorers(page), f"{page}: explorers on the page"
    for n, explorer in enumerate(explorers):
        driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", explorer)
        if n == 0:
            explorer.screenshot(str(shots / f"{Path(page).name}.png"))
        frame, caption = frame_and_caption(explorer)
        assert frame.startswith("data:image/png;base64,") and caption, f"{page}: explorer {n + 1} is empty"
        # Next if it can move on, else Previous (an explorer may start on its last step).
        buttons = [b for b in explorer.find_elements(By.CSS_SELECTOR, ".ax-next, .ax-prev")
                   if b.is_displayed() and b.is_enabled()]
        assert buttons, f"{page}: explorer {n + 1} has no enabled Previous or Next button"
        buttons[0].click()
        moved = frame_and_caption(explorer)
        assert moved[0] != frame and moved[1] != caption, f"{page}: explorer {n + 1}: the button changed nothing"
        # The first dropdown with another option: picking it changes the caption.
        for element in explorer.find_elements(By.TAG_NAME, "select"):
            select = Select(element)
            others = [o for o in select.options if o.is_enabled() and not o.is_selected()
                      and o.get_attribute("hidden") is None]
            if element.is_displayed() and others:
                select.select_by_value(others[0].get_attribute("value"))
                assert frame_and_caption(explorer)[1] != moved[1], f"{page}: explorer {n + 1}: the dropdown"
                break
    errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, f"{page}: console errors while exploring: {errors}"


#: Seconds axe-core may take to audit one page (Selenium's script timeout while it runs).
AXE_SECONDS = 300


@pytest.mark.parametrize("page", PAGES)
def test_no_serious_accessibility_violation(driver, book_html, page):
    from axe_selenium_python import Axe
    from selenium.common.exceptions import TimeoutException

    load(driver, book_html / f"{page}.html")
    axe = Axe(driver)
    axe.inject()
    driver.set_script_timeout(AXE_SECONDS)  # a long page on a loaded machine (chapter 8's once took > 60 s)
    try:
        results = axe.run()
    except TimeoutException:
        pytest.fail(f"{page}: axe-core did not finish its audit within {AXE_SECONDS} s: a timeout of a slow "
                    "or loaded machine, not an accessibility violation", pytrace=False)
    finally:
        driver.set_script_timeout(60)
    serious = [f"{v['id']} ({v['impact']}, {len(v['nodes'])} nodes): {v['help']}; first: "
               f"{v['nodes'][0]['target']}" for v in results["violations"] if v["impact"] in ("critical", "serious")]
    assert not serious, f"{page}: " + "; ".join(serious)


#: The reading window the course's code must fit: a 1280 x 800 laptop screen.
LAPTOP = {"width": 1280, "height": 800, "deviceScaleFactor": 1, "mobile": False}
#: What scrolls sideways: code cells, outputs and the highlighted blocks in them.
OVERFLOWING = """
    const boxes = document.querySelectorAll(
        "main div.highlight pre, main div.cell_input pre, main div.cell_output pre, "
        + "main div.cell_output .output, main div.cell_input, main div.cell_output");
    return Array.from(boxes)
        .filter((e) => e.offsetParent !== null && e.scrollWidth > e.clientWidth + 1)
        .map((e) => `${e.tagName.toLowerCase()}.${e.className}: ${e.scrollWidth} > ${e.clientWidth}`
             + ` px: ${(e.textContent || "").trim().split("\\n")[0].slice(0, 60)}`);
"""


@pytest.mark.parametrize("page", CHAPTERS)
def test_no_code_cell_or_output_scrolls_sideways_at_1280_by_800(driver, book_html, page):
    """Code lines are at most 88 characters; at 1280 x 800 the column shows all of them."""
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", LAPTOP)
    try:
        load(driver, book_html / f"{page}.html")
        assert driver.execute_script("return window.innerWidth") == 1280
        wide = driver.execute_script(OVERFLOWING)
        assert not wide, f"{page}: {len(wide)} boxes scroll sideways at 1280 x 800: {wide[:5]}"
    finally:
        driver.execute_cdp_cmd("Emulation.clearDeviceMetricsOverride", {})


#: A tqdm bar's first frame, which a widget bar left on the page as its text fallback.
FROZEN_BAR = re.compile(r"\b0%\|\s*\| 0/\d+ \[00:00<\?")
#: A finished bar in steps, as a book-build bar prints it (attncourse.runtime.BookBar).
FINISHED_BAR = re.compile(r"100%\|█+\| (\d+)/\1 \[[^\]]*(step/s|s/step)\]")


def test_training_cells_show_their_finished_bar_never_a_frozen_first_frame(book_html):
    import html

    text = {page: html.unescape((book_html / f"{page}.html").read_text(encoding="utf-8"))
            for page in CHAPTERS}
    assert not [page for page, body in text.items() if FROZEN_BAR.search(body)]
    assert [page for page, body in text.items() if FINISHED_BAR.search(body)]
