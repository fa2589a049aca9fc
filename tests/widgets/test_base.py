"""Tests of attncourse.widgets.base.Explorer, the behaviour the explorers share."""

import base64
import doctest

import matplotlib

matplotlib.use("Agg")

import ipywidgets as widgets  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

import attncourse.chapters.ch04_self_attention.explorer as stepper_module  # noqa: E402
import attncourse.widgets.base as base  # noqa: E402
from attncourse.chapters.ch02_bahdanau_attention.explorer import (  # noqa: E402
    BahdanauStepper,
)
from attncourse.chapters.ch04_self_attention.explorer import (  # noqa: E402
    SelfAttentionStepper,
)
from attncourse.chapters.ch05_multihead_positional.explorer import (  # noqa: E402
    PositionalEncodingExplorer,
)
from attncourse.data import SENTENCES  # noqa: E402
from attncourse.widgets import AttentionExplorer  # noqa: E402
from attncourse.widgets.base import Explorer  # noqa: E402


class Counter(Explorer):
    """A smallest explorer: a slider with Previous / Next, counting its redraws."""

    def __init__(self, value=2, maximum=4):
        self.n = widgets.IntSlider(value=value, min=0, max=maximum)
        self._step_buttons(self.n)
        super().__init__(widgets.HBox([self.previous, self.n, self.next]))
        self.redraws = 0
        self.n.observe(self._on_change, names="value")

    def _update(self):
        self.redraws += 1
        self.shown = {"n": self.n.value}
        self.caption.value = f"n = {self.n.value}"
        self._render(plt.figure())


def test_layout_is_rows_then_caption_then_output():
    c = Counter()
    row = c.widget.children[0]
    assert isinstance(c.widget, widgets.VBox)
    assert c.widget.children == (row, c.caption, c.out)
    assert row.children == (c.previous, c.n, c.next)
    assert isinstance(c.caption, widgets.HTML) and isinstance(c.out, widgets.Output)
    assert c.figure is None and c.shown == {} and c._quiet is False


def test_on_change_redraws_unless_quiet():
    c = Counter()
    c.n.value = 3
    assert c.redraws == 1 and c.shown == {"n": 3} and c.caption.value == "n = 3"
    with c._quietly():
        assert c._quiet is True
        c.n.value = 1
        c.n.value = 0
    assert c._quiet is False
    assert c.redraws == 1 and c.shown == {"n": 3}
    c.n.value = 2
    assert c.redraws == 2 and c.shown == {"n": 2}


def test_quietly_ends_quiet_even_on_an_error():
    c = Counter()
    with pytest.raises(RuntimeError):
        with c._quietly():
            raise RuntimeError("boom")
    assert c._quiet is False


def test_buttons_move_the_slider_and_stop_at_its_ends():
    c = Counter(value=3, maximum=4)
    c.next.click()
    assert c.n.value == 4
    c.next.click()
    assert c.n.value == 4 and c.redraws == 1
    for _ in range(6):
        c.previous.click()
    assert c.n.value == 0 and c.redraws == 5


def test_render_keeps_the_new_figure_and_closes_both():
    c = Counter()
    c.n.value = 3
    first = c.figure
    c.n.value = 4
    assert c.figure is not first
    assert plt.get_fignums() == []
    # A closed figure stays readable.
    assert c.figure.get_size_inches().shape == (2,)


def test_update_must_be_written_by_the_subclass():
    with pytest.raises(NotImplementedError):
        Explorer()._update()


def test_displays_as_its_vbox():
    c = Counter()
    bundle = c._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == c.widget.model_id
    c._ipython_display_()  # outside a kernel this must not raise


def test_not_in_a_kernel_under_pytest():
    assert base._in_kernel() is False


def test_render_path_of_a_kernel_sets_the_outputs_state(monkeypatch):
    # In a kernel the figure becomes out.outputs, one PNG replacing the last; nothing is
    # displayed through the Output widget's capture (see tests/widgets/test_headless.py).
    calls = []
    monkeypatch.setattr(base, "_in_kernel", lambda: True)
    monkeypatch.setattr(base, "display", lambda obj: calls.append(obj))
    c = Counter()
    c.n.value = 3
    c.n.value = 4
    assert calls == [] and plt.get_fignums() == [] and c.out.msg_id == ""
    (output,) = c.out.outputs
    assert output["output_type"] == "display_data"
    assert base64.b64decode(output["data"]["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"


def test_render_path_of_a_kernel_runs_outside_one(monkeypatch):
    # With the real display, outside a kernel the figure falls back to
    # printing, which must not raise either.
    monkeypatch.setattr(base, "_in_kernel", lambda: True)
    s = SelfAttentionStepper(sentences=[SENTENCES[0]])
    s.next.click()
    assert s.shown["step"] == "score" and len(plt.get_fignums()) == 0


def test_every_explorer_is_an_explorer():
    for cls in (AttentionExplorer, BahdanauStepper, PositionalEncodingExplorer, SelfAttentionStepper):
        assert issubclass(cls, Explorer)
    # _in_kernel is still importable from the stepper's module, where it used to live.
    assert stepper_module._in_kernel is base._in_kernel


def test_docstring_example():
    result = doctest.testmod(base)
    assert result.attempted > 0 and result.failed == 0
