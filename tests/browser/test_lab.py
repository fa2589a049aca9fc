"""The learner's path in JupyterLab, in a real browser: chapter 4 as ``make lab`` opens it.

JupyterLab starts from the course's environment (``sys.executable``) on a free
local port with a random token, with the settings ``make lab`` installs
(``lab/overrides.json``: MyST files open as notebooks through jupytext) and
nothing from the user's own Jupyter folders (config, data, runtime, settings and
workspaces all point into a temporary folder). It serves a copy of chapter 4,
so nothing a test does can touch the course's files. Chromium reaches only the
loopback address: other hosts go to a dead proxy, ``https``/``wss`` are blocked.

The checks: the chapter opens as a notebook with its MyST rendered by
jupyterlab-myst (the Learning goals admonition, with no ``:class:`` left);
running the cells up to the explorer shows the explorer; its Next button
changes the figure and the caption; no cell and no widget callback reports an
error. Screenshots go to ``_build/browser/``: ``lab-04-top.png`` (the top of
the rendered notebook) and ``lab-04-explorer.png`` (the explorer after Next).
The server is shut down at the end, whatever happens. The test reaches JupyterLab's
application object (``window.jupyterapp``, exposed by ``expose_app_in_browser``, as
JupyterLab's own UI tests do) to find cells, run them and listen to the kernel.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from chromium import chrome
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = "04_self_attention.md"
#: Text of the code cell that shows the explorer (the cell the test runs up to).
EXPLORER_CELL = "SelfAttentionStepper()"
#: Seconds to wait for the server, for the notebook and its kernel, for the cells to run.
START, OPEN, RUN = 60, 60, 120
#: Requests Chromium refuses outright; plain http to other hosts goes to a dead proxy.
BLOCKED = ["https://*", "wss://*", "ftp://*"]


def free_port() -> int:
    """A TCP port free on the loopback address now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _api(base: str, token: str, path: str, method: str = "GET", timeout: float = 5) -> bytes:
    """A request to the server's REST API, never through a proxy from the environment."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(f"{base}{path}", method=method,
                                     headers={"Authorization": f"token {token}"})
    with opener.open(request, timeout=timeout) as response:
        return response.read()


@pytest.fixture(scope="module")
def lab_driver():
    """Chromium that reaches the loopback address only."""
    driver = chrome(("--proxy-server=http://127.0.0.1:9", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
                    BLOCKED)
    driver.set_window_size(1400, 1000)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture(scope="module")
def lab(lab_driver, tmp_path_factory):
    """A JupyterLab server on a copy of chapter 4; yields ``(base URL, token, log file)``."""
    home = tmp_path_factory.mktemp("lab")
    served = home / "notebooks"
    served.mkdir()
    shutil.copy(ROOT / "notebooks" / CHAPTER, served / CHAPTER)
    # make lab's settings, with autosave off: the test never writes the notebook back.
    settings = home / "app-settings"
    settings.mkdir()
    overrides = json.loads((ROOT / "lab" / "overrides.json").read_text())
    overrides["@jupyterlab/docmanager-extension:plugin"]["autosave"] = False
    (settings / "overrides.json").write_text(json.dumps(overrides))
    # Nothing of the user's own Jupyter set-up: no extra search paths, app folder or backend.
    env = {key: value for key, value in os.environ.items()
           if key not in ("JUPYTER_PATH", "JUPYTER_CONFIG_PATH", "JUPYTERLAB_DIR", "MPLBACKEND")}
    for variable, folder in [("JUPYTER_CONFIG_DIR", "config"), ("JUPYTER_DATA_DIR", "data"),
                             ("JUPYTER_RUNTIME_DIR", "runtime"), ("JUPYTERLAB_SETTINGS_DIR", "user-settings"),
                             ("JUPYTERLAB_WORKSPACES_DIR", "workspaces"), ("IPYTHONDIR", "ipython")]:
        env[variable] = str(home / folder)
    # The kernel imports this checkout's package, as an editable install would give it.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    port, token = free_port(), secrets.token_hex(24)
    base = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "jupyterlab", "--no-browser", "--allow-root",
               "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
               f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={served}",
               f"--LabApp.app_settings_dir={settings}", "--LabApp.expose_app_in_browser=True",
               "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    log = home / "server.log"
    with open(log, "wb") as out:
        server = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=home)
    try:
        deadline = time.monotonic() + START
        while True:
            if server.poll() is not None:
                pytest.fail(f"JupyterLab exited with code {server.returncode}:\n{log.read_text()[-3000:]}")
            try:
                _api(base, token, "/api/status")
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"JupyterLab did not answer within {START} s:\n{log.read_text()[-3000:]}")
                time.sleep(0.5)
        yield base, token, log
    finally:
        # The server shuts its kernels down with itself; a signal, then a kill, if it does not.
        try:
            _api(base, token, "/api/shutdown", method="POST")
        except OSError:
            pass
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


@pytest.fixture(scope="module")
def notebook(lab, lab_driver):
    """Chapter 4 opened in JupyterLab, its kernel idle, its kernel's error messages collected."""
    base, token, log = lab
    driver = lab_driver
    driver.get(f"{base}/lab/tree/{CHAPTER}?token={token}")
    state = """
        const app = window.jupyterapp;
        const panel = app && app.shell.currentWidget;
        if (!panel || !panel.content || !panel.sessionContext) return null;
        const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
        return {cells: panel.content.widgets.length, kernel: kernel ? kernel.status : null};
    """
    try:
        WebDriverWait(driver, OPEN, poll_frequency=0.5).until(
            lambda d: (d.execute_script(state) or {}).get("kernel") == "idle")
    except TimeoutException:
        pytest.fail(f"{CHAPTER} did not open as a notebook with an idle kernel within {OPEN} s: "
                    f"{driver.execute_script(state)}\n{log.read_text()[-2000:]}")
    WebDriverWait(driver, OPEN).until(ec.presence_of_element_located((By.CSS_SELECTOR, ".jp-MarkdownCell")))
    # Every error and stderr message the kernel sends from now on, from a cell or from a
    # widget's callback (which JupyterLab shows in no cell, only in its log console).
    driver.execute_script("""
        window.attncourseKernelErrors = [];
        window.jupyterapp.shell.currentWidget.sessionContext.iopubMessage.connect((_, msg) => {
            const type = msg.header.msg_type, content = msg.content;
            if (type === "error") window.attncourseKernelErrors.push(`${content.ename}: ${content.evalue}`);
            if (type === "stream" && content.name === "stderr")
                window.attncourseKernelErrors.push(`stderr: ${String(content.text).slice(0, 300)}`);
        });
    """)
    return driver


