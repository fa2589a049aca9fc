"""Tests of the positional-encoding and attention explorers, driven as a learner would."""

from __future__ import annotations

import html
import math

import matplotlib

matplotlib.use("Agg")

import ipywidgets as widgets  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from attncourse.chapters.ch05_multihead_positional.explorer import (  # noqa: E402
    PositionalEncodingExplorer,
)
from attncourse.data.batching import build_vocabs  # noqa: E402
from attncourse.data.toy_tasks import toy_task  # noqa: E402
from attncourse.decode.search import greedy_decode  # noqa: E402
from attncourse.functional.positional import sinusoidal_encoding  # noqa: E402
from attncourse.nn.transformer import Transformer  # noqa: E402
from attncourse.widgets.explorer import ALL_HEADS, AttentionExplorer  # noqa: E402

# ----------------------------------------------------------------------------- positional encoding


def test_positional_explorer_starts_with_its_table_and_figure():
    explorer = PositionalEncodingExplorer(max_len=32, d_model=16, position=3, dimension=2)
    np.testing.assert_array_equal(explorer.pe, sinusoidal_encoding(32, 16))
    assert explorer.position.max == 31 and explorer.dimension.max == 15
    assert explorer.shown["position"] == 3 and explorer.shown["dimension"] == 2
    assert isinstance(explorer.figure, Figure) and isinstance(explorer.widget, widgets.VBox)
    assert "Dimension 2" in explorer.caption.value


@pytest.mark.parametrize("position, dimension", [(0, 0), (5, 1), (17, 10), (31, 15)])
def test_positional_explorer_shows_what_the_sliders_pick(position, dimension):
    explorer = PositionalEncodingExplorer(max_len=32, d_model=16)
    explorer.position.value = position
    explorer.dimension.value = dimension
    s = explorer.shown
    i = dimension // 2
    omega = 1 / 10000 ** (2 * i / 16)
    assert s["pair"] == i and s["function"] == ("sin" if dimension % 2 == 0 else "cos")
    assert math.isclose(s["omega"], omega)
    assert math.isclose(s["wavelength"], 2 * math.pi * 10000 ** (2 * i / 16))
    reference = math.sin(position * omega) if dimension % 2 == 0 else math.cos(position * omega)
    assert math.isclose(s["value"], reference, abs_tol=1e-12)
    np.testing.assert_allclose(s["vector"], explorer.pe[position])
    np.testing.assert_allclose(s["column"], explorer.pe[:, dimension])
    assert f"{s['wavelength']:,.1f}" in explorer.caption.value
    # The figure on display is the one for these sliders.
    ax_column = explorer.figure.axes[1]
    assert ax_column.get_lines()[-1].get_xdata()[0] == position


def test_positional_explorer_replaces_and_closes_old_figures():
    explorer = PositionalEncodingExplorer(max_len=16, d_model=8)
    first = explorer.figure
    explorer.dimension.value = 3
    assert explorer.figure is not first
    assert not plt.get_fignums()  # every figure is closed in pyplot once shown


def test_positional_explorer_caption_for_slow_dimensions():
    explorer = PositionalEncodingExplorer(max_len=16, d_model=8, dimension=7)
    assert "of one period" in explorer.caption.value  # 2 pi * 10000^(6/8) >> 16 positions


@pytest.mark.parametrize("kwargs, match", [({"d_model": 7}, "even"), ({"max_len": 1}, "max_len"),
                                           ({"position": 64}, "position"), ({"dimension": -1}, "dimension")])
def test_positional_explorer_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PositionalEncodingExplorer(**kwargs)


# ----------------------------------------------------------------------------- attention explorer


def tiny_transformer():
    """An untrained Transformer of 3 + 2 layers and 2 heads, with the reverse task's vocabularies."""
    splits = toy_task("reverse", n_train=50, n_valid=5, n_test=5, seed=0)
    src_vocab, tgt_vocab = build_vocabs(splits.train)
    torch.manual_seed(0)
    model = Transformer(len(src_vocab), len(tgt_vocab), d_model=16, num_heads=2, num_encoder_layers=3,
                        num_decoder_layers=2, d_ff=32, dropout=0.1, max_len=32)
    return model, src_vocab, tgt_vocab


@pytest.fixture(scope="module")
def model_and_vocabs():
    return tiny_transformer()


SOURCES = ["1 2 3", "9 8 7 6 5 4"]


def reference_maps(model, src_vocab, tgt_vocab, text, max_len=12):
    src = torch.tensor([src_vocab.encode(text.split(), add_eos=True)])
    mask = torch.ones_like(src, dtype=torch.bool)
    ids, _ = greedy_decode(model, src, mask, max_len=max_len)
    tgt_in = torch.tensor([[tgt_vocab.bos_id] + ids[0]])
    return ids[0], model.attention_maps(src, mask, tgt_in)


