"""Tests of attncourse.chapters.ch04b_self_attention_in_cnns.checks: self-attention over the pixels of a feature map and
the receptive field of a stack of convolutions.

Each typical learner bug is written out as a small function, and the check must
fail on it with the hint that names that bug, on every hidden case that can
tell the bug from the right answer.
"""

from __future__ import annotations

import doctest
import math
import warnings

import numpy as np
import pytest
import torch

from attncourse.chapters.ch04b_self_attention_in_cnns import checks as conv_attention
from attncourse.chapters.ch04b_self_attention_in_cnns.checks import (
    PA_RULE,
    RF_RULE,
    check_pixel_attention,
    check_receptive_field,
    pixel_attention_cases,
    receptive_field_cases,
)
from attncourse.checks import run_cases
from attncourse.functional import attention
from attncourse.nn import PlainCNN, SelfAttention2d
from tests.check_helpers import (
    assert_failed,
    assert_raised,
    lenient_hand_offs,  # noqa: F401  (a fixture)
)

# Right and buggy answers built on library functions: the hand-off rules are tested in
# tests/checks/test_hand_offs.py.
pytestmark = pytest.mark.usefixtures("lenient_hand_offs")

# ------------------------------------------------------------------ learners' pixel attention


def _softmax_rows(scores):
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def pa_numpy(x, w_q, w_k, w_v):
    C, H, W = x.shape
    X = x.reshape(C, H * W).T
    q, k, v = X @ w_q.T, X @ w_k.T, X @ w_v.T
    weights = _softmax_rows(q @ k.T / np.sqrt(k.shape[1]))
    return (weights @ v).T.reshape(-1, H, W), weights


def pa_channels_first(x, w_q, w_k, w_v):
    # Keeps the channels first throughout, as the 1x1 convolutions do.
    C, H, W = x.shape
    q, k, v = (np.einsum("oc,chw->ohw", w, x).reshape(w.shape[0], -1) for w in (w_q, w_k, w_v))
    weights = _softmax_rows(q.T @ k / math.sqrt(w_q.shape[0]))
    return (v @ weights.T).reshape(-1, H, W), weights