def test_chapter_opens_as_a_notebook_with_its_myst_rendered(notebook, shots):
    driver = notebook
    goals = WebDriverWait(driver, 30).until(lambda d: d.execute_script("""
        const cells = Array.from(document.querySelectorAll(".jp-MarkdownCell"));
        const cell = cells.find((c) => c.innerText.includes("Learning goals"));
        return cell || null;
    """), message="no markdown cell of the chapter shows its Learning goals")
    time.sleep(1)  # let KaTeX typeset the cell
    driver.save_screenshot(str(shots / "lab-04-top.png"))
    text = goals.text
    assert ":class:" not in text and "```" not in text and "{admonition}" not in text, \
        f"the Learning goals admonition is raw markup in JupyterLab: {text[:300]!r}"
    # Rendered: the list items are list items, the maths typeset, the title an admonition's title.
    rendered = driver.execute_script("""
        const cell = arguments[0];
        return {items: cell.querySelectorAll("li").length,
                maths: cell.querySelectorAll("mjx-container, .katex, math").length,
                raw_math: /\\$d_\\\\text/.test(cell.innerText)};
    """, goals)
    assert rendered["items"] >= 6, f"the Learning goals list is not rendered: {rendered}"
    assert rendered["maths"] > 0 and not rendered["raw_math"], f"maths left as TeX: {rendered}"


#: MyST markup that must not be left as text in a rendered markdown cell.
RAW_MYST = ("{cite}", "{doc}", "{ref}", "{exercise}", "{solution", "{admonition}", ":label:", ":class:", "```",
            "(chapter-")


def test_every_markdown_cell_renders_its_myst(notebook):
    """No MyST markup left as text, no KaTeX error; exercises, solutions and citations rendered."""
    driver = notebook
    cells = driver.execute_script("""
        const cells = window.jupyterapp.shell.currentWidget.content.widgets;
        return cells.map((c, n) => [n, c.model.type]).filter(([n, type]) => type === "markdown").map(([n]) => n);
    """)
    found = {"raw": [], "katex_errors": 0, "exercises": 0, "solutions": 0, "citations": 0}
    for index in cells:
        # A cell renders when it first comes into view (JupyterLab's windowing), and
        # jupyterlab-myst renders it asynchronously: wait (10 s at most) for its output.
        result = driver.execute_async_script("""
            const [index, done] = arguments;
            const cell = window.jupyterapp.shell.currentWidget.content.widgets[index];
            cell.node.scrollIntoView({block: "start"});
            const source = cell.model.sharedModel.getSource();
            const deadline = Date.now() + 10000;
            (function poll() {
                const out = cell.node.querySelector(".myst, .jp-MarkdownOutput");  // jupyterlab-myst's, or plain
                const text = out ? out.innerText.trim() : "";
                if ((cell.rendered && text) || Date.now() > deadline) {
                    done({text: text || null, katex: cell.node.querySelectorAll(".katex-error").length, source});
                } else {
                    setTimeout(poll, 50);
                }
            })();
        """, index)
        text = result["text"]
        if text is None:
            found["raw"].append(f"cell {index + 1}: not rendered within 10 s")
            break
        found["raw"] += [f"cell {index + 1}: {marker}" for marker in RAW_MYST if marker in text]
        found["katex_errors"] += result["katex"]
        found["exercises"] += "{exercise}" in result["source"] and text.count("Exercise ")
        found["solutions"] += "{solution" in result["source"] and text.count("Solution to Exercise")
        found["citations"] += result["source"].count("{cite}") and text.count("vaswani2017attention")
    assert not found["raw"], f"MyST markup left as text in JupyterLab: {found['raw']}"
    assert found["katex_errors"] == 0, f"{found['katex_errors']} formulas KaTeX could not typeset"
    assert found["exercises"] >= 5 and found["solutions"] >= 5 and found["citations"] >= 1, found


