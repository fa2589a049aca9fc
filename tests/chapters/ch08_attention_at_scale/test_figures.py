"""Figures of the attention-at-scale chapter: what they draw matches the numbers behind them."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402

from attncourse.chapters.ch08_attention_at_scale.figures import (  # noqa: E402
    plot_loglog,
    plot_online_softmax,
    plot_roofline,
    plot_tiles,
    tile_states,
)
from attncourse.functional import (  # noqa: E402
    online_softmax_trace,
    scaled_dot_product_attention,
    tiled_attention,
)


def test_loglog_labels_each_series_with_its_fitted_slope():
    n = np.array([10, 20, 40, 80])
    ax = plot_loglog(n, {"square": n**2.0, "linear": 3.0 * n}, "cost")
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["square (slope 2.00)", "linear (slope 1.00)"]
    assert ax.get_xscale() == ax.get_yscale() == "log"


def test_roofline_places_kernels_on_the_roof():
    ax = plot_roofline(100.0, 2.0, {"low": (5.0, 1.0), "high": (500.0, 1.0)})
    points = [c.get_offsets()[0] for c in ax.collections]
    np.testing.assert_allclose(points, [[5.0, 10.0], [500.0, 100.0]])  # min(peak, bw * intensity)
    assert any("ridge: 50" in t.get_text() for t in ax.texts)


def test_online_softmax_figure_has_a_row_per_step_and_the_running_output():
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=3), rng.normal(size=(7, 3)), rng.normal(size=(7, 2))
    trace = online_softmax_trace(q, k, v, block_size=3)
    fig = plot_online_softmax(trace, scaled_dot_product_attention(q, k, v)[0])
    assert len(fig.axes) == 2 * 3
    for step in range(3):
        heights = [p.get_height() for p in fig.axes[2 * step + 1].patches]
        np.testing.assert_allclose(heights, trace.output[step])
        # Left panel: the scores seen so far, and no more.
        assert len(fig.axes[2 * step].patches) == trace.blocks[step][1]


def test_tile_states_and_tiles_figure():
    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=(6, 2)) for _ in range(3))
    result = tiled_attention(q, k, v, causal=True, block_q=2, block_k=2, trace=True)
    states = tile_states(result, 6, 6, 3, causal=True)
    # Tiles in order (0,0), (1,0), (1,1), then (2,0): 1 done, 2 current, 0 to come, 3 skipped.
    np.testing.assert_array_equal(states, [[1, 3, 3], [1, 1, 3], [2, 0, 0]])
    exact = scaled_dot_product_attention(q, k, v, mask=np.tril(np.ones((6, 6), dtype=bool)))[0]
    fig = plot_tiles(result, exact, 3, causal=True)
    assert len(fig.axes) == 3 and "Q block 2, K block 0" in fig.axes[0].get_title()


def test_loglog_ticks_the_measured_lengths_of_every_call():
    ax = plot_loglog([2048, 4096], {"a": [1.0, 2.0]}, "s")
    plot_loglog([256, 512], {"b": [1.0, 4.0]}, "s", ax=ax)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["256", "512", "2,048", "4,096"]
