"""Tests of attncourse.chapters.ch03_attention_family.figures: local windows, alignments
with windows, temperature and cost."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from attncourse.chapters.ch03_attention_family.figures import (  # noqa: E402
    entropy,
    local_weights,
    plot_alignment_windows,
    plot_cost,
    plot_local_window,
    plot_temperature,
    plot_tempered_weights,
)
from attncourse.functional.luong import luong_step  # noqa: E402
from attncourse.functional.temperature import softmax_with_temperature  # noqa: E402

TOKENS = ["le", "chat", "noir", "est", "assis", "sur", "le", "tapis"]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def scores(n=len(TOKENS), seed=0):
    return np.random.default_rng(seed).normal(size=n)


def bars(ax, label):
    (container,) = [c for c in ax.containers if c.get_label() == label]
    return np.array([patch.get_height() for patch in container])


def by_gid(artists, gid):
    return [a for a in artists if a.get_gid() == gid]


# ----------------------------------------------------------------------------- local_weights


@pytest.mark.parametrize("p_t, D", [(3.4, 2), (0.7, 3), (7.6, 1), (4.0, 2)])
def test_local_weights_equal_luong_step(p_t, D):
    e = scores()
    step = local_weights(e, p_t, D, "local-p")
    # score_location with h_t = [1] and w_a = e as a column is e itself.
    trace = luong_step(np.ones(1), np.zeros((len(e), 2)), "location", {"w_a": e[:, None]}, mode="local-p",
                       D=D, p_t=p_t)
    np.testing.assert_allclose(step.weights, trace.weights, atol=1e-12)
    np.testing.assert_array_equal(step.window, trace.window)
    np.testing.assert_allclose(step.align, trace.align, atol=1e-12)
    assert step.sigma == D / 2
    np.testing.assert_array_equal(step.positions, np.flatnonzero(np.abs(np.arange(len(e)) - p_t) <= D))


def test_local_m_has_no_gaussian_and_sums_to_one():
    step = local_weights(scores(), 3, 2, "local-m")
    assert step.gaussian is None and step.sigma is None
    np.testing.assert_allclose(step.weights.sum(), 1.0)
    np.testing.assert_array_equal(step.positions, [1, 2, 3, 4, 5])


@pytest.mark.parametrize("kwargs, match", [({"mode": "global"}, "mode"), ({"D": 0}, "D >= 1"),
                                           ({"scores": np.zeros((2, 3))}, "one non-empty vector")])
def test_local_weights_rejects_bad_arguments(kwargs, match):
    args = {"scores": scores(), "p_t": 2.0, "D": 2, "mode": "local-p", **kwargs}
    with pytest.raises(ValueError, match=match):
        local_weights(**args)


# ----------------------------------------------------------------------------- plot_local_window


def test_local_window_draws_window_gaussian_align_and_weights():
    e = scores()
    ax = plot_local_window(TOKENS, 3.4, 2, e)
    step = local_weights(e, 3.4, 2)
    np.testing.assert_allclose(bars(ax, "align"), step.align)
    np.testing.assert_allclose(bars(ax, "weights"), step.weights)
    assert (bars(ax, "weights")[[0, 1, 6, 7]] == 0).all()  # zero outside [1.4, 5.4]
    (span,) = by_gid(ax.patches, "window")
    assert np.isclose(span.get_x(), 1.4) and np.isclose(span.get_x() + span.get_width(), 5.4)
    (curve,) = by_gid(ax.lines, "gaussian")
    x, y = curve.get_data()
    assert np.isclose(x[np.argmax(y)], 3.4, atol=0.02) and np.isclose(y.max(), 1.0, atol=1e-3)
    # sigma = D / 2 = 1: at p_t +- 1 the curve is exp(-1/2).
    assert np.isclose(np.interp(4.4, x, y), np.exp(-0.5), atol=1e-3)
    assert [t.get_text() for t in ax.get_xticklabels()] == TOKENS
    assert f"{step.weights.sum():.2f}" in ax.get_title()


def test_local_window_without_scores_is_uniform_in_the_window():
    ax = plot_local_window(TOKENS, 4.0, 2)
    np.testing.assert_allclose(bars(ax, "align"), [0, 0, 0.2, 0.2, 0.2, 0.2, 0.2, 0])


def test_local_m_window_has_no_gaussian():
    ax = plot_local_window(TOKENS, 0, 2, torch.tensor(scores()), mode="local-m")
    assert not by_gid(ax.lines, "gaussian")
    assert [c.get_label() for c in ax.containers] == ["align"]
    heights = bars(ax, "align")
    assert np.isclose(heights.sum(), 1.0) and (heights[3:] == 0).all()


@pytest.mark.parametrize("kwargs, match", [({"scores": np.zeros(3)}, r"\(8,\).*\(3,\)"), ({"mode": "x"}, "mode"),
                                           ({"tokens": []}, "at least one")])
def test_local_window_rejects_bad_arguments(kwargs, match):
    args = {"tokens": TOKENS, "p_t": 2.0, "D": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        plot_local_window(**args)


# ----------------------------------------------------------------------------- plot_alignment_windows


def test_alignment_windows_frame_each_row_and_mark_p_t():
    tgt = ["the", "black", "cat", "sat"]
    w = np.random.default_rng(1).dirichlet(np.ones(len(TOKENS)), size=len(tgt))
    positions = [0.4, 2.1, 6.5, 7.9]
    ax = plot_alignment_windows(w, TOKENS, tgt, positions, 2)
    frames = [p for p in by_gid(ax.patches, "window") if isinstance(p, Rectangle)]
    assert len(frames) == len(tgt)
    spans = [(f.get_x() + 0.5, f.get_x() + f.get_width() - 0.5, f.get_y() + 0.5) for f in frames]
    assert spans == [(0, 2, 0), (1, 4, 1), (5, 7, 2), (6, 7, 3)]
    (dots,) = by_gid(ax.lines, "p_t")
    np.testing.assert_allclose(dots.get_xdata(), positions)
    np.testing.assert_allclose(dots.get_ydata(), np.arange(len(tgt)))
    assert [t.get_text() for t in ax.get_yticklabels()] == tgt


def test_alignment_windows_rejects_positions_of_the_wrong_shape():
    with pytest.raises(ValueError, match=r"\(3,\).*\(2,\)"):
        plot_alignment_windows(np.full((3, 4), 0.25), list("abcd"), list("xyz"), [1.0, 2.0], 1)


# ----------------------------------------------------------------------------- temperature


def test_temperature_bars_march_from_uniform_to_hardmax():
    e = np.array([0.5, 2.0, 1.0, -0.5])
    taus = [100.0, 1.0, 0.01]
    ax = plot_temperature(e, taus, labels=list("abcd"))
    assert [c.get_label() for c in ax.containers] == ["tau = 100", "tau = 1", "tau = 0.01"]
    for tau in taus:
        np.testing.assert_allclose(bars(ax, f"tau = {tau:g}"), softmax_with_temperature(e, tau))
    np.testing.assert_allclose(bars(ax, "tau = 100"), 0.25, atol=0.01)
    np.testing.assert_allclose(bars(ax, "tau = 0.01"), [0, 1, 0, 0], atol=1e-6)
    (uniform,) = by_gid(ax.lines, "uniform")
    assert np.allclose(uniform.get_ydata(), 0.25)


def test_tempered_weights_show_both_limits_and_the_entropy():
    e = [0.5, 2.0, 1.0]
    ax = plot_tempered_weights(e, 0.5, labels=["x", "y", "z"])
    weights = softmax_with_temperature(np.array(e), 0.5)
    np.testing.assert_allclose(bars(ax, "weights"), weights)
    np.testing.assert_allclose(bars(ax, "hardmax"), [0, 1, 0])
    assert f"{entropy(weights):.2f} nats" in ax.get_title()


def test_entropy_limits():
    assert entropy([0.0, 1.0, 0.0]) == 0.0
    assert np.isclose(entropy(np.full(5, 0.2)), np.log(5))


@pytest.mark.parametrize("args, match", [(([1.0, 2.0], []), "taus is empty"), (([1.0, 2.0], [0.0]), "tau"),
                                         (([[1.0]], [1.0]), "one non-empty vector")])
def test_temperature_rejects_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        plot_temperature(*args)
    with pytest.raises(ValueError, match="labels"):
        plot_temperature([1.0, 2.0], [1.0], labels=["a"])


# ----------------------------------------------------------------------------- cost


def test_cost_lines_are_s_and_min_s_2d_plus_1():
    ax = plot_cost([1, 5, 10, 30, 50], [2, 10])
    global_line, local2, local10 = ax.lines
    np.testing.assert_array_equal(global_line.get_ydata(), [1, 5, 10, 30, 50])
    np.testing.assert_array_equal(local2.get_ydata(), [1, 5, 5, 5, 5])
    np.testing.assert_array_equal(local10.get_ydata(), [1, 5, 10, 21, 21])
    assert [line.get_label() for line in ax.lines] == ["global", "local, D = 2", "local, D = 10"]
    with pytest.raises(ValueError, match="src_lens"):
        plot_cost([0, 3], 2)
