"""Tests of the explorers' book rendering (attncourse.widgets.static and Explorer.to_html).

The book shows pre-computed states behind plain HTML controls. What is checked
here: every state it embeds is what the live widget shows for the same controls
(its ``shown`` and its caption, compared with a fresh widget set to those
values, not pixels); the state keys in the HTML point at those states; the HTML
loads nothing from the network; and the frames are small palette PNGs. The
player's JavaScript is checked in a real browser by tests/browser.
"""

from __future__ import annotations

import base64
import io
import json
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from PIL import Image  # noqa: E402

import attncourse.widgets.base as base  # noqa: E402
from attncourse.chapters.ch02_bahdanau_attention.explorer import (  # noqa: E402
    BahdanauStepper,
)
from attncourse.chapters.ch03_attention_family.temperature_explorer import (  # noqa: E402
    TemperatureExplorer,
)
from attncourse.chapters.ch03_attention_family.window_explorer import (  # noqa: E402
    LocalWindow,
)
from attncourse.chapters.ch04_self_attention.explorer import (  # noqa: E402
    SelfAttentionStepper,
)
from attncourse.chapters.ch05_multihead_positional.explorer import (  # noqa: E402
    PositionalEncodingExplorer,
)
from attncourse.chapters.ch08_attention_at_scale.explorer import (  # noqa: E402
    FlashAttentionExplorer,
)
from attncourse.runtime import BOOK_ENV  # noqa: E402
from attncourse.widgets import AttentionExplorer  # noqa: E402
from attncourse.widgets.static import (  # noqa: E402
    BookAxis,
    figure_data_uri,
    render_player,
)
from tests.chapters.ch02_bahdanau_attention.test_explorer import (  # noqa: E402
    EXAMPLES,
    SRC_VOCAB,
    TGT_VOCAB,
    tiny_model,
)
from tests.widgets.test_explorer import tiny_transformer  # noqa: E402


@pytest.fixture
def cheap_frames(monkeypatch):
    """Frames as a counter instead of PNGs: these tests compare states, not pixels."""
    counter = iter(range(10**9))
    monkeypatch.setattr(base, "figure_data_uri", lambda fig: f"data:image/png;base64,{next(counter)}")


# Each maker builds the same explorer afresh: the states are compared with a new widget.
MAKERS = {
    "stepper": lambda: SelfAttentionStepper(sentences=["time flies", "bank of the river"]),
    "bahdanau": lambda: BahdanauStepper(tiny_model(), SRC_VOCAB, TGT_VOCAB, EXAMPLES, max_len=6),
    "local": lambda: LocalWindow(["a", "b", "c", "d", "e"], D=1, p_t=1.3),
    "flash": lambda: FlashAttentionExplorer(seq_len=6, block=4, causal=True),
    "temperature": lambda: TemperatureExplorer(tau=0.7),
    "positional": lambda: PositionalEncodingExplorer(max_len=16, d_model=8, position=5, dimension=3),
    "transformer": lambda: AttentionExplorer(*tiny_transformer(), ["1 2 3", "9 8 7 6"], max_len=12),
}


def assert_same(a, b, where):
    assert a.keys() == b.keys(), where
    for name in a:
        x, y = a[name], b[name]
        if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
            np.testing.assert_array_equal(x, y, err_msg=f"{where}: {name}")
        else:
            assert x == y, f"{where}: {name}: {x!r} != {y!r}"


def set_controls(explorer, values):
    """Set a live explorer's controls as a learner would, one by one, in the book's axis order."""
    for axis, value in zip(explorer._book_axes(), values):
        if value is not None:
            axis.control.value = value


