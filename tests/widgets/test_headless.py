"""Explorers under a kernel with no front end (nbgrader, nbval, ``jupyter execute``).

Autograding froze now and then after a cell that displays an explorer, until the cell's
time limit ran out. The cause: the explorer drew its figure with
``with self.out: display(fig)``. That capture asks the front end to route the cell's
outputs into the Output widget; nbclient stands in for the front end and answers every
captured output with a ``comm_msg`` on the shell channel while it awaits the cell's
``execute_reply`` on that same channel, and now and then the reply is then only seen when
the wait times out (jupyter/nbclient#312). Explorers now set the widget's ``outputs``
state instead, so nbclient never captures: this test counts its output hooks.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
import pytest

nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[2]
#: Each explorer the chapters display, built from small inputs, and redrawn a few times.
CELLS = [
    "from attncourse.chapters.ch04_self_attention.explorer import SelfAttentionStepper\n"
    "s = SelfAttentionStepper()\nfor _ in range(4):\n    s.next.click()\ns",
    "from attncourse.chapters.ch05_multihead_positional.explorer import PositionalEncodingExplorer\n"
    "PositionalEncodingExplorer(max_len=16, d_model=8)",
    "from attncourse.chapters.ch03_attention_family.temperature_explorer import TemperatureExplorer\n"
    "TemperatureExplorer()",
    "from attncourse.chapters.ch08_attention_at_scale.explorer import FlashAttentionExplorer\n"
    "f = FlashAttentionExplorer()\nfor _ in range(4):\n    f.next.click()\nf",
]
#: Seconds a cell may take: far below nbgrader's 60 s for an exercise cell.
LIMIT = 30


class CountingClient(nbclient.NotebookClient):
    """nbclient, counting the Output-widget captures it mimics and timing each cell."""

    hooks = 0
    seconds: list[float] = []

    def register_output_hook(self, msg_id, hook):
        CountingClient.hooks += 1
        return super().register_output_hook(msg_id, hook)

    async def async_execute_cell(self, cell, cell_index, **kwargs):
        start = time.perf_counter()
        try:
            return await super().async_execute_cell(cell, cell_index, **kwargs)
        finally:
            CountingClient.seconds.append(time.perf_counter() - start)


def headless_outputs(cells: list[str], tmp_path: Path, monkeypatch) -> list[list[dict]]:
    """Run ``cells`` as a notebook under :class:`CountingClient`, which must capture nothing.

    Returns each Output widget's ``outputs`` state, as the notebook saved them.
    """
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    # The kernel imports this checkout's package.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    CountingClient(nb, timeout=LIMIT, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert CountingClient.hooks == 0
    state = nb.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    return [m["state"]["outputs"] for m in state.values() if m["model_name"] == "OutputModel"]


def test_explorers_send_nothing_back_to_a_headless_client(tmp_path, monkeypatch):
    outputs = headless_outputs(CELLS, tmp_path, monkeypatch)
    # Every explorer's figure reached its widget, as one PNG.
    assert len(outputs) == len(CELLS)
    assert all(len(o) == 1 and "image/png" in o[0]["data"] for o in outputs)
    assert all(s < LIMIT - 5 for s in CountingClient.seconds), CountingClient.seconds
