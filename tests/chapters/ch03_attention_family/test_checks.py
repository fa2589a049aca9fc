"""Tests of attncourse.chapters.ch03_attention_family.checks: Luong's general score, the local-p weights and
the softmax with a temperature.

Each typical learner bug is written out as a small function, and the check must
fail on it with the hint that names that bug.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from attncourse.chapters.ch03_attention_family.checks import (
    GS_RULE,
    check_general_score,
    check_local_p_weights,
    check_temperature_softmax,
    general_score_cases,
    local_p_weights_cases,
    temperature_softmax_cases,
)
from attncourse.checks import run_cases
from attncourse.functional.luong import luong_step
from tests.check_helpers import (
    assert_failed,
    assert_raised,
    lenient_hand_offs,  # noqa: F401  (a fixture)
)

# Right and buggy answers built on library functions: the hand-off rules are tested in
# tests/checks/test_hand_offs.py.
pytestmark = pytest.mark.usefixtures("lenient_hand_offs")

# ------------------------------------------------------------------ learners' general scores


def gs_numpy(h_t, h_s, w_a):
    return h_t @ w_a @ h_s.T


def gs_torch(h_t, h_s, w_a):
    h_t, h_s, w_a = (torch.tensor(a, dtype=torch.float32) for a in (h_t, h_s, w_a))
    return (h_s @ w_a.T) @ h_t


def gs_loop(h_t, h_s, w_a):
    return [float(h_t @ w_a @ row) for row in h_s]


def gs_transposed(h_t, h_s, w_a):
    return h_s @ w_a @ h_t


def gs_dot(h_t, h_s, w_a):
    return h_s @ h_t


def gs_softmax(h_t, h_s, w_a):
    e = h_t @ w_a @ h_s.T
    e = np.exp(e - e.max())
    return e / e.sum()


def gs_scaled(h_t, h_s, w_a):
    return h_t @ w_a @ h_s.T / np.sqrt(h_t.shape[0])


def gs_projected(h_t, h_s, w_a):
    return h_s @ w_a.T


def gs_column(h_t, h_s, w_a):
    return (h_t @ w_a @ h_s.T)[:, None]


def gs_raises(h_t, h_s, w_a):
    return np.dot(h_s, w_a) @ h_t


# ------------------------------------------------------------------ learners' local-p weights


def _softmax_in(scores, window):
    e = np.where(window, np.exp(scores - scores[window].max()), 0.0)
    return e / e.sum()


def _gauss(s, centre, sigma):
    return np.exp(-((s - centre) ** 2) / (2 * sigma**2))


def lp_numpy(scores, p_t, D):
    s = np.arange(len(scores))
    window = np.abs(s - p_t) <= D
    return _softmax_in(scores, window) * _gauss(s, p_t, D / 2)


def lp_torch(scores, p_t, D):
    scores = torch.tensor(scores, dtype=torch.float32)
    s = torch.arange(len(scores), dtype=torch.float32)
    window = (s - p_t).abs() <= D
    align = torch.softmax(scores.masked_fill(~window, float("-inf")), dim=-1)
    return align * torch.exp(-((s - p_t) ** 2) / (2 * (D / 2) ** 2))


def lp_slices(scores, p_t, D):
    lo, hi = max(math.ceil(p_t - D), 0), min(math.floor(p_t + D), len(scores) - 1)
    out = np.zeros(len(scores))
    s = np.arange(lo, hi + 1)
    out[lo:hi + 1] = _softmax_in(scores[lo:hi + 1], np.ones(hi + 1 - lo, bool)) * _gauss(s, p_t, D / 2)
    return out


def lp_no_gaussian(scores, p_t, D):
    return _softmax_in(scores, np.abs(np.arange(len(scores)) - p_t) <= D)


def lp_sigma_d(scores, p_t, D):
    s = np.arange(len(scores))
    return _softmax_in(scores, np.abs(s - p_t) <= D) * _gauss(s, p_t, D)


def lp_sigma_int(scores, p_t, D):
    s = np.arange(len(scores))
    return _softmax_in(scores, np.abs(s - p_t) <= D) * _gauss(s, p_t, D // 2)


def lp_whole_sentence(scores, p_t, D):
    s = np.arange(len(scores))
    window = np.abs(s - p_t) <= D
    return _softmax_in(scores, np.ones(len(scores), bool)) * _gauss(s, p_t, D / 2) * window


def lp_gaussian_first(scores, p_t, D):
    s = np.arange(len(scores))
    window = np.abs(s - p_t) <= D
    return _softmax_in(scores * _gauss(s, p_t, D / 2), window)


def lp_renormalised(scores, p_t, D):
    w = lp_numpy(scores, p_t, D)
    return w / w.sum()


def lp_rounded(scores, p_t, D):
    s = np.arange(len(scores))
    window = np.abs(s - round(p_t)) <= D
    return _softmax_in(scores, window) * _gauss(s, p_t, D / 2)


def lp_slice_end(scores, p_t, D):
    lo, hi = max(math.ceil(p_t - D), 0), math.floor(p_t + D)
    s = np.arange(len(scores))
    return _softmax_in(scores, (s >= lo) & (s < hi)) * _gauss(s, p_t, D / 2)


def lp_strict(scores, p_t, D):
    s = np.arange(len(scores))
    return _softmax_in(scores, np.abs(s - p_t) < D) * _gauss(s, p_t, D / 2)


def lp_centre_rounded(scores, p_t, D):
    s = np.arange(len(scores))
    return _softmax_in(scores, np.abs(s - p_t) <= D) * _gauss(s, round(p_t), D / 2)


def lp_window_only(scores, p_t, D):
    s = np.arange(len(scores))
    window = np.abs(s - p_t) <= D
    return lp_numpy(scores, p_t, D)[window]


def lp_no_max(scores, p_t, D):
    s = np.arange(len(scores))
    window = np.abs(s - p_t) <= D
    e = np.where(window, np.exp(scores), 0.0)
    return e / e.sum() * _gauss(s, p_t, D / 2)


def lp_float_slice(scores, p_t, D):
    return scores[p_t - D:p_t + D]


# ------------------------------------------------------------------ learners' temperature softmaxes


def ts_numpy(scores, tau):
    z = scores / tau
    e = np.exp(z - z.max())
    return e / e.sum()


def ts_torch(scores, tau):
    return torch.softmax(torch.tensor(scores) / tau, dim=-1)


def ts_times(scores, tau):
    return ts_numpy(scores * tau * tau, tau)


def ts_ignored(scores, tau):
    return ts_numpy(scores, 1.0)


def ts_after(scores, tau):
    return ts_numpy(scores, 1.0) / tau


def ts_no_max(scores, tau):
    e = np.exp(scores / tau)
    return e / e.sum()


def ts_hardmax(scores, tau):
    return (scores == scores.max()).astype(float) / (scores == scores.max()).sum()


# ------------------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    ("check", "fn"),
    [
        (check_general_score, gs_numpy),
        (check_general_score, gs_torch),
        (check_general_score, gs_loop),
        (check_local_p_weights, lp_numpy),
        (check_local_p_weights, lp_torch),
        (check_local_p_weights, lp_slices),
        (check_temperature_softmax, ts_numpy),
        (check_temperature_softmax, ts_torch),
    ],
)
def test_correct_functions_pass(check, fn):
    result = check(fn)
    assert result.passed and bool(result), str(result)
    assert result.cases_passed == result.cases_total >= 5
    assert result.hint == ""
    assert str(result) == f"✔ {check.__name__}: all {result.cases_total} hidden cases pass"


# -------------------------------------------------------------------------- general score


@pytest.mark.parametrize(
    ("fn", "case_number", "hint"),
    [
        (gs_transposed, 1, "W_a is used transposed"),
        (gs_dot, 1, "W_a is ignored"),
        (gs_softmax, 1, "those are the alignment weights"),
        (gs_scaled, 1, "divided by the square root of the width"),
        (gs_projected, 1, "before the product with h_t"),
        (gs_column, 1, "1-D array"),
    ],
)
def test_general_score_bugs_get_targeted_hints(fn, case_number, hint):
    assert_failed(check_general_score(fn), case_number, hint)


def test_general_score_cases_use_the_library_and_a_non_symmetric_w_a():
    cases = general_score_cases()
    first = cases[0]
    assert not np.allclose(first.args["w_a"], first.args["w_a"].T)
    for case in cases:
        np.testing.assert_allclose(case.expected, gs_numpy(*case.args.values()), atol=1e-12)
    np.testing.assert_allclose(cases[2].expected, cases[2].args["h_s"] @ cases[2].args["h_t"])  # W_a = I
    assert cases[-1].args["w_a"].shape == (3, 5)


def test_general_score_raising_function_gives_one_line():
    result = check_general_score(gs_raises)
    # Square W_a: runs and is the transposed bug; the (3, 5) case makes it raise.
    assert_failed(result, 1, "transposed")
    # W_a (3, 5) in the last case: the dot score's shapes no longer fit, so it raises.
    raised = run_cases("check_general_score", gs_dot, general_score_cases()[-1:])
    assert_raised(raised, "ValueError", "gs_dot: `return h_s @ h_t`")
    assert "(hidden_dim, key_dim) = (3, 5)" in raised.hint


def test_general_score_wrong_shape_is_named():
    result = check_general_score(gs_projected)
    assert "your function returned shape (5, 4); expected shape (5,)" in result.message
    assert "inputs: h_t (4,) float64, h_s (5, 4) float64, w_a (4, 4) float64" in result.message


# -------------------------------------------------------------------------- local-p weights


def test_local_p_reference_is_luong_step():
    # A location score with h_t = [1] and w_a = scores as a column gives score_location = scores.
    for case in local_p_weights_cases():
        scores, p_t, D = case.args["scores"], case.args["p_t"], case.args["D"]
        trace = luong_step(np.ones(1), np.zeros((len(scores), 2)), "location", {"w_a": scores[:, None]},
                           mode="local-p", D=D, p_t=p_t)
        np.testing.assert_allclose(case.expected, trace.weights, atol=1e-12)
        assert (case.expected[~trace.window] == 0).all()


def test_local_p_cases_cover_the_edges():
    cases = local_p_weights_cases()
    windows = [np.flatnonzero(np.abs(np.arange(len(c.args["scores"])) - c.args["p_t"]) <= c.args["D"])
               for c in cases]
    assert (windows[0][0], windows[0][-1]) == (2, 5)
    assert cases[1].args["p_t"] == int(cases[1].args["p_t"])  # edges on positions
    assert windows[2][0] == 0 and cases[2].args["p_t"] - cases[2].args["D"] < 0
    assert cases[3].args["p_t"] > len(cases[3].args["scores"]) - 1
    assert cases[4].args["D"] % 2 == 1
    assert len(windows[5]) == len(cases[5].args["scores"])
    assert cases[6].args["scores"].min() > 900


@pytest.mark.parametrize(
    ("fn", "case_number", "hint"),
    [
        (lp_no_gaussian, 1, "The Gaussian is missing"),
        (lp_sigma_d, 1, "sigma = D / 2"),
        (lp_whole_sentence, 1, "whole sentence"),
        (lp_gaussian_first, 1, "before the softmax"),
        (lp_renormalised, 1, "do not renormalise"),
        (lp_rounded, 1, "Do not round p_t"),
        (lp_slice_end, 1, "slice"),
        (lp_strict, 2, "both ends included"),
        (lp_centre_rounded, 1, "centred on a rounded p_t"),
        (lp_sigma_int, 3, "not floor division"),
        (lp_window_only, 1, "window's positions only"),
        (lp_no_max, 7, "overflows to inf"),
    ],
)
def test_local_p_bugs_get_targeted_hints(fn, case_number, hint):
    assert_failed(check_local_p_weights(fn), case_number, hint)


def test_local_p_wrong_shape_is_named():
    result = check_local_p_weights(lp_window_only)
    assert "your function returned shape (4,); expected shape (8,)" in result.message
    assert "inputs: scores (8,) float64, p_t=3.4, D=2" in result.message


def test_local_p_raising_function_gives_one_line():
    result = check_local_p_weights(lp_float_slice)
    assert_failed(result, 1)
    assert_raised(result, "TypeError", "lp_float_slice: `return scores[p_t - D:p_t + D]`")


def test_local_p_leak_outside_the_window_is_named():
    def leaky(scores, p_t, D):
        return lp_numpy(scores, p_t, D) + 0.01

    result = check_local_p_weights(leaky)
    assert_failed(result, 1, "outside the window got nonzero weight")


# -------------------------------------------------------------------------- temperature


@pytest.mark.parametrize(
    ("fn", "case_number", "hint"),
    [
        (ts_times, 1, "multiplied the scores by tau"),
        (ts_ignored, 1, "tau is ignored"),
        (ts_after, 1, "after the softmax"),
        (ts_no_max, 5, "NaN at a small tau"),
        (ts_hardmax, 1, "hardmax"),
    ],
)
def test_temperature_bugs_get_targeted_hints(fn, case_number, hint):
    assert_failed(check_temperature_softmax(fn), case_number, hint)


def test_temperature_tie_is_split():
    case = temperature_softmax_cases()[-1]
    top = np.flatnonzero(case.args["scores"] == case.args["scores"].max())
    assert len(top) == 2
    np.testing.assert_allclose(case.expected[top], 0.5)


def test_checks_emit_no_warning_and_point_to_the_rule():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not check_local_p_weights(lp_no_max)
        assert not check_temperature_softmax(ts_no_max)
        assert check_local_p_weights(lp_numpy)
    assert "between the query h_t on its left" in GS_RULE


def test_failing_result_reproduces_with_its_args():
    result = check_local_p_weights(lp_sigma_d)
    expected = local_p_weights_cases()[0].expected
    assert not np.allclose(lp_sigma_d(*result.args), expected)
    np.testing.assert_allclose(lp_numpy(*result.args), expected, atol=1e-12)