def pa_loop(x, w_q, w_k, w_v):
    C, H, W = x.shape
    pixels = [x[:, r, c] for r in range(H) for c in range(W)]
    weights = np.array([_softmax_rows(np.array([(w_q @ p) @ (w_k @ o) / math.sqrt(len(w_q)) for o in pixels]))
                        for p in pixels])
    output = np.zeros((len(w_v), H, W))
    for i in range(H * W):
        output[:, i // W, i % W] = sum(weights[i, j] * (w_v @ pixels[j]) for j in range(H * W))
    return output, weights


def pa_torch(x, w_q, w_k, w_v):
    x, w_q, w_k, w_v = (torch.tensor(a, dtype=torch.float32) for a in (x, w_q, w_k, w_v))
    X = x.flatten(-2).T
    q, k, v = X @ w_q.T, X @ w_k.T, X @ w_v.T
    weights = torch.softmax(q @ k.T / k.shape[1] ** 0.5, dim=-1)
    return (weights @ v).T.reshape(-1, *x.shape[1:]), weights


def pa_library(x, w_q, w_k, w_v):
    x, w_q, w_k, w_v = (torch.tensor(a) for a in (x, w_q, w_k, w_v))
    X = x.flatten(-2).T
    read, weights = attention(X @ w_q.T, X @ w_k.T, X @ w_v.T)
    return read.T.reshape(-1, *x.shape[1:]), weights


def pa_column_major(x, w_q, w_k, w_v):
    C, H, W = x.shape
    X = x.T.reshape(-1, C)  # positions counted column by column
    q, k, v = X @ w_q.T, X @ w_k.T, X @ w_v.T
    weights = _softmax_rows(q @ k.T / np.sqrt(k.shape[1]))
    return (weights @ v).reshape(W, H, -1).T, weights


def pa_column_major_out(x, w_q, w_k, w_v):
    C, H, W = x.shape
    X = x.reshape(C, H * W, order="F").T
    q, k, v = X @ w_q.T, X @ w_k.T, X @ w_v.T
    weights = _softmax_rows(q @ k.T / np.sqrt(k.shape[1]))
    return (weights @ v).T.reshape(-1, H, W), weights


def _with_weights(make_weights):
    """A learner who gets everything right except the weights, made by ``make_weights(q, k, d_k)``."""

    def fn(x, w_q, w_k, w_v):
        C, H, W = x.shape
        X = x.reshape(C, H * W).T
        q, k, v = X @ w_q.T, X @ w_k.T, X @ w_v.T
        weights = make_weights(q, k, k.shape[1])
        return (weights @ v).T.reshape(-1, H, W), weights

    return fn


pa_no_scale = _with_weights(lambda q, k, d_k: _softmax_rows(q @ k.T))
pa_dk = _with_weights(lambda q, k, d_k: _softmax_rows(q @ k.T / d_k))
pa_query_axis = _with_weights(lambda q, k, d_k: _softmax_rows((q @ k.T / np.sqrt(d_k)).T).T)
pa_scores_t = _with_weights(lambda q, k, d_k: _softmax_rows(k @ q.T / np.sqrt(d_k)))


def pa_weights_t(x, w_q, w_k, w_v):
    output, weights = pa_numpy(x, w_q, w_k, w_v)
    return output, weights.T


def pa_projection_t(x, w_q, w_k, w_v):
    C, H, W = x.shape
    X = x.reshape(C, H * W).T
    q, k, v = X @ w_q, X @ w_k, X @ w_v
    weights = _softmax_rows(q @ k.T / np.sqrt(k.shape[1]))
    return (weights @ v).T.reshape(-1, H, W), weights


def pa_no_projection(x, w_q, w_k, w_v):
    C, H, W = x.shape
    X = x.reshape(C, H * W).T
    weights = _softmax_rows(X @ X.T / np.sqrt(w_q.shape[0]))
    return (weights @ (X @ w_v.T)).T.reshape(-1, H, W), weights


def pa_x_values(x, w_q, w_k, w_v):
    C, H, W = x.shape
    _, weights = pa_numpy(x, w_q, w_k, w_v)
    return (weights @ x.reshape(C, H * W).T).T.reshape(C, H, W), weights


def pa_flat_output(x, w_q, w_k, w_v):
    C, H, W = x.shape
    _, weights = pa_numpy(x, w_q, w_k, w_v)
    return weights @ (x.reshape(C, H * W).T @ w_v.T), weights


def pa_reshape_no_transpose(x, w_q, w_k, w_v):
    C, H, W = x.shape
    _, weights = pa_numpy(x, w_q, w_k, w_v)
    return (weights @ (x.reshape(C, H * W).T @ w_v.T)).reshape(-1, H, W), weights


def pa_output_t(x, w_q, w_k, w_v):
    C, H, W = x.shape
    _, weights = pa_numpy(x, w_q, w_k, w_v)
    V = w_v @ x.reshape(C, H * W)
    return (V @ weights).reshape(-1, H, W), weights


def pa_swapped(x, w_q, w_k, w_v):
    output, weights = pa_numpy(x, w_q, w_k, w_v)
    return weights, output


def pa_output_only(x, w_q, w_k, w_v):
    return pa_numpy(x, w_q, w_k, w_v)[0]


def pa_unstable(x, w_q, w_k, w_v):
    C, H, W = x.shape
    X = x.reshape(C, H * W).T
    q, k, v = X @ w_q.T, X @ w_k.T, X @ w_v.T
    e = np.exp(q @ k.T / np.sqrt(k.shape[1]))
    weights = e / e.sum(axis=1, keepdims=True)
    return (weights @ v).T.reshape(-1, H, W), weights


def pa_no_flatten(x, w_q, w_k, w_v):
    q = w_q @ x
    return q, q


# ------------------------------------------------------------------ learners' receptive fields


def rf_loop(layers):
    r, jump = 1, 1
    for k, s in layers:
        r += (k - 1) * jump
        jump *= s
    return r


def rf_closed_form(layers):
    return 1 + sum((k - 1) * math.prod(s for _, s in layers[:l]) for l, (k, _) in enumerate(layers))


def rf_from_the_top(layers):
    # The recurrence of Araujo et al. read from the last layer down: r_{l-1} = s_l r_l + (k_l - s_l).
    r = 1
    for k, s in reversed(layers):
        r = s * r + (k - s)
    return r


def rf_no_jump(layers):
    return 1 + sum(k - 1 for k, _ in layers)


def rf_current_stride(layers):
    r, jump = 1, 1
    for k, s in layers:
        jump *= s
        r += (k - 1) * jump
    return r


def rf_sum_k(layers):
    return sum(k for k, _ in layers)


def rf_start_zero(layers):
    return rf_loop(layers) - 1


def rf_reversed(layers):
    return rf_loop(layers[::-1])


def rf_list(layers):
    return [rf_loop(layers)]


def rf_raises(layers):
    r = 1
    for k, s, padding in layers:
        r += k - 1
    return r


# ------------------------------------------------------------------------- helpers


@pytest.mark.parametrize(
    ("check", "fn"),
    [
        (check_pixel_attention, pa_numpy),
        (check_pixel_attention, pa_channels_first),
        (check_pixel_attention, pa_loop),
        (check_pixel_attention, pa_torch),
        (check_pixel_attention, pa_library),
        (check_receptive_field, rf_loop),
        (check_receptive_field, rf_closed_form),
        (check_receptive_field, rf_from_the_top),
    ],
)
def test_correct_functions_pass(check, fn):
    result = check(fn)
    assert result.passed and bool(result), str(result)
    assert result.cases_passed == result.cases_total >= 6
    assert result.hint == ""
    assert str(result) == f"✔ {check.__name__}: all {result.cases_total} hidden cases pass"


def test_docstring_examples_run():
    outcome = doctest.testmod(conv_attention, raise_on_error=False)
    assert outcome.attempted >= 2 and outcome.failed == 0


# -------------------------------------------------------------------------- pixel attention


def _block_with(case, gamma_init=1.0):
    """A SelfAttention2d whose 1x1 convolutions are the case's matrices, with zero biases."""
    x, w_q, w_k, w_v = (case.args[name] for name in ("x", "w_q", "w_k", "w_v"))
    block = SelfAttention2d(x.shape[0], w_q.shape[0], w_v.shape[0], gamma_init=gamma_init).double()
    with torch.no_grad():
        for conv, matrix in ((block.w_q, w_q), (block.w_k, w_k), (block.w_v, w_v)):
            conv.weight.copy_(torch.from_numpy(matrix)[:, :, None, None])
            conv.bias.zero_()
    return block


@pytest.mark.parametrize("index", range(len(pixel_attention_cases())))
def test_pixel_attention_reference_is_self_attention_2d(index):
    case = pixel_attention_cases()[index]
    block = _block_with(case)
    before_w_o = []
    block.w_o.register_forward_pre_hook(lambda module, inputs: before_w_o.append(inputs[0]))
    x = torch.from_numpy(case.args["x"])[None]
    with torch.no_grad():
        _, weights = block(x, return_weights=True)
    expected_output, expected_weights = case.expected
    np.testing.assert_allclose(weights[0].numpy(), expected_weights, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(before_w_o[0][0].numpy(), expected_output, rtol=1e-9, atol=1e-9)


def test_pixel_attention_cases_cover_the_geometries():
    shapes = [(case.args["x"].shape, case.args["w_q"].shape[0], case.args["w_v"].shape[0])
              for case in pixel_attention_cases()]
    (c, h, w), d_k, d_v = shapes[0]
    assert h != w and d_v != c and d_k != c
    assert any(s[0][1] == 1 and s[0][2] > 1 for s in shapes)  # one row
    single = pixel_attention_cases()[shapes.index(next(s for s in shapes if s[0][1:] == (1, 1)))]
    np.testing.assert_array_equal(single.expected[1], [[1.0]])
    np.testing.assert_allclose(single.expected[0][:, 0, 0], single.args["w_v"] @ single.args["x"][:, 0, 0])
    assert any(s[0][0] == s[1] == s[2] for s in shapes)  # square projections
    large = pixel_attention_cases()[-1]
    X = large.args["x"].reshape(large.args["x"].shape[0], -1).T
    scores = (X @ large.args["w_q"].T) @ (X @ large.args["w_k"].T).T / math.sqrt(large.args["w_q"].shape[0])
    assert np.abs(scores).max() > 710  # exp() overflows float64 above about 709.8
    assert np.median(large.expected[1].max(axis=1)) < 0.9  # yet most rows of weights are spread out
    for case in pixel_attention_cases():
        np.testing.assert_allclose(case.expected[1].sum(axis=1), 1.0)


# Every buggy learner, its hint, the cases (0-based) on which it gives the right answer (the case
# cannot tell it apart) and those on which its shapes do not fit so that it raises.
# Cases: 0 a 2x3 map, 1 a 3x2 map with d_v = C, 2 a square map with square projections, 3 one row,
# 4 one position, 5 larger values, 6 large scores.
PIXEL_BUGS = {
    "column_major": (pa_column_major, "numbered column by column", {3, 4}, set()),
    "column_major_out": (pa_column_major_out, "numbered column by column", {3, 4}, set()),
    "no_scale": (pa_no_scale, "not scaled", {4}, set()),
    "dk": (pa_dk, "divided the scores by d_k", {4}, set()),
    "query_axis": (pa_query_axis, "runs over the queries (axis 0)", {4}, set()),
    "scores_t": (pa_scores_t, "Your scores are transposed", {4}, set()),
    "weights_t": (pa_weights_t, "weights are transposed", {4}, set()),
    "projection_t": (pa_projection_t, "projection is used transposed", set(), {0, 1, 3, 4, 5, 6}),
    "no_projection": (pa_no_projection, "projections are missing", {4}, set()),
    "x_values": (pa_x_values, "averages the pixels themselves", set(), set()),
    "flat_output": (pa_flat_output, "must be on the grid, channels first", set(), set()),
    "reshape_no_transpose": (pa_reshape_no_transpose, "without a transpose", {4}, set()),
    "output_t": (pa_output_t, "sums over the wrong index", {4}, set()),
    "swapped": (pa_swapped, "results are swapped", set(), set()),
    "output_only": (pa_output_only, "Return both arrays", set(), set()),
    "unstable": (pa_unstable, "exp() of a score near 1000 overflows", {0, 1, 2, 3, 4, 5}, set()),
}


@pytest.mark.parametrize("name", PIXEL_BUGS)
def test_every_pixel_case_tells_each_bug_apart(name):
    fn, hint, indistinguishable, raises = PIXEL_BUGS[name]
    for index, case in enumerate(pixel_attention_cases()):
        result = run_cases("check_pixel_attention", fn, [case])
        where = f"{name} on case {index} ({case.description})"
        if index in indistinguishable:
            assert result.passed, where
        elif index in raises:
            assert not result.passed and "your function raised" in result.message, where
        else:
            assert not result.passed, where
            assert hint in result.hint, f"{where}: {result.hint!r}"


@pytest.mark.parametrize(
    ("fn", "case_number", "hint"),
    [
        (pa_column_major, 1, "numbered column by column"),
        (pa_column_major_out, 1, "C-order reshape"),
        (pa_no_scale, 1, "square root of d_k"),
        (pa_dk, 1, "square root"),
        (pa_query_axis, 1, "softmax along the last axis"),
        (pa_scores_t, 1, "Your scores are transposed"),
        (pa_weights_t, 1, "transposed"),
        (pa_no_projection, 1, "projections are missing"),
        (pa_x_values, 1, "the values are W_v applied to each pixel"),
        (pa_flat_output, 1, "(4, 2, 3)"),
        (pa_reshape_no_transpose, 1, "without a transpose"),
        (pa_output_t, 1, "sums over the wrong index"),
        (pa_swapped, 1, "swapped"),
        (pa_output_only, 1, "the output, then the weights"),
        (pa_unstable, 7, "overflows"),
    ],
)
def test_pixel_attention_bugs_get_targeted_hints(fn, case_number, hint):
    assert_failed(check_pixel_attention(fn), case_number, hint)


def test_pixel_attention_transposed_projection_raises_then_is_named():
    result = check_pixel_attention(pa_projection_t)
    assert_failed(result, 1, "acting on each pixel's channels")
    assert "your function raised ValueError" in result.message
    square = next(case for case in pixel_attention_cases() if case.args["w_q"].shape[0] == case.args["x"].shape[0])
    assert "Here w_q, w_k and w_v are square" in run_cases("check_pixel_attention", pa_projection_t, [square]).hint


def test_pixel_attention_wrong_shapes_are_named():
    result = check_pixel_attention(pa_flat_output)
    assert "`output` has shape (6, 4); expected shape (4, 2, 3)" in result.message
    assert "inputs: x (3, 2, 3) float64, w_q (2, 3) float64, w_k (2, 3) float64, w_v (4, 3) float64" in result.message
    result = check_pixel_attention(pa_x_values)
    assert "`output` has shape (3, 2, 3); expected shape (4, 2, 3)" in result.message


def test_pixel_attention_raising_function_gives_one_line():
    result = check_pixel_attention(pa_no_flatten)
    assert_failed(result, 1, "one row per position")
    assert_raised(result, "ValueError", "pa_no_flatten: `q = w_q @ x`")


def test_pixel_attention_weights_of_the_wrong_shape():
    def grid_weights(x, w_q, w_k, w_v):
        output, weights = pa_numpy(x, w_q, w_k, w_v)
        _, H, W = x.shape
        return output, weights.reshape(H, W, H, W)

    result = check_pixel_attention(grid_weights)
    assert_failed(result, 1, "one matrix (6, 6)")
    assert "`weights` has shape (2, 3, 2, 3); expected shape (6, 6)" in result.message


# -------------------------------------------------------------------------- receptive field


def test_receptive_field_cases():
    cases = receptive_field_cases()
    expected = {tuple(case.args["layers"]): int(case.expected) for case in cases}
    assert expected[((3, 1),)] == 3
    assert expected[((3, 1), (2, 2))] == 4
    assert expected[PlainCNN.spatial_layers] == PlainCNN.receptive_field == 18
    assert cases[-1].expected == 196  # VGG-16's conv5_3, the value usually quoted
    assert all(str(case.args["layers"]) in case.description for case in cases)


RF_BUGS = {
    "no_jump": (rf_no_jump, "the strides are ignored"),
    "current_stride": (rf_current_stride, "layer's own stride before adding its kernel"),
    "sum_k": (rf_sum_k, "sum of the kernel sizes"),
    "start_zero": (rf_start_zero, "one pixel short"),
    "reversed": (rf_reversed, "walked the layers from the last one"),
}


@pytest.mark.parametrize("name", RF_BUGS)
def test_every_receptive_field_case_tells_each_bug_apart_or_gives_the_same_number(name):
    fn, hint = RF_BUGS[name]
    caught = 0
    for case in receptive_field_cases():
        result = run_cases("check_receptive_field", fn, [case])
        layers = case.args["layers"]
        if fn(layers) == case.expected:
            # Only short or symmetric stacks hide a bug: a single layer, a stride on the last layer,
            # a stack that reads the same both ways.
            assert result.passed and (len(layers) <= 2 or layers == layers[::-1]), case.description
        else:
            assert not result.passed and hint in result.hint, f"{name}, {case.description}: {result.hint!r}"
            caught += 1
    assert caught >= 3


def test_two_slips_giving_the_same_number_are_both_named():
    case = next(case for case in receptive_field_cases() if case.args["layers"] == [(3, 1), (2, 2)])
    assert rf_current_stride(case.args["layers"]) == rf_sum_k(case.args["layers"]) == 5
    hint = run_cases("check_receptive_field", rf_sum_k, [case]).hint
    assert "sum of the kernel sizes" in hint and "own stride" in hint and " Or: " in hint


@pytest.mark.parametrize(
    ("fn", "case_number", "hint"),
    [
        (rf_no_jump, 2, "the strides are ignored"),
        (rf_current_stride, 2, "own stride"),
        (rf_sum_k, 2, "sum of the kernel sizes"),
        (rf_start_zero, 1, "start from r = 1"),
        (rf_reversed, 3, "from the last one"),
    ],
)
def test_receptive_field_bugs_get_targeted_hints(fn, case_number, hint):
    result = check_receptive_field(fn)
    assert_failed(result, case_number, hint)
    assert " Or: " not in result.hint


def test_receptive_field_wrong_shape_is_named():
    result = check_receptive_field(rf_list)
    assert_failed(result, 1)
    assert "your function returned shape (1,); expected shape ()" in result.message
    assert "inputs: layers (1, 2) int64" in result.message
    assert "[(3, 1)]" in result.message  # the description shows the layers themselves
    assert RF_RULE in result.hint


def test_receptive_field_raising_function_gives_one_line():
    result = check_receptive_field(rf_raises)
    assert_failed(result, 1)
    assert_raised(result, "ValueError", "rf_raises: `for k, s, padding in layers:`")


# -------------------------------------------------------------------------- both


def test_checks_emit_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not check_pixel_attention(pa_unstable)
        assert not check_pixel_attention(pa_no_flatten)
        assert not check_receptive_field(rf_raises)
        assert check_pixel_attention(pa_numpy)
        assert check_receptive_field(rf_loop)
    assert "Number the positions row by row" in PA_RULE


def test_failing_result_reproduces_with_its_args():
    result = check_pixel_attention(pa_no_scale)
    expected_output, expected_weights = pixel_attention_cases()[0].expected
    assert not np.allclose(pa_no_scale(*result.args, **result.kwargs)[1], expected_weights)
    output, weights = pa_numpy(*result.args, **result.kwargs)
    np.testing.assert_allclose(weights, expected_weights, atol=1e-12)
    np.testing.assert_allclose(output, expected_output, atol=1e-12)

    result = check_receptive_field(rf_no_jump)
    assert rf_no_jump(*result.args, **result.kwargs) == 9
    assert rf_loop(*result.args, **result.kwargs) == 18
