"""Tests of attncourse.checks.seq2seq and attncourse.checks.masks: the GRU step, padding mask, Bahdanau score and
masked softmax checks.

Each typical learner bug is written out as a small function, and the check must
fail on it with the hint that names that bug.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from attncourse.checks.masks import (
    check_masked_softmax,
    check_padding_mask,
    draw_lengths,
    masked_softmax_cases,
)
from attncourse.checks.seq2seq import (
    GRU_LAYOUT_HINT,
    additive_score_cases,
    check_additive_score,
    check_gru_cell,
    gru_cell_cases,
)
from attncourse.functional import (
    additive_attention_step,
    masked_softmax,
    padding_mask,
    softmax,
)
from tests.check_helpers import (
    assert_failed,
    assert_raised,
    lenient_hand_offs,  # noqa: F401  (a fixture)
    own_copy,
)

# Right and buggy answers built on library functions: the hand-off rules are tested in
# tests/checks/test_hand_offs.py.
pytestmark = pytest.mark.usefixtures("lenient_hand_offs")

# Learners' functions built on the package's maths use copies (the checks refuse the package's).
own_softmax, own_masked_softmax = own_copy(softmax), own_copy(masked_softmax)
own_padding_mask, own_additive_attention_step = own_copy(padding_mask), own_copy(additive_attention_step)

# ------------------------------------------------------------------ learners' GRU steps


def _sigmoid(a):
    return 1 / (1 + np.exp(-a))


def _chunks(x, h, w_ih, w_hh, b_ih, b_hh):
    return np.split(x @ w_ih.T + b_ih, 3, axis=-1), np.split(h @ w_hh.T + b_hh, 3, axis=-1)


def gru_numpy(x, h, w_ih, w_hh, b_ih, b_hh):
    (i_r, i_z, i_n), (h_r, h_z, h_n) = _chunks(x, h, w_ih, w_hh, b_ih, b_hh)
    r, z = _sigmoid(i_r + h_r), _sigmoid(i_z + h_z)
    n = np.tanh(i_n + r * h_n)
    return (1 - z) * n + z * h


def gru_torch(x, h, w_ih, w_hh, b_ih, b_hh):
    cell = torch.nn.GRUCell(w_ih.shape[1], w_hh.shape[1])
    with torch.no_grad():
        for param, value in zip((cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh),
                                (w_ih, w_hh, b_ih, b_hh)):
            param.copy_(torch.tensor(value, dtype=torch.float32))
        return cell(torch.tensor(x, dtype=torch.float32), torch.tensor(h, dtype=torch.float32))


def gru_z_swapped(x, h, w_ih, w_hh, b_ih, b_hh):
    (i_r, i_z, i_n), (h_r, h_z, h_n) = _chunks(x, h, w_ih, w_hh, b_ih, b_hh)
    r, z = _sigmoid(i_r + h_r), _sigmoid(i_z + h_z)
    n = np.tanh(i_n + r * h_n)
    return z * n + (1 - z) * h


def gru_reset_bias_outside(x, h, w_ih, w_hh, b_ih, b_hh):
    hid = h.shape[1]
    (i_r, i_z, i_n), (h_r, h_z, _) = _chunks(x, h, w_ih, w_hh, b_ih, b_hh)
    r, z = _sigmoid(i_r + h_r), _sigmoid(i_z + h_z)
    n = np.tanh(i_n + r * (h @ w_hh[2 * hid:].T) + b_hh[2 * hid:])
    return (1 - z) * n + z * h


def gru_reset_no_bias(x, h, w_ih, w_hh, b_ih, b_hh):
    hid = h.shape[1]
    (i_r, i_z, i_n), (h_r, h_z, _) = _chunks(x, h, w_ih, w_hh, b_ih, b_hh)
    r, z = _sigmoid(i_r + h_r), _sigmoid(i_z + h_z)
    n = np.tanh(i_n + r * (h @ w_hh[2 * hid:].T))
    return (1 - z) * n + z * h


def gru_reset_before_product(x, h, w_ih, w_hh, b_ih, b_hh):
    hid = h.shape[1]
    (i_r, i_z, i_n), (h_r, h_z, _) = _chunks(x, h, w_ih, w_hh, b_ih, b_hh)
    r, z = _sigmoid(i_r + h_r), _sigmoid(i_z + h_z)
    n = np.tanh(i_n + (r * h) @ w_hh[2 * hid:].T + b_hh[2 * hid:])
    return (1 - z) * n + z * h


def gru_order_zrn(x, h, w_ih, w_hh, b_ih, b_hh):
    (i_z, i_r, i_n), (h_z, h_r, h_n) = _chunks(x, h, w_ih, w_hh, b_ih, b_hh)
    r, z = _sigmoid(i_r + h_r), _sigmoid(i_z + h_z)
    n = np.tanh(i_n + r * h_n)
    return (1 - z) * n + z * h


def gru_activations_swapped(x, h, w_ih, w_hh, b_ih, b_hh):
    (i_r, i_z, i_n), (h_r, h_z, h_n) = _chunks(x, h, w_ih, w_hh, b_ih, b_hh)
    r, z = np.tanh(i_r + h_r), np.tanh(i_z + h_z)
    n = _sigmoid(i_n + r * h_n)
    return (1 - z) * n + z * h


def gru_no_biases(x, h, w_ih, w_hh, b_ih, b_hh):
    return gru_numpy(x, h, w_ih, w_hh, 0 * b_ih, 0 * b_hh)


def gru_returns_candidate(x, h, w_ih, w_hh, b_ih, b_hh):
    (i_r, _, i_n), (h_r, _, h_n) = _chunks(x, h, w_ih, w_hh, b_ih, b_hh)
    return np.tanh(i_n + _sigmoid(i_r + h_r) * h_n)


def gru_unstable_sigmoid(x, h, w_ih, w_hh, b_ih, b_hh):
    (i_r, i_z, i_n), (h_r, h_z, h_n) = _chunks(x, h, w_ih, w_hh, b_ih, b_hh)
    r = np.exp(i_r + h_r) / (1 + np.exp(i_r + h_r))
    z = np.exp(i_z + h_z) / (1 + np.exp(i_z + h_z))
    n = np.tanh(i_n + r * h_n)
    return (1 - z) * n + z * h


def gru_transposed(x, h, w_ih, w_hh, b_ih, b_hh):
    return gru_numpy(x, h, w_ih, w_hh, b_ih, b_hh).T


def gru_stacked(x, h, w_ih, w_hh, b_ih, b_hh):
    return x @ w_ih.T + b_ih + h @ w_hh.T + b_hh


def gru_weights_on_the_left(x, h, w_ih, w_hh, b_ih, b_hh):
    gates = w_ih @ x + b_ih
    return gates


# ---------------------------------------------------------------- learners' padding masks


def pad_positions(lengths, max_len):
    return np.arange(max_len)[None, :], np.asarray(lengths)[:, None]


def pad_torch(lengths, max_len):
    return torch.arange(max_len)[None, :] < torch.as_tensor(lengths)[:, None]


def pad_inverted(lengths, max_len):
    j, n = pad_positions(lengths, max_len)
    return j >= n


def pad_off_by_one(lengths, max_len):
    j, n = pad_positions(lengths, max_len)
    return j <= n


def pad_ints(lengths, max_len):
    j, n = pad_positions(lengths, max_len)
    return (j < n).astype(int)


def pad_ignores_max_len(lengths, max_len):
    return np.arange(max(lengths))[None, :] < np.asarray(lengths)[:, None]


def pad_squeezed(lengths, max_len):
    j, n = pad_positions(lengths, max_len)
    return (j < n).squeeze()


def pad_transposed(lengths, max_len):
    j, n = pad_positions(lengths, max_len)
    return (j < n).T


# ------------------------------------------------------------ learners' alignment models


def score_torch(s_prev, h, w_a, u_a, v_a):
    s_prev, h, w_a, u_a, v_a = (torch.tensor(a, dtype=torch.float32) for a in (s_prev, h, w_a, u_a, v_a))
    return torch.tanh(w_a @ s_prev + h @ u_a.T) @ v_a


def score_no_tanh(s_prev, h, w_a, u_a, v_a):
    return (w_a @ s_prev + h @ u_a.T) @ v_a


def score_swapped(s_prev, h, w_a, u_a, v_a):
    return np.tanh(u_a @ s_prev + h @ w_a.T) @ v_a


def score_transposed(s_prev, h, w_a, u_a, v_a):
    return np.tanh(s_prev @ w_a + h @ u_a) @ v_a


def score_weights(s_prev, h, w_a, u_a, v_a):
    e = np.tanh(w_a @ s_prev + h @ u_a.T) @ v_a
    return np.exp(e) / np.exp(e).sum()


def score_hidden(s_prev, h, w_a, u_a, v_a):
    return np.tanh(w_a @ s_prev + h @ u_a.T)


def score_column(s_prev, h, w_a, u_a, v_a):
    return (np.tanh(w_a @ s_prev + h @ u_a.T) @ v_a)[:, None]


def score_h_not_transposed(s_prev, h, w_a, u_a, v_a):
    return np.tanh(w_a @ s_prev + (u_a @ h).T) @ v_a


# --------------------------------------------------------------- learners' masked softmaxes


def msm_torch(scores, mask):
    return own_masked_softmax(torch.tensor(scores, dtype=torch.float32), torch.tensor(mask))


def msm_torch_plain(scores, mask):
    scores, mask = torch.as_tensor(scores), torch.as_tensor(mask)
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
    return torch.nan_to_num(weights, nan=0.0)


def _stable_softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def msm_fill_inf(scores, mask):
    return _stable_softmax(np.where(mask, scores, -np.inf))


def msm_fill_large_negative(scores, mask):
    return _stable_softmax(np.where(mask, scores, -1e9))


def msm_after_softmax(scores, mask):
    return _stable_softmax(scores) * mask


def msm_inverted(scores, mask):
    return _stable_softmax(np.where(mask, -np.inf, scores))


def msm_scores_times_mask(scores, mask):
    return _stable_softmax(scores * mask)


def msm_no_max(scores, mask):
    e = np.where(mask, np.exp(scores), 0.0)
    return e / e.sum(axis=-1, keepdims=True)


def msm_max_over_padding(scores, mask):
    e = np.where(mask, np.exp(scores - scores.max(axis=-1, keepdims=True)), 0.0)
    return e / e.sum(axis=-1, keepdims=True)


def msm_batch_axis(scores, mask):
    filled = np.where(mask, scores, -np.inf)
    e = np.exp(filled - filled.max(axis=0, keepdims=True))
    return np.nan_to_num(e / e.sum(axis=0, keepdims=True))


def msm_ignores_mask(scores, mask):
    return _stable_softmax(scores)


def msm_transposed(scores, mask):
    return own_softmax(scores, mask=mask).T


def msm_raises(scores, mask):
    return own_softmax(scores, mask=mask[:, :2])


# ------------------------------------------------------------------------- helpers


# ----------------------------------------------------------------- references pass


@pytest.mark.parametrize(
    ("check", "fn"),
    [
        (check_gru_cell, gru_numpy),
        (check_gru_cell, gru_torch),
        (check_padding_mask, lambda lengths, max_len: own_padding_mask(lengths, max_len)),
        (check_padding_mask, pad_torch),
        (check_padding_mask, lambda lengths, max_len: own_padding_mask(lengths, max_len).tolist()),
        (check_additive_score, lambda *args: own_additive_attention_step(*args).scores),
        (check_additive_score, score_torch),
        (check_masked_softmax, lambda scores, mask: own_softmax(scores, mask=mask)),
        (check_masked_softmax, msm_torch),
        (check_masked_softmax, msm_torch_plain),
    ],
)
def test_correct_functions_pass(check, fn):
    result = check(fn)
    assert result.passed and bool(result), str(result)
    assert result.cases_passed == result.cases_total >= 4
    assert result.hint == ""
    assert str(result) == f"✔ {check.__name__}: all {result.cases_total} hidden cases pass"


# -------------------------------------------------------------------------- GRU cell


def test_gru_reference_is_torch_and_matches_the_written_equations():
    for case in gru_cell_cases():
        with np.errstate(over="ignore"):  # exp(-a) overflows to inf in the saturated case, harmlessly
            written = gru_numpy(*case.args.values())
        np.testing.assert_allclose(case.expected, written, atol=1e-12)
        assert case.expected.dtype == np.float64


@pytest.mark.parametrize(
    ("fn", "case_number", "hint"),
    [
        (gru_z_swapped, 1, "z and 1 - z are swapped"),
        (gru_reset_bias_outside, 1, "you added b_hn after scaling"),
        (gru_reset_no_bias, 1, "b_hn is missing"),
        (gru_reset_before_product, 1, "before the matrix product, as Cho et al. (2014)"),
        (gru_order_zrn, 1, "[r; z; n]"),
        (gru_activations_swapped, 1, "sigmoid and tanh are mixed up"),
        (gru_no_biases, 1, "biases are missing"),
        (gru_returns_candidate, 1, "returned the candidate n"),
        (gru_unstable_sigmoid, 4, "infinity over infinity"),
        (gru_transposed, 1, "transposed"),
        (gru_stacked, 1, "3 * hidden_dim columns"),
    ],
)
def test_gru_bugs_get_targeted_hints(fn, case_number, hint):
    assert_failed(check_gru_cell(fn), case_number, hint)


def test_gru_z_swap_message():
    result = check_gru_cell(gru_z_swapped)
    assert "inputs: x (2, 3) float64, h (2, 4) float64, w_ih (12, 3) float64" in result.message
    assert "at index [0, 0]: expected" in result.message
    assert "Cho et al. (2014) eq. (7)" in result.hint


def test_gru_saturated_case_overflows_a_naive_sigmoid():
    case = gru_cell_cases()[3]
    a = case.args
    hid = a["h"].shape[1]
    gates = (a["x"] @ a["w_ih"].T + a["b_ih"] + a["h"] @ a["w_hh"].T + a["b_hh"])[:, : 2 * hid]
    assert gates.max() > 710
    result = check_gru_cell(gru_unstable_sigmoid)
    assert "NaN" in result.message


def test_gru_transposed_result_names_both_shapes():
    result = check_gru_cell(gru_transposed)
    assert "your function returned shape (4, 2); expected shape (2, 4)" in result.message


def test_gru_raising_function_gives_one_line():
    result = check_gru_cell(gru_weights_on_the_left)
    assert_failed(result, 1, "cut each into three equal parts")
    assert result.hint == GRU_LAYOUT_HINT
    assert_raised(result, "ValueError", "gru_weights_on_the_left: `gates = w_ih @ x + b_ih`")


def test_gru_check_leaves_torch_seed_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_gru_cell(gru_numpy)
    assert torch.equal(torch.rand(3), expected)


def test_gru_wrong_signature():
    result = check_gru_cell(lambda x, h: h)
    assert_failed(result, 1, "signature", "fn(x, h, w_ih, w_hh, b_ih, b_hh)")


# ---------------------------------------------------------------------- padding mask


@pytest.mark.parametrize(
    ("fn", "case_number", "hint"),
    [
        (pad_inverted, 1, "True and False are swapped"),
        (pad_off_by_one, 1, "position L itself is already padding"),
        (pad_ints, 1, "masks must be boolean"),
        (pad_ignores_max_len, 2, "Use the max_len argument"),
        (pad_squeezed, 4, "squeezing axes away"),
        (pad_transposed, 1, "transposed"),
        (lambda lengths, max_len: pad_positions(lengths, max_len)[0] < pad_positions(lengths, max_len)[1] - 1,
         1, "One real token is missing"),
        (lambda lengths, max_len: np.arange(max_len)[None, :] >= max_len - np.asarray(lengths)[:, None],
         1, "padded at the end"),
    ],
)
def test_padding_mask_bugs_get_targeted_hints(fn, case_number, hint):
    assert_failed(check_padding_mask(fn), case_number, hint)


def test_padding_mask_dtype_message():
    result = check_padding_mask(pad_ints)
    assert "right values but dtype int64; expected dtype bool" in result.message
    assert "dtype is int64" in result.hint


def test_padding_mask_wrong_shape_is_reported():
    result = check_padding_mask(pad_ignores_max_len)
    assert "your function returned shape (2, 3); expected shape (2, 5)" in result.message
    assert "inputs: lengths (2,) int64, max_len=5" in result.message


def test_padding_mask_inverted_shows_first_wrong_entry():
    result = check_padding_mask(pad_inverted)
    assert "at index [0, 0]: expected True, got False" in result.message


# ------------------------------------------------------------------- additive score


def test_additive_cases_have_distinct_dims_after_the_square_one():
    first, *others = additive_score_cases()
    assert first.args["w_a"].shape == first.args["u_a"].shape == (3, 3)
    for case in others:
        query_dim, key_dim, attn_dim = case.args["s_prev"].size, case.args["h"].shape[1], case.args["v_a"].size
        assert len({query_dim, key_dim, attn_dim}) == 3


@pytest.mark.parametrize(
    ("fn", "case_number", "hint"),
    [
        (score_no_tanh, 1, "tanh is missing"),
        (score_swapped, 1, "W_a and U_a are swapped"),
        (score_transposed, 1, "used transposed"),
        (score_weights, 1, "sums to 1"),
        (score_hidden, 1, "reduce each to one score with v_a"),
        (score_column, 1, "1-D array"),
        (lambda *args: np.tanh((args[2] @ args[0] + args[1] @ args[3].T) @ args[4]), 1, "tanh goes inside"),
    ],
)
def test_additive_score_bugs_get_targeted_hints(fn, case_number, hint):
    assert_failed(check_additive_score(fn), case_number, hint)


def test_additive_weights_detected_by_their_sum_even_with_own_softmax():
    def weights_without_max(s_prev, h, w_a, u_a, v_a):
        e = np.exp(np.tanh(w_a @ s_prev + h @ u_a.T) @ v_a)
        return (e / e.sum()).astype(np.float32)

    assert_failed(check_additive_score(weights_without_max), 1, "attention weights alpha_j")


def test_additive_shape_error_is_readable():
    result = check_additive_score(score_h_not_transposed)
    assert_failed(result, 1, "U_a on every annotation at once", "(attn_dim, key_dim)")
    lines = result.message.splitlines()
    assert len(lines) == 3
    assert "inputs: s_prev (3,) float64, h (4, 3) float64, w_a (3, 3) float64" in lines[1]
    assert "raised ValueError" in lines[-1]
    assert "in score_h_not_transposed: `return np.tanh(w_a @ s_prev + (u_a @ h).T) @ v_a`" in lines[-1]


def test_additive_swap_raises_on_non_square_shapes():
    result = run_from(additive_score_cases()[1:], score_swapped)
    assert not result
    assert "raised ValueError" in result.message
    assert "w_a (attn_dim, query_dim)" in result.hint


def test_additive_hidden_vectors_report_both_shapes():
    result = check_additive_score(score_hidden)
    assert "your function returned shape (4, 3); expected shape (4,)" in result.message


def run_from(cases, fn):
    from attncourse.checks import run_cases

    return run_cases("check_additive_score", fn, cases)


# ------------------------------------------------------------------- masked softmax


@pytest.mark.parametrize(
    ("fn", "case_number", "hint"),
    [
        (msm_after_softmax, 1, "without renormalising"),
        (msm_inverted, 1, "wrong way round"),
        (msm_scores_times_mask, 1, "score of 0, not a weight of 0"),
        (msm_ignores_mask, 1, "mask is ignored"),
        (msm_batch_axis, 1, "batch axis"),
        (msm_no_max, 4, "overflows to inf"),
        (msm_max_over_padding, 5, "padding included"),
        (msm_fill_inf, 6, "0 / 0 = NaN"),
        (msm_fill_large_negative, 6, "uniform weights"),
        (msm_transposed, 1, "transposed"),
    ],
)
def test_masked_softmax_bugs_get_targeted_hints(fn, case_number, hint):
    assert_failed(check_masked_softmax(fn), case_number, hint)


def test_masked_softmax_cases_cover_the_edge_cases():
    cases = masked_softmax_cases()
    masks = [c.args["mask"] for c in cases]
    assert any((m.sum(axis=-1) == 1).any() for m in masks)  # a single real token
    assert (~masks[-1].any(axis=-1)).any()  # a fully padded row, tested last
    np.testing.assert_array_equal(cases[-1].expected[~masks[-1].any(axis=-1)], 0.0)
    high = cases[4]
    assert high.args["scores"][~high.args["mask"]].min() > high.args["scores"][high.args["mask"]].max() + 700
    for case in cases:
        assert case.args["mask"].dtype == bool
        if case.args["mask"].shape[0] > 1:
            assert case.args["mask"].shape[0] != case.args["mask"].shape[1]


def test_masked_softmax_nan_row_is_reported_as_nan():
    result = check_masked_softmax(msm_fill_inf)
    assert "expected 0, got NaN" in result.message
    assert "fully padded row" in result.message
    assert "scores (3, 4) float64, mask (3, 4) bool" in result.message


def test_masked_softmax_raising_function_gives_one_line():
    result = check_masked_softmax(msm_raises)
    assert_failed(result, 1)
    assert "mask of shape (2, 2) does not broadcast" in assert_raised(result, "ValueError", "msm_raises")


def test_masked_softmax_wrong_shape_is_reported():
    result = check_masked_softmax(msm_transposed)
    assert "your function returned shape (4, 2); expected shape (2, 4)" in result.message


def test_checks_emit_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not check_masked_softmax(msm_no_max)
        assert not check_masked_softmax(msm_fill_inf)
        assert not check_gru_cell(gru_unstable_sigmoid)
        assert check_gru_cell(gru_numpy)


def test_failing_gru_result_reproduces_with_its_args():
    result = check_gru_cell(gru_z_swapped)
    expected = gru_cell_cases()[0].expected
    assert not np.allclose(gru_z_swapped(*result.args), expected)
    np.testing.assert_allclose(gru_numpy(*result.args), expected, atol=1e-12)


def test_drawn_lengths_stay_in_their_ranges_and_follow_the_seed():
    assert draw_lengths(None) == []
    for seed in range(50):
        for lengths, n in draw_lengths(seed, max_len=(2, 8), shortest=1, batch=(1, 4)):
            assert 2 <= n <= 8 and 1 <= len(lengths) <= 4 and all(1 <= v <= n for v in lengths)
        for lengths, n in draw_lengths(seed):
            assert 1 <= n <= 11 and 1 <= len(lengths) <= 5 and all(0 <= v <= n for v in lengths)
    assert draw_lengths(3) == draw_lengths(3) != draw_lengths(4)