def player_data(page):
    """The JSON the player embeds: axes, states, frames, initial key."""
    blob = re.search(r'<script type="application/json" class="ax-data">(.*?)</script>', page, re.S).group(1)
    return json.loads(blob.replace("<\\/", "</"))


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_every_book_state_is_what_the_live_widget_shows(name, cheap_frames):
    explorer = MAKERS[name]()
    first_shown, first_caption = explorer.shown, explorer.caption.value
    states = explorer.book_states()
    assert len(states) >= 10
    # The walk leaves the widget where it was.
    assert_same(explorer.shown, first_shown, "after the walk")
    assert explorer.caption.value == first_caption
    live = MAKERS[name]()
    # Every state for the small explorers; an even sample of the larger ones.
    for state in states[:: max(1, len(states) // 40)]:
        set_controls(live, state.values)
        assert_same(live.shown, state.shown, f"{name} at {state.labels}")
        assert live.caption.value == state.caption, f"{name} at {state.labels}"


@pytest.mark.parametrize("name", sorted(MAKERS))
def test_html_keys_point_at_their_states(name, cheap_frames):
    explorer = MAKERS[name]()
    states = explorer.book_states()
    data = player_data(explorer.to_html())
    axes = data["axes"]
    assert [axis["label"] for axis in axes] == [axis.title for axis in explorer._book_axes()]
    assert len(data["states"]) == len(states)
    for state in states:
        key = "/".join("-" if label is None else str(axis["options"].index(label))
                       for axis, label in zip(axes, state.labels))
        frame, caption, alt = data["states"][key]
        assert caption == state.caption
        # Plain text: the caption without its tags (a token like <pad> stays, as text).
        assert alt.startswith(explorer.book_title + ": ") and not re.search(r"</?(b|i|sub|sup)>", alt)
    # The first state shown is the widget's starting state.
    assert data["states"][data["initial"]][1] == explorer.caption.value


def test_stepper_book_covers_every_query_step_and_the_matrix_form(cheap_frames):
    explorer = MAKERS["stepper"]()
    states = explorer.book_states()
    # (2 + 4 tokens) x 6 steps x (per query, matrix form)
    assert len(states) == 6 * 6 * 2
    queries = {(s.shown["query_index"], s.labels[0]) for s in states}
    assert len(queries) == 6
    # A matrix-form figure is the same for every query: drawn once per sentence and step.
    assert len({s.frame for s in states}) == 6 * 6 + 2 * 6


def test_local_window_book_hides_the_slider_of_the_other_mode(cheap_frames):
    explorer = MAKERS["local"]()
    page = explorer.to_html()
    data = player_data(page)
    modes = data["axes"][0]["options"]
    for key in data["states"]:
        mode, p_t, t, _ = key.split("/")
        local_m = modes[int(mode)] == "local-m"
        assert (p_t == "-") == local_m and (t == "-") != local_m
    # p_t on a grid of halves, plus the starting 1.3; D over the slider's whole range.
    assert data["axes"][1]["options"] == ["0.0", "0.5", "1.0", "1.3", "1.5", "2.0", "2.5", "3.0", "3.5", "4.0"]
    assert data["axes"][3]["options"] == ["1", "2", "3", "4"]


def test_html_is_self_contained_and_labelled():
    explorer = TemperatureExplorer()
    page = explorer.to_html()
    # Nothing to fetch: no address outside the page, frames are data URIs.
    assert not re.search(r"(src|href)=\"(?!data:)", page)
    assert "http://" not in page and "https://" not in page and "@import" not in page
    # Every control has a label, Previous and Next are buttons, the frame has a text alternative.
    ids = re.findall(r'<(?:select|input)[^>]* id="([^"]+)"', page)
    assert ids and all(f'<label for="{i}">' in page for i in ids)
    assert page.count('class="ax-prev"') == page.count('class="ax-next"') == 1
    assert re.search(r'<img class="ax-frame" alt="Softmax temperature explorer: [^"]+" src="data:image/png', page)
    # The first state is in the HTML itself, for a reader without JavaScript.
    assert f'<div class="ax-caption" aria-live="polite">{explorer.caption.value}</div>' in page


def test_frames_are_small_palette_pngs():
    fig, ax = plt.subplots(figsize=(20, 4))
    ax.imshow(np.random.default_rng(0).normal(size=(30, 200)), cmap="RdBu_r", aspect="auto")
    uri = figure_data_uri(fig, dpi=72, colors=64, max_width=800)
    image = Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])))
    assert image.format == "PNG" and image.mode == "P"
    assert len(image.getcolors()) <= 64
    # 20 inches at 72 dpi would be 1440 pixels (about 1150 once the tight box drops the
    # margins): the dpi is lowered to 40 so that the figure fits 800.
    assert 500 <= image.width <= 800


def test_display_carries_the_book_rendering_only_when_the_book_is_built(monkeypatch):
    explorer = TemperatureExplorer()
    monkeypatch.delenv(BOOK_ENV, raising=False)
    bundle = explorer._repr_mimebundle_()
    assert "text/html" not in bundle
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == explorer.widget.model_id
    monkeypatch.setenv(BOOK_ENV, "1")
    bundle = explorer._repr_mimebundle_()
    assert bundle["text/html"].startswith('<div class="attncourse-explorer"')
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_render_player_rejects_inconsistent_states():
    axes = [{"label": "x", "kind": "slider", "options": ["0", "1"]}]
    states = {"0": (0, "zero", "zero"), "1": (0, "one", "one")}
    with pytest.raises(ValueError, match="initial state '2'"):
        render_player("t", axes, states, ["data:,"], initial="2")
    with pytest.raises(ValueError, match="one part for each of the 1 axes"):
        render_player("t", axes, {"0/1": (0, "a", "a")}, ["data:,"], initial="0/1")


def test_book_axis_rejects_values_the_control_cannot_take():
    explorer = TemperatureExplorer()
    with pytest.raises(ValueError, match="outside the slider's range"):
        BookAxis(explorer.tau, values=[1000.0]).current_values()
    with pytest.raises(ValueError, match="needs the list of values"):
        BookAxis(explorer.tau).current_values()
    stepper = SelfAttentionStepper()
    with pytest.raises(ValueError, match="not among the options"):
        BookAxis(stepper.sentence, values=["no such sentence"]).current_values()


