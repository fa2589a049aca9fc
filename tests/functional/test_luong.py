"""Tests for the NumPy Luong attention step and the softmax with temperature."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from attncourse.functional.luong import (
    LUONG_MODES,
    LUONG_MOVES,
    LUONG_SCORES,
    LuongStepTrace,
    attentional_state,
    gaussian_weights,
    local_window,
    luong_step,
    predict_position,
    score_concat,
    score_dot,
    score_general,
    score_location,
)
from attncourse.functional.temperature import hardmax, softmax_with_temperature

PROPERTY = settings(max_examples=30, deadline=None)
HIDDEN, SRC_LEN, ATTN, MAX_LEN = 4, 7, 5, 9


def random_params(seed=0, hidden=HIDDEN, key=HIDDEN):
    rng = np.random.default_rng(seed)
    return {
        "general": {"w_a": rng.normal(size=(hidden, key))},
        "concat": {"w_a": rng.normal(size=(ATTN, hidden + key)), "v_a": rng.normal(size=ATTN)},
        "location": {"w_a": rng.normal(size=(MAX_LEN, hidden))},
        "dot": {},
        "position": {"w_p": rng.normal(size=(hidden, hidden)), "v_p": rng.normal(size=hidden)},
    }


def states(seed=0, src_len=SRC_LEN, hidden=HIDDEN):
    rng = np.random.default_rng(seed + 100)
    return rng.normal(size=hidden), rng.normal(size=(src_len, hidden))


# ---------------------------------------------------------------- scores


def test_scores_match_hand_computed_formulas():
    h_t, h_s = states()
    p = random_params()
    assert score_dot(h_t, h_s) == pytest.approx([h_s[s] @ h_t for s in range(SRC_LEN)])
    w = p["general"]["w_a"]
    assert score_general(h_t, h_s, w) == pytest.approx([h_t @ w @ h_s[s] for s in range(SRC_LEN)])
    w, v = p["concat"]["w_a"], p["concat"]["v_a"]
    expected = [v @ np.tanh(w @ np.concatenate([h_t, h_s[s]])) for s in range(SRC_LEN)]
    assert score_concat(h_t, h_s, w, v) == pytest.approx(expected)
    w = p["location"]["w_a"]
    assert score_location(h_t, w) == pytest.approx(w @ h_t)
    assert score_location(h_t, w, src_len=3) == pytest.approx((w @ h_t)[:3])


def test_location_scores_ignore_the_source_words():
    h_t, h_s = states()
    w = random_params()["location"]["w_a"]
    a = luong_step(h_t, h_s, "location", {"w_a": w})
    b = luong_step(h_t, -3.0 * h_s, "location", {"w_a": w})
    np.testing.assert_array_equal(a.weights, b.weights)


def test_attentional_state_is_eq5():
    rng = np.random.default_rng(3)
    c, h, w_c = rng.normal(size=3), rng.normal(size=4), rng.normal(size=(4, 7))
    np.testing.assert_allclose(attentional_state(c, h, w_c), np.tanh(w_c[:, :3] @ c + w_c[:, 3:] @ h))


# ---------------------------------------------------------------- windows and the Gaussian


def test_local_window_is_the_closed_interval_around_p_t():
    np.testing.assert_array_equal(local_window(3, 1, 7), [0, 0, 1, 1, 1, 0, 0])
    np.testing.assert_array_equal(local_window(2.5, 1, 7), [0, 0, 1, 1, 0, 0, 0])
    np.testing.assert_array_equal(local_window(0, 2, 7), [1, 1, 1, 0, 0, 0, 0])  # crosses the start: clipped
    np.testing.assert_array_equal(local_window(6.9, 2, 7), [0, 0, 0, 0, 0, 1, 1])  # crosses the end
    np.testing.assert_array_equal(local_window(4, 0, 7), [0, 0, 0, 0, 1, 0, 0])


def test_gaussian_weights_equal_the_formula_with_sigma_half_the_window():
    positions = np.arange(10)
    for p_t, D in ((3.0, 2), (4.7, 4), (0.2, 10)):
        sigma = D / 2
        expected = np.exp(-((positions - p_t) ** 2) / (2 * sigma**2))
        np.testing.assert_allclose(gaussian_weights(positions, p_t, D), expected, rtol=1e-15)
    assert gaussian_weights([5], 5.0, 3)[0] == 1.0  # peak 1: a factor, not a distribution


def test_local_p_weights_are_align_times_gaussian_without_renormalising():
    h_t, h_s = states(1)
    p = random_params(1)
    tr = luong_step(h_t, h_s, "general", p["general"], mode="local-p", D=2, p_t=3.4)
    np.testing.assert_allclose(tr.weights, tr.align * gaussian_weights(np.arange(SRC_LEN), 3.4, 2))
    assert tr.align.sum() == pytest.approx(1.0)
    assert tr.weights.sum() < 1.0


@pytest.mark.parametrize("mode,kw", [("local-m", {"t": 3}), ("local-p", {"p_t": 2.6})])
@pytest.mark.parametrize("score", LUONG_SCORES)
def test_positions_outside_the_window_get_exactly_zero(mode, kw, score):
    h_t, h_s = states(2)
    p = random_params(2)
    tr = luong_step(h_t, h_s, score, {**p[score], **p["position"]}, mode=mode, D=1, **kw)
    outside = np.abs(np.arange(SRC_LEN) - tr.p_t) > 1
    assert outside.any()
    assert np.all(tr.weights[outside] == 0.0) and np.all(tr.align[outside] == 0.0)
    assert np.all(tr.weights[~outside] > 0.0)


def test_local_m_clamps_p_t_to_the_last_real_word():
    h_t, h_s = states(3)
    mask = np.arange(SRC_LEN) < 4
    tr = luong_step(h_t, h_s, "dot", mode="local-m", t=10, D=1, mask=mask)
    assert tr.p_t == 3.0
    np.testing.assert_array_equal(tr.window, [0, 0, 1, 1, 0, 0, 0])
    assert tr.weights.sum() == pytest.approx(1.0)


def test_local_p_predicts_p_t_from_h_t_with_eq10_and_the_real_length():
    h_t, h_s = states(4)
    pp = random_params(4)["position"]
    mask = np.arange(SRC_LEN) < 5
    tr = luong_step(h_t, h_s, "dot", pp, mode="local-p", D=2, mask=mask)
    z = pp["v_p"] @ np.tanh(pp["w_p"] @ h_t)
    assert tr.p_t == pytest.approx(5 / (1 + np.exp(-z)))
    assert tr.p_t == pytest.approx(predict_position(h_t, pp["w_p"], pp["v_p"], 5))
    assert np.all(tr.weights[~mask] == 0.0)


@pytest.mark.parametrize("score", LUONG_SCORES)
@pytest.mark.parametrize("mode,kw", [("local-m", {"t": 2}), ("local-p", {"p_t": 5.5}), ("local-p", {})])
def test_local_with_a_whole_sentence_window_and_no_gaussian_is_global(score, mode, kw):
    h_t, h_s = states(5)
    p = random_params(5)
    params = {**p[score], **p["position"]}
    mask = np.arange(SRC_LEN) < 6
    glob = luong_step(h_t, h_s, score, params, mask=mask)
    loc = luong_step(h_t, h_s, score, params, mode=mode, D=SRC_LEN, gaussian=False, mask=mask, **kw)
    np.testing.assert_allclose(loc.weights, glob.weights, rtol=1e-12, atol=0)
    np.testing.assert_allclose(loc.context, glob.context, rtol=1e-12)


def test_trace_is_frozen_and_weights_sum_to_one_for_global():
    h_t, h_s = states(6)
    tr = luong_step(h_t, h_s, "dot", mask=np.arange(SRC_LEN) < 5)
    assert isinstance(tr, LuongStepTrace) and tr.p_t is None and tr.gaussian is None and tr.D is None
    assert tr.weights.sum() == pytest.approx(1.0) and np.all(tr.weights[5:] == 0.0)
    np.testing.assert_allclose(tr.context, tr.weights @ h_s)
    with pytest.raises(dataclasses.FrozenInstanceError):
        tr.weights = None
    assert LUONG_MOVES == ("position", "window", "score", "align", "context")
    assert LUONG_MODES == ("global", "local-m", "local-p")


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"score": "cosine"}, "score must be one of"),
        ({"mode": "local"}, "mode must be one of"),
        ({"mode": "local-m", "t": 1, "D": -1}, "window D must be >= 0"),
        ({"mode": "local-m", "t": 1, "D": 1.5}, "integer"),
        ({"mode": "local-m", "t": 1}, "needs the window half-width D"),
        ({"mode": "local-m", "D": 2}, "needs the target step t"),
        ({"mode": "local-p", "D": 0, "p_t": 1.0}, "sigma = D / 2"),
        ({"mode": "local-p", "D": 2}, r"params\['w_p'\]"),
        ({"gaussian": True}, "no Gaussian"),
        ({"score": "general"}, r"params\['w_a'\]"),
        ({"mask": np.ones(3, dtype=bool)}, r"mask must be \(src_len,\) = \(7,\)"),
    ],
)
def test_luong_step_rejects_bad_inputs(kwargs, match):
    h_t, h_s = states()
    kwargs = {"score": "dot", **kwargs}
    with pytest.raises(ValueError, match=match):
        luong_step(h_t, h_s, **kwargs)


def test_shape_errors_name_both_shapes():
    h_t, h_s = states()
    with pytest.raises(ValueError, match=r"h_t \(4,\) vs h_s \(7, 6\)"):
        score_dot(h_t, np.zeros((7, 6)))
    with pytest.raises(ValueError, match=r"w_a must be \(hidden_dim, key_dim\) = \(4, 4\)"):
        score_general(h_t, h_s, np.zeros((4, 5)))
    with pytest.raises(ValueError, match=r"\(5, 8\)"):
        score_concat(h_t, h_s, np.zeros((5, 7)), np.zeros(5))
    with pytest.raises(ValueError, match="max_src_len=9 .* src_len=12"):
        score_location(h_t, np.zeros((9, 4)), src_len=12)


# ---------------------------------------------------------------- temperature


def test_temperature_one_is_the_softmax():
    scores = np.array([0.3, -1.0, 2.0])
    np.testing.assert_allclose(softmax_with_temperature(scores, 1.0), np.exp(scores) / np.exp(scores).sum())


def test_temperature_to_zero_approaches_hardmax_with_ties_split():
    scores = np.array([[1.0, 3.0, 3.0, -2.0], [0.5, 0.4, 0.3, 0.2]])
    mask = np.array([[True, True, True, True], [False, True, True, True]])
    limit = hardmax(scores, mask)
    np.testing.assert_array_equal(limit, [[0, 0.5, 0.5, 0], [0, 1, 0, 0]])
    gaps = [np.abs(softmax_with_temperature(scores, tau, mask) - limit).max() for tau in (1.0, 0.1, 0.01)]
    assert gaps[0] > gaps[1] > gaps[2]
    np.testing.assert_array_equal(softmax_with_temperature(scores, 1e-300, mask), limit)


def test_temperature_to_infinity_approaches_uniform_over_unmasked():
    scores = np.array([5.0, -3.0, 0.0, 100.0])
    mask = np.array([True, True, True, False])
    uniform = np.array([1 / 3, 1 / 3, 1 / 3, 0.0])
    gaps = [np.abs(softmax_with_temperature(scores, tau, mask) - uniform).max() for tau in (1.0, 10.0, 1000.0)]
    assert gaps[0] > gaps[1] > gaps[2] and gaps[2] < 0.01
    np.testing.assert_allclose(softmax_with_temperature(scores, np.inf, mask), uniform)


@pytest.mark.parametrize("tau", [0.0, -1.0, float("nan")])
def test_temperature_must_be_positive(tau):
    with pytest.raises(ValueError, match="tau must be > 0"):
        softmax_with_temperature(np.zeros(3), tau)


def test_temperature_fully_masked_row_is_zero():
    out = softmax_with_temperature(np.ones((2, 3)), 0.5, np.array([[True, False, True], [False, False, False]]))
    np.testing.assert_allclose(out, [[0.5, 0, 0.5], [0, 0, 0]])


@PROPERTY
@given(
    scores=hnp.arrays(np.float64, (3, 5), elements=st.floats(-20, 20)),
    tau=st.floats(1e-3, 1e3),
)
def test_temperature_keeps_the_order_and_sums_to_one(scores, tau):
    w = softmax_with_temperature(scores, tau)
    np.testing.assert_allclose(w.sum(axis=-1), 1.0)
    order = np.argsort(scores, axis=-1, kind="stable")
    assert np.all(np.diff(np.take_along_axis(w, order, axis=-1), axis=-1) >= -1e-12)