def _explorer_state(driver, cell) -> dict:
    return driver.execute_script("""
        const cell = arguments[0];
        const img = cell.querySelector(".jp-OutputArea .widget-output img, .jp-OutputArea img");
        const caption = cell.querySelector(".widget-html-content, .widget-html");
        const next = Array.from(cell.querySelectorAll("button")).find((b) => b.innerText.trim() === "Next");
        return {src: img ? img.getAttribute("src") : null, caption: caption ? caption.innerText : null,
                next: next || null};
    """, cell)


def test_running_the_cells_shows_the_explorer_and_next_steps_it(notebook, shots):
    driver = notebook
    start = time.monotonic()
    cell = driver.execute_script("""
        const panel = window.jupyterapp.shell.currentWidget;
        const cells = panel.content.widgets;
        const index = cells.findIndex((c) => c.model.type === "code"
                                      && c.model.sharedModel.getSource().includes(arguments[0]));
        if (index < 0) return null;
        panel.content.activeCellIndex = index;
        // What the Run menu does: every cell above, then the explorer's own cell.
        window.jupyterapp.commands.execute("notebook:run-all-above")
            .then(() => window.jupyterapp.commands.execute("notebook:run-cell"));
        return cells[index].node;
    """, EXPLORER_CELL)
    assert cell is not None, f"no code cell of {CHAPTER} contains {EXPLORER_CELL}"
    try:
        WebDriverWait(driver, RUN, poll_frequency=0.5).until(
            lambda d: (lambda s: s["next"] is not None and s["src"] and s["caption"])(_explorer_state(d, cell)))
    except TimeoutException:
        pytest.fail(f"the explorer did not appear within {RUN} s of running the cells above it: "
                    f"{ {k: v for k, v in _explorer_state(driver, cell).items() if k != 'next'} }")
    print(f"cells up to the explorer ran in {time.monotonic() - start:.1f} s")
    before = _explorer_state(driver, cell)
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", before["next"])
    before["next"].click()
    try:
        WebDriverWait(driver, 30, poll_frequency=0.25).until(
            lambda d: (lambda s: s["src"] and s["src"] != before["src"] and s["caption"] != before["caption"])(
                _explorer_state(d, cell)))
    except TimeoutException:
        after = _explorer_state(driver, cell)
        pytest.fail(f"Next did not change the figure and the caption: caption {before['caption']!r} -> "
                    f"{after['caption']!r}, figure changed: {after['src'] != before['src']}")
    output = driver.execute_script("return arguments[0].querySelector('.jp-OutputArea');", cell)
    driver.execute_script("arguments[0].scrollIntoView({block: 'start'});", output)
    time.sleep(0.5)
    output.screenshot(str(shots / "lab-04-explorer.png"))


def test_the_kernel_reports_no_error(notebook, lab):
    driver = notebook
    _, _, log = lab
    problems = driver.execute_script("""
        const panel = window.jupyterapp.shell.currentWidget;
        const found = [];
        panel.content.widgets.forEach((cell, n) => {
            if (cell.model.type !== "code") return;
            for (const output of cell.model.outputs.toJSON()) {
                if (output.output_type === "error") found.push(`cell ${n + 1}: ${output.ename}: ${output.evalue}`);
                if (output.output_type === "stream" && output.name === "stderr")
                    found.push(`cell ${n + 1} stderr: ${String(output.text).slice(0, 200)}`);
            }
        });
        const kernel = panel.sessionContext.session.kernel;
        if (kernel.status !== "idle") found.push(`kernel ${kernel.status}`);
        return found;
    """)
    assert not problems, f"errors in {CHAPTER}: {problems}"
    sent = driver.execute_script("return window.attncourseKernelErrors;")
    assert not sent, f"the kernel sent errors while running {CHAPTER} and its explorer: {sent}"
    # What the kernel process itself writes (its log, a crash) goes to the server's output.
    tracebacks = [line for line in log.read_text(errors="replace").splitlines() if "Traceback" in line
                  or "Exception in" in line]
    assert not tracebacks, f"the kernel logged errors: {tracebacks}\n{log.read_text()[-3000:]}"