def test_caption_html_cannot_end_the_data_script_early():
    axes = [{"label": "x", "kind": "select", "options": ["a"]}]
    page = render_player("t", axes, {"0": (0, "</script><b>x</b>", "x")}, ["data:,"], initial="0")
    data = page.split('class="ax-data">', 1)[1].split("</script>", 1)[0]
    assert json.loads(data.replace("<\\/", "</"))["states"]["0"][1] == "</script><b>x</b>"


def _frame(uri):
    return Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))).convert("RGB")


def _labelled_figure(layout):
    # A square image in a wide figure: the layout leaves blank space left and right.
    fig, ax = plt.subplots(figsize=(6, 3), layout=layout)
    ax.imshow(np.arange(16.0).reshape(4, 4))
    ax.set(title="a title", xlabel="a long x label", ylabel="y")
    return fig


def test_a_figure_with_a_layout_engine_is_drawn_once_and_cropped_like_the_tight_box():
    fig = _labelled_figure("constrained")
    dpi, canvas = fig.dpi, fig.canvas
    draws = []
    fig.canvas.mpl_connect("draw_event", lambda event: draws.append(event))
    once = _frame(figure_data_uri(fig, dpi=72))
    # Drawn once (a tight box draws twice, below); the dpi and canvas are as they were.
    assert len(draws) == 1 and fig.dpi == dpi and fig.canvas is canvas
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=72, bbox_inches="tight")
    assert len(draws) == 3
    tight = Image.open(png)
    # Cropped like the tight box, to within a few pixels (6 x 3 inches at 72 dpi are
    # 432 x 216 pixels before cropping; the square plot is about 200 wide).
    assert abs(once.width - tight.width) <= 8 and abs(once.height - tight.height) <= 8
    assert once.width < 300 and once.height <= 216
    # Left and right, the blank margin is the tight box's pad, 0.1 inch.
    cols = np.nonzero((np.asarray(once) != 255).any(axis=2).any(axis=0))[0]
    assert cols.min() == 7 and once.width - 1 - cols.max() == 7
    plt.close(fig)


def test_a_figure_without_a_layout_engine_keeps_the_tight_box():
    # Labels that stick out of a figure without a layout engine are kept: the tight
    # box grows past the figure (here the long y label, left of 0).
    fig = _labelled_figure(None)
    fig.axes[0].set_ylabel("a very long y label that sticks out", labelpad=40)
    frame = _frame(figure_data_uri(fig, dpi=72))
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=72, bbox_inches="tight")
    assert frame.size == Image.open(png).size
    # Laid out once, then a label moved out of the figure: the tight box too.
    fig.tight_layout()
    fig.axes[0].yaxis.labelpad = 300
    frame = _frame(figure_data_uri(fig, dpi=72))
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=72, bbox_inches="tight")
    assert frame.size == Image.open(png).size and frame.width > 6 * 72
    plt.close(fig)


def test_the_walk_does_not_draw_a_frame_it_already_holds(cheap_frames):
    class Halves(TemperatureExplorer):
        """A slider whose figure depends only on n // 2: half of its frames are repeats."""

        def __init__(self):
            self.n = __import__("ipywidgets").IntSlider(value=0, min=0, max=5)
            base.Explorer.__init__(self, self.n)
            self.figures = 0

        def _book_axes(self):
            return [BookAxis(self.n)]

        def _frame_key(self):
            return self.n.value // 2

        def _update(self):
            self.shown = {"n": self.n.value}
            self.caption.value = f"n = {self.n.value}"
            if not self._frame_drawn:
                self.figures += 1
                self._render(plt.figure())

    halves = Halves()
    states = halves.book_states()
    assert [s.shown["n"] for s in states] == list(range(6))
    assert [s.caption for s in states] == [f"n = {n}" for n in range(6)]
    # Three frames, each shared by two states; three figures drawn in the walk, and one
    # more at the end for the live widget, which is never told to skip.
    assert [s.frame for s in states][::2] == [s.frame for s in states][1::2]
    assert len({s.frame for s in states}) == 3 and halves.figures == 4
    assert halves._frame_drawn is False


def test_a_figure_laid_out_once_is_drawn_once_where_nothing_sticks_out():
    # fig.tight_layout() lays the figure out once and leaves a placeholder engine that
    # does nothing: its tight box lies inside it, so one draw is enough (the tight box's
    # savefig drew twice).
    fig = _labelled_figure(None)
    fig.tight_layout()
    draws = []
    fig.canvas.mpl_connect("draw_event", lambda event: draws.append(event))
    frame = _frame(figure_data_uri(fig, dpi=72))
    assert len(draws) == 1
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=72, bbox_inches="tight")
    tight = Image.open(png)
    assert abs(frame.width - tight.width) <= 8 and abs(frame.height - tight.height) <= 8
    plt.close(fig)
