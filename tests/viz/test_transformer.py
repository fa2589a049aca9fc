"""Tests of attncourse.viz.transformer: positional-encoding figures and per-head attention maps."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from attncourse.functional.positional import sinusoidal_encoding  # noqa: E402
from attncourse.nn.transformer import Transformer  # noqa: E402
from attncourse.viz.transformer import (  # noqa: E402
    dimension_wavelength,
    plot_attention_maps,
    plot_head_maps,
    plot_positional_detail,
    plot_positional_encoding,
)


def ticks(labels):
    return [t.get_text() for t in labels]


# ----------------------------------------------------------------------------- positional encoding


def test_positional_encoding_draws_the_table_positions_down():
    pe = sinusoidal_encoding(20, 8)
    ax = plot_positional_encoding(pe)
    image = ax.images[0]
    np.testing.assert_array_equal(image.get_array(), pe)
    assert ax.get_xlabel() == "dimension i" and ax.get_ylabel() == "position pos"
    assert image.get_clim() == (-1.0, 1.0) or np.allclose(image.get_clim(), (-1, 1), atol=1e-6)
    assert len(ax.figure.axes) == 2  # the table and its colour bar
    assert ax.get_title()


def test_positional_encoding_accepts_tensors_and_an_axes():
    fig, ax = plt.subplots()
    table = torch.randn(5, 4)
    out = plot_positional_encoding(table, ax=ax, title="learned", colorbar=False)
    assert out is ax and ax.get_title() == "learned" and len(fig.axes) == 1
    np.testing.assert_allclose(ax.images[0].get_array(), table.numpy())


def test_positional_encoding_rejects_a_vector():
    with pytest.raises(ValueError, match="max_len, d_model"):
        plot_positional_encoding(np.zeros(8))


@pytest.mark.parametrize("dimension", [0, 1, 5, 62, 63])
def test_dimension_wavelength_follows_the_formula(dimension):
    i = dimension // 2
    assert math.isclose(dimension_wavelength(dimension, 64), 2 * math.pi * 10000 ** (2 * i / 64))
    # The sinusoid really repeats after one wavelength (checked at a fractional position).
    pos = 3.3
    lam = dimension_wavelength(dimension, 64)
    omega = 2 * math.pi / lam
    assert math.isclose(math.sin((pos + lam) * omega), math.sin(pos * omega), abs_tol=1e-9)


def test_dimension_wavelength_rejects_bad_index():
    with pytest.raises(ValueError, match="dimension"):
        dimension_wavelength(64, 64)


def test_positional_detail_panels_show_the_chosen_row_and_column():
    pe = sinusoidal_encoding(32, 16)
    fig = plot_positional_detail(pe, position=7, dimension=5)
    ax_table, ax_column, ax_row = fig.axes[:3]
    np.testing.assert_array_equal(ax_table.images[0].get_array(), pe)
    assert len(ax_table.patches) == 2  # the framed row and column
    # Middle panel: the curve, the sampled values, the chosen point.
    curve, samples, chosen = ax_column.get_lines()
    np.testing.assert_allclose(samples.get_ydata(), pe[:, 5])
    assert chosen.get_xdata()[0] == 7 and math.isclose(chosen.get_ydata()[0], pe[7, 5])
    np.testing.assert_allclose(curve.get_ydata(), np.cos(curve.get_xdata() * 10000 ** (-4 / 16)), atol=1e-12)
    assert f"{dimension_wavelength(5, 16):,.1f}" in ax_column.get_title()
    assert "cos" in ax_column.get_title()
    # Right panel: one bar per dimension, then the highlighted one.
    heights = [p.get_height() for p in ax_row.patches]
    np.testing.assert_allclose(heights[:16], pe[7])
    assert math.isclose(heights[16], pe[7, 5])


def test_positional_detail_reuses_a_figure_and_checks_indices():
    pe = sinusoidal_encoding(10, 4)
    fig = plt.figure()
    assert plot_positional_detail(pe, 0, 0, fig=fig) is fig
    assert plot_positional_detail(pe, 9, 3, fig=fig) is fig and len(fig.axes) == 4
    with pytest.raises(ValueError, match="position"):
        plot_positional_detail(pe, 10, 0)
    with pytest.raises(ValueError, match="dimension"):
        plot_positional_detail(pe, 0, -1)
    with pytest.raises(ValueError, match="even"):
        plot_positional_detail(np.zeros((4, 3)), 0, 0)


# ----------------------------------------------------------------------------- head maps


def random_maps(num_heads, q_len, k_len, seed=0):
    rng = np.random.default_rng(seed)
    w = rng.random((num_heads, q_len, k_len))
    return w / w.sum(-1, keepdims=True)


def test_head_maps_one_labelled_panel_per_head():
    maps = random_maps(4, 3, 5)
    q, k = ["a", "b", "c"], ["v", "w", "x", "y", "z"]
    fig = plot_head_maps(maps, q, k, title="four heads")
    panels = [ax for ax in fig.axes if ax.images and ax.get_title().startswith("head")]
    assert [ax.get_title() for ax in panels] == ["head 1", "head 2", "head 3", "head 4"]
    for h, ax in enumerate(panels):
        np.testing.assert_allclose(ax.images[0].get_array(), maps[h])
        assert ticks(ax.get_yticklabels()) == q and ticks(ax.get_xticklabels()) == k
        assert ax.images[0].get_clim() == (0.0, 1.0)
    assert fig.get_suptitle() == "four heads"
    assert len(panels[0].texts) == 15  # small maps are annotated by default


def test_head_maps_grid_wraps_and_hides_spare_axes():
    fig = plot_head_maps(random_maps(6, 8, 8), list("abcdefgh"), list("abcdefgh"))
    visible = [ax for ax in fig.axes if ax.get_visible() and ax.images and ax.get_title().startswith("head")]
    hidden = [ax for ax in fig.axes if not ax.get_visible()]
    assert len(visible) == 6 and len(hidden) == 2  # a 2 x 4 grid
    assert len(visible[0].texts) == 0  # 8 x 8 maps are not annotated by default


def test_head_maps_errors_name_shapes():
    with pytest.raises(ValueError, match="num_heads, q_len, k_len"):
        plot_head_maps(np.zeros((3, 3)), ["a"] * 3, ["b"] * 3)
    with pytest.raises(ValueError, match="2 query tokens"):
        plot_head_maps(random_maps(2, 3, 3), ["a", "b"], ["x", "y", "z"])
    with pytest.raises(ValueError, match="head numbers"):
        plot_head_maps(random_maps(2, 3, 3), list("abc"), list("xyz"), heads=[1])


# ----------------------------------------------------------------------------- Transformer maps


@pytest.fixture(scope="module")
def transformer_maps():
    torch.manual_seed(0)
    model = Transformer(12, 10, d_model=16, num_heads=2, num_encoder_layers=2, num_decoder_layers=3, d_ff=32,
                        dropout=0.0, max_len=16).eval()
    src = torch.tensor([[4, 5, 6, 2], [7, 2, 0, 0]])          # second source padded
    src_mask = src != 0
    tgt_in = torch.tensor([[1, 4, 5], [1, 6, 0]])
    return model.attention_maps(src, src_mask, tgt_in)


@pytest.mark.parametrize(
    "kind, layer, q_labels, k_labels",
    [
        ("encoder_self", 1, ["7", "<eos>"], ["7", "<eos>"]),
        ("decoder_self", 2, ["<bos>", "x"], ["<bos>", "x"]),
        ("cross", 0, ["<bos>", "x"], ["7", "<eos>"]),
    ],
)
def test_attention_maps_pick_tokens_by_kind_and_cut_padding(transformer_maps, kind, layer, q_labels, k_labels):
    fig = plot_attention_maps(transformer_maps, kind, layer, 1, ["7", "<eos>"], ["<bos>", "x"])
    panels = [ax for ax in fig.axes if ax.images and ax.get_title().startswith("head")]
    assert len(panels) == 2
    expected = transformer_maps[kind][layer][1].numpy()
    for h, ax in enumerate(panels):
        np.testing.assert_allclose(ax.images[0].get_array(), expected[h, : len(q_labels), : len(k_labels)])
        assert ticks(ax.get_yticklabels()) == q_labels and ticks(ax.get_xticklabels()) == k_labels
    assert f"layer {layer + 1} of" in fig.get_suptitle()


def test_attention_maps_single_head(transformer_maps):
    src, tgt = ["4", "5", "6", "<eos>"], ["<bos>", "a", "b"]
    fig = plot_attention_maps(transformer_maps, "cross", 2, 0, src, tgt, head=1)
    ax = fig.axes[0]
    np.testing.assert_allclose(ax.images[0].get_array(), transformer_maps["cross"][2][0, 1].numpy())
    assert "head 2 of 2" in ax.get_title() and "layer 3 of 3" in ax.get_title()
    assert ax.get_xlabel() == "key (source)" and ax.get_ylabel() == "query (target input)"
    assert len(ax.texts) == 12
    np.testing.assert_allclose(ax.images[0].get_array().sum(1), 1.0, atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"kind": "self"}, "kind"),
        ({"layer": 3}, "layer"),
        ({"example_index": 2}, "example_index"),
        ({"head": 2}, "head"),
        ({"src_tokens": list("abcde")}, "do not fit"),
    ],
)
def test_attention_maps_errors(transformer_maps, kwargs, match):
    args = {"kind": "cross", "layer": 0, "example_index": 0, "src_tokens": ["a"], "tgt_tokens": ["<bos>"]}
    head = kwargs.pop("head", None)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        plot_attention_maps(transformer_maps, args["kind"], args["layer"], args["example_index"],
                            args["src_tokens"], args["tgt_tokens"], head=head)


def test_figures_are_figures(transformer_maps):
    assert isinstance(plot_head_maps(random_maps(1, 2, 2), ["a", "b"], ["c", "d"]), Figure)
    assert isinstance(plot_attention_maps(transformer_maps, "cross", 0, 0, ["a"], ["b"]), Figure)
