"""Tests of the local-window and temperature explorers, driven as a learner would."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import ipywidgets as widgets  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from attncourse.chapters.ch03_attention_family.temperature_explorer import (  # noqa: E402
    DEFAULT_SCORES,
    TemperatureExplorer,
)
from attncourse.chapters.ch03_attention_family.window_explorer import (  # noqa: E402
    DEFAULT_TOKENS,
    LocalWindow,
)
from attncourse.functional.luong import gaussian_weights, local_window  # noqa: E402
from attncourse.functional.numpy_attention import softmax  # noqa: E402
from attncourse.functional.temperature import softmax_with_temperature  # noqa: E402


def bar_heights(fig, label):
    ax = fig.axes[0]
    (container,) = [c for c in ax.containers if c.get_label() == label]
    return np.array([p.get_height() for p in container])


# ----------------------------------------------------------------------------- LocalWindow


def test_local_window_starts_in_local_p_at_the_middle():
    explorer = LocalWindow(D=2)
    s = explorer.shown
    assert explorer.tokens == list(DEFAULT_TOKENS) and explorer.scores.shape == (12,)
    assert s["mode"] == "local-p" and s["p_t"] == 5.5 and s["D"] == 2 and s["sigma"] == 1.0
    assert (s["lo"], s["hi"]) == (4, 7)
    assert isinstance(explorer.figure, Figure) and isinstance(explorer.widget, widgets.VBox)
    assert explorer.t.layout.display == "none" and explorer.p_t.layout.display is None
    assert "[3.5, 7.5]" in explorer.caption.value and "&sigma; = D/2 = 1" in explorer.caption.value


@pytest.mark.parametrize("p_t, D", [(3.4, 2), (0.0, 3), (11.0, 1), (6.7, 5)])
def test_local_window_shows_what_the_sliders_pick(p_t, D):
    explorer = LocalWindow(seed=3)
    explorer.p_t.value = p_t
    explorer.D.value = D
    s = explorer.shown
    window = local_window(p_t, D, 12)
    expected = softmax(explorer.scores, mask=window) * gaussian_weights(np.arange(12), p_t, D)
    np.testing.assert_allclose(s["weights"], expected, atol=1e-12)
    np.testing.assert_array_equal(s["window"], window)
    assert (s["weights"][~window] == 0).all()
    assert math.isclose(s["weight_sum"], expected.sum()) and s["weight_sum"] < 1
    assert (s["lo"], s["hi"]) == (int(np.flatnonzero(window)[0]), int(np.flatnonzero(window)[-1]))
    assert f"<b>{expected.sum():.3f}</b>" in explorer.caption.value
    assert f"s = {s['lo']}..{s['hi']}" in explorer.caption.value
    # The figure on display is the one for these sliders.
    np.testing.assert_allclose(bar_heights(explorer.figure, "weights"), expected)


def test_local_m_uses_the_target_step_and_no_gaussian():
    explorer = LocalWindow(D=2, t=4)
    explorer.mode.value = "local-m"
    assert explorer.p_t.layout.display == "none" and explorer.t.layout.display is None
    s = explorer.shown
    assert s["mode"] == "local-m" and s["p_t"] == 4.0 and s["gaussian"] is None and s["sigma"] is None
    assert (s["lo"], s["hi"]) == (2, 6)
    assert math.isclose(s["weight_sum"], 1.0)
    explorer.t.value = 0
    assert (explorer.shown["lo"], explorer.shown["hi"]) == (0, 2)
    explorer.p_t.value = 9.0  # the local-p slider does not move the local-m window
    assert explorer.shown["p_t"] == 0.0
    assert "No Gaussian" in explorer.caption.value
    assert not [line for line in explorer.figure.axes[0].lines if line.get_gid() == "gaussian"]


def test_local_window_with_equal_scores_and_given_scores():
    equal = LocalWindow(tokens=list("abcdef"), scores=None, D=1, p_t=2.0)
    np.testing.assert_allclose(equal.shown["align"], [0, 1 / 3, 1 / 3, 1 / 3, 0, 0])
    given = LocalWindow(tokens=list("abcd"), scores=[0.0, 0.0, 5.0, 0.0], D=1, p_t=1.0)
    assert given.shown["align"][2] > 0.9


def test_local_window_replaces_and_closes_old_figures():
    explorer = LocalWindow()
    first = explorer.figure
    explorer.D.value = 3
    assert explorer.figure is not first
    assert not plt.get_fignums()


@pytest.mark.parametrize("kwargs, match", [({"tokens": ["a"]}, "at least 2"),
                                           ({"scores": [1.0, 2.0]}, r"\(12,\).*\(2,\)"),
                                           ({"scores": "zeros"}, "random"), ({"mode": "global"}, "mode"),
                                           ({"D": 0}, "D must"), ({"p_t": 12.0}, "p_t"), ({"t": -1}, "t must")])
def test_local_window_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LocalWindow(**kwargs)


# ----------------------------------------------------------------------------- TemperatureExplorer


def test_temperature_explorer_starts_at_tau_1():
    explorer = TemperatureExplorer()
    s = explorer.shown
    assert s["tau"] == 1.0 and s["argmax"] == 1  # "cat", score 2.0
    np.testing.assert_allclose(s["weights"], softmax(np.array(DEFAULT_SCORES)))
    assert math.isclose(s["max_entropy"], math.log(6))
    assert explorer.tau.min == -2 and explorer.tau.max == 2 and explorer.tau.base == 10
    assert "'cat'" in explorer.caption.value and "nats" in explorer.caption.value


@pytest.mark.parametrize("tau", [0.01, 0.3, 1.0, 7.0, 100.0])
def test_temperature_explorer_shows_what_the_slider_picks(tau):
    explorer = TemperatureExplorer()
    explorer.tau.value = tau
    s = explorer.shown
    weights = softmax_with_temperature(np.array(DEFAULT_SCORES), s["tau"])
    np.testing.assert_allclose(s["weights"], weights)
    assert math.isclose(s["max_weight"], weights.max())
    reference = -sum(w * math.log(w) for w in weights if w > 0)
    assert math.isclose(s["entropy"], reference, abs_tol=1e-12)
    assert f"{s['entropy']:.3f} nats" in explorer.caption.value
    np.testing.assert_allclose(bar_heights(explorer.figure, "weights"), weights)


def test_temperature_explorer_limits():
    explorer = TemperatureExplorer()
    explorer.tau.value = 0.01
    cold = explorer.shown
    assert cold["max_weight"] > 0.99 and cold["entropy"] < 0.05
    np.testing.assert_allclose(cold["hardmax"], [0, 1, 0, 0, 0, 0])
    explorer.tau.value = 100.0
    hot = explorer.shown
    assert hot["max_weight"] < 0.2 and hot["entropy"] > 0.99 * hot["max_entropy"]
    assert not plt.get_fignums()


def test_temperature_explorer_custom_scores_and_errors():
    explorer = TemperatureExplorer(scores=[1.0, 1.0, 0.0], tau=0.1)
    assert explorer.tokens == ["0", "1", "2"]
    np.testing.assert_allclose(explorer.shown["hardmax"], [0.5, 0.5, 0])
    with pytest.raises(ValueError, match="at least 2"):
        TemperatureExplorer(scores=[1.0])
    with pytest.raises(ValueError, match="2 tokens were given for 3 scores"):
        TemperatureExplorer(scores=[1.0, 2.0, 3.0], tokens=["a", "b"])
    with pytest.raises(ValueError, match="tau must lie"):
        TemperatureExplorer(tau=1000.0)