def test_attention_explorer_starts_on_cross_attention_of_the_last_layer(model_and_vocabs):
    model, sv, tv = model_and_vocabs
    explorer = AttentionExplorer(model, sv, tv, SOURCES, max_len=12)
    assert model.training  # the model's flag is restored
    s = explorer.shown
    assert s["kind"] == "cross" and s["layer"] == 1 and s["head"] is None
    assert explorer.layer.max == 2 and explorer.head.value == ALL_HEADS
    ids, maps = reference_maps(model, sv, tv, SOURCES[0])
    np.testing.assert_allclose(s["weights"], maps["cross"][1][0].numpy(), atol=1e-6)
    assert explorer.src_tokens == ["1", "2", "3", "<eos>"]
    assert explorer.tgt_tokens == ["<bos>"] + [tv.token_of(i) for i in ids]
    assert s["q_tokens"] == explorer.tgt_tokens and s["k_tokens"] == explorer.src_tokens
    assert isinstance(explorer.figure, Figure) and isinstance(explorer.widget, widgets.VBox)
    assert html.escape(explorer.translation) in explorer.caption.value


def test_attention_explorer_kind_layer_and_head(model_and_vocabs):
    model, sv, tv = model_and_vocabs
    explorer = AttentionExplorer(model, sv, tv, SOURCES, max_len=12)
    explorer.example.value = SOURCES[1]
    _, maps = reference_maps(model, sv, tv, SOURCES[1])

    explorer.kind.value = "encoder_self"
    assert explorer.layer.max == 3  # three encoder layers
    explorer.layer.value = 3
    explorer.head.value = 1
    s = explorer.shown
    assert (s["kind"], s["layer"], s["head"]) == ("encoder_self", 2, 1)
    np.testing.assert_allclose(s["weights"], maps["encoder_self"][2][0, 1].numpy(), atol=1e-6)
    assert s["q_tokens"] == s["k_tokens"] == "9 8 7 6 5 4".split() + ["<eos>"]
    assert "head 2 of 2" in explorer.figure.axes[0].get_title()

    explorer.kind.value = "decoder_self"  # two decoder layers: the layer slider is clamped
    assert explorer.layer.max == 2 and explorer.layer.value == 2
    s = explorer.shown
    assert s["kind"] == "decoder_self" and s["layer"] == 1
    w = s["weights"]
    np.testing.assert_allclose(w, maps["decoder_self"][1][0, 1].numpy(), atol=1e-6)
    assert np.all(np.triu(w, k=1) == 0)  # the causal mask
    assert s["q_tokens"] == s["k_tokens"] == explorer.tgt_tokens

    explorer.head.value = ALL_HEADS
    assert explorer.shown["head"] is None and explorer.shown["weights"].shape[0] == 2


def test_attention_explorer_book_walk_draws_each_state_once(model_and_vocabs, monkeypatch):
    # Setting the example or the kind quietly (as the book walk does) must not draw a
    # figure that no state keeps: one figure per state, and one for the live widget.
    model, sv, tv = model_and_vocabs
    explorer = AttentionExplorer(model, sv, tv, SOURCES, max_len=12)
    monkeypatch.setattr("attncourse.widgets.base.figure_data_uri", lambda fig: "frame")
    updates = []
    original = explorer._update
    monkeypatch.setattr(explorer, "_update", lambda: (updates.append(1), original())[1])
    states = explorer.book_states()
    # 2 examples x (3 + 2 + 2 layers of encoder_self, decoder_self, cross) x 3 head choices
    assert len(states) == 2 * 7 * 3 and len(updates) == len(states) + 1
    assert explorer.shown["example"] == SOURCES[0] and explorer.shown["kind"] == "cross"
    # Live, a new example or kind still redraws at once.
    explorer.example.value = SOURCES[1]
    assert explorer.shown["example"] == SOURCES[1] and len(updates) == len(states) + 2
    explorer.kind.value = "encoder_self"
    assert explorer.shown["kind"] == "encoder_self" and len(updates) == len(states) + 3


def test_attention_explorer_marks_unknown_source_tokens(model_and_vocabs):
    model, sv, tv = model_and_vocabs
    explorer = AttentionExplorer(model, sv, tv, ["1 x 2"], max_len=5, kind="encoder_self", layer=1, head=2)
    assert explorer.src_tokens == ["1", "<unk>", "2", "<eos>"]
    assert explorer.shown["head"] == 1 and explorer.shown["layer"] == 0
    assert len(explorer.tgt_tokens) <= 1 + 5


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"sources": []}, "empty"),
        ({"sources": ["   "]}, "no token"),
        ({"kind": "self"}, "kind"),
        ({"max_len": 0}, "max_len"),
        ({"layer": 3}, "layer"),
        ({"head": 3}, "head"),
    ],
)
def test_attention_explorer_rejects_bad_arguments(model_and_vocabs, kwargs, match):
    model, sv, tv = model_and_vocabs
    args = {"sources": SOURCES}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        AttentionExplorer(model, sv, tv, **args)
