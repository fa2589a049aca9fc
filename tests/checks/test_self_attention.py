"""Tests of attncourse.checks: the case runner and the self-attention checks.

Each typical learner bug is written out as a small function, and the check must
fail on it with the hint that names that bug.
"""

from __future__ import annotations

import html
import warnings

import numpy as np
import pytest
import torch

from attncourse.checks import (
    Case,
    check_causal_mask,
    check_scaled_dot_product,
    check_softmax,
    run_cases,
    to_numpy,
)
from attncourse.checks.self_attention import softmax_cases
from attncourse.functional import (
    attention,
    causal_mask,
    scaled_dot_product_attention,
    softmax,
)
from tests.check_helpers import (
    assert_failed,
    lenient_hand_offs,  # noqa: F401  (a fixture)
    own_copy,
)

# Right and buggy answers built on library functions: the hand-off rules are tested in
# tests/checks/test_hand_offs.py.
pytestmark = pytest.mark.usefixtures("lenient_hand_offs")

# The learners' functions below that build on the package's maths use copies of it: the
# checks refuse the package's own functions (tests/checks/test_references.py).
own_attention, own_causal_mask = own_copy(attention), own_copy(causal_mask)
own_sdpa = own_copy(scaled_dot_product_attention)

# ----------------------------------------------------------------- learners' softmaxes


def softmax_no_max(x, axis=-1):
    e = np.exp(x)
    return e / e.sum(axis=axis, keepdims=True)


def softmax_global_max(x, axis=-1):
    e = np.exp(x - x.max())
    return e / e.sum(axis=axis, keepdims=True)


def softmax_whole_sum(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum()


def softmax_fixed_axis(x, axis=-1):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def softmax_no_keepdims(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis)


def softmax_torch(x, axis=-1):
    return torch.softmax(torch.as_tensor(x, dtype=torch.float32), dim=axis)


def softmax_in_place(x, axis=-1):
    x -= x.max(axis=axis, keepdims=True)
    np.exp(x, out=x)
    x /= x.sum(axis=axis, keepdims=True)
    return x


# ------------------------------------------------------------- learners' attentions


def attention_torch(q, k, v, mask=None):
    q, k, v = (torch.tensor(a, dtype=torch.float32) for a in (q, k, v))
    return own_attention(q, k, v, None if mask is None else torch.tensor(mask))


def attention_no_scale(q, k, v, mask=None):
    weights = softmax(q @ k.T, mask=mask)
    return weights @ v, weights


def attention_by_d_k(q, k, v, mask=None):
    weights = softmax(q @ k.T / k.shape[-1], mask=mask)
    return weights @ v, weights


def attention_query_axis(q, k, v, mask=None):
    weights = softmax(q @ k.T / np.sqrt(k.shape[-1]), axis=0, mask=mask)
    return weights @ v, weights


def attention_inverted_mask(q, k, v, mask=None):
    weights = softmax(q @ k.T / np.sqrt(k.shape[-1]), mask=None if mask is None else ~mask)
    return weights @ v, weights


def attention_mask_by_product(q, k, v, mask=None):
    scores = q @ k.T / np.sqrt(k.shape[-1])
    if mask is not None:
        scores = scores * mask
    weights = softmax(scores)
    return weights @ v, weights


def attention_fill_large_negative(q, k, v, mask=None):
    scores = q @ k.T / np.sqrt(k.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -1e9)
    weights = softmax(scores)
    return weights @ v, weights


def attention_fill_inf(q, k, v, mask=None):
    scores = q @ k.T / np.sqrt(k.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    e = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = e / e.sum(axis=-1, keepdims=True)
    return weights @ v, weights


def attention_mask_after(q, k, v, mask=None):
    weights = softmax(q @ k.T / np.sqrt(k.shape[-1]))
    if mask is not None:
        weights = weights * mask
    return weights @ v, weights


def attention_transposed_output(q, k, v, mask=None):
    output, weights = own_sdpa(q, k, v, mask)
    return output.T, weights


def attention_swapped(q, k, v, mask=None):
    output, weights = own_sdpa(q, k, v, mask)
    return weights, output


def attention_output_only(q, k, v, mask=None):
    return own_sdpa(q, k, v, mask)[0]


def attention_forgot_return(q, k, v, mask=None):
    own_sdpa(q, k, v, mask)


def attention_no_mask_argument(q, k, v):
    return own_sdpa(q, k, v)


def attention_bad_matmul(q, k, v, mask=None):
    scores = q @ k / np.sqrt(k.shape[-1])
    return scores @ v, scores


# ---------------------------------------------------------------- learners' masks


def mask_upper(seq_len):
    return np.triu(np.ones((seq_len, seq_len), dtype=bool))


def mask_no_diagonal(seq_len):
    return np.tril(np.ones((seq_len, seq_len), dtype=bool), k=-1)


def mask_inverted(seq_len):
    return np.triu(np.ones((seq_len, seq_len), dtype=bool), k=1)


def mask_ints(seq_len):
    return np.tril(np.ones((seq_len, seq_len), dtype=int))


def mask_squeezed(seq_len):
    return np.tril(np.ones((seq_len, seq_len), dtype=bool)).squeeze()


def mask_torch(seq_len):
    return torch.tril(torch.ones(seq_len, seq_len)).bool()


# ------------------------------------------------------------------------- helpers


# ----------------------------------------------------------------- reference passes


@pytest.mark.parametrize(
    ("check", "fn"),
    [
        (check_softmax, softmax_torch),
        (check_softmax, softmax_in_place),
        (check_scaled_dot_product, attention_torch),
        (check_causal_mask, lambda n: own_causal_mask(n)),
        (check_causal_mask, mask_torch),
        (check_causal_mask, lambda n: own_causal_mask(n).tolist()),
    ],
)
def test_correct_functions_pass(check, fn):
    result = check(fn)
    assert result.passed and bool(result)
    assert result.cases_passed == result.cases_total >= 3
    assert result.hint == ""
    assert result.message == f"all {result.cases_total} hidden cases pass"
    assert str(result).startswith(f"✔ {check.__name__}: all ")


# -------------------------------------------------------------------------- softmax


def test_softmax_without_max_subtraction_fails_on_large_logits():
    result = check_softmax(softmax_no_max)
    assert_failed(result, 3, "same constant is subtracted", "largest exponential into 1")
    assert "large logits" in result.message
    assert "inputs: x (3,) float64, axis=-1" in result.message
    assert "got NaN" in result.message
    assert "expected 0.09003" in result.message


def test_softmax_global_max_fails_on_shifted_rows():
    result = check_softmax(softmax_global_max)
    assert_failed(result, 4, "its own maximum")
    assert "shifted" in result.message


def test_softmax_whole_array_sum_fails_on_matrix():
    assert_failed(check_softmax(softmax_whole_sum), 2, "over the whole array")


def test_softmax_ignoring_axis_fails_on_axis_0():
    result = check_softmax(softmax_fixed_axis)
    assert_failed(result, 6, "wrong axis", "`axis` argument")
    assert "axis=0" in result.message


def test_softmax_without_keepdims_reports_the_learners_line():
    result = check_softmax(softmax_no_keepdims)
    assert_failed(result, 2, "length 1")
    error_line = result.message.splitlines()[-1]
    assert "raised ValueError: operands could not be broadcast" in error_line
    assert "in softmax_no_keepdims: `return e / e.sum(axis=axis)`" in error_line
    assert "Traceback" not in result.message
    assert len(result.message.splitlines()) == 3


def test_softmax_check_emits_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not check_softmax(softmax_no_max)


def test_softmax_cases_are_not_mutated_by_an_in_place_learner():
    cases = softmax_cases()
    before = [c.args["x"].copy() for c in cases]
    assert run_cases("check_softmax", softmax_in_place, cases)
    for case, x in zip(cases, before):
        np.testing.assert_array_equal(case.args["x"], x)


# --------------------------------------------------------------- scaled dot product


@pytest.mark.parametrize(
    ("fn", "case_number", "hint"),
    [
        (attention_no_scale, 1, "divide them by the square root of d_k"),
        (attention_by_d_k, 1, "divided the scores by d_k"),
        (attention_query_axis, 1, "query axis"),
        (attention_inverted_mask, 4, "wrong way round"),
        (attention_mask_by_product, 4, "Masked positions (mask False) got nonzero weight, up to"),
        (attention_fill_large_negative, 5, "uniform weights"),
        (attention_fill_inf, 5, "0 / 0 = NaN"),
        (attention_mask_after, 4, "before the softmax, not to the weights after"),
        (attention_transposed_output, 1, "output is transposed"),
        (attention_swapped, 1, "swapped"),
        (attention_output_only, 1, "the output, then the weights"),
    ],
)
def test_scaled_dot_product_bugs_get_targeted_hints(fn, case_number, hint):
    assert_failed(check_scaled_dot_product(fn), case_number, hint)


def test_scaled_dot_product_missing_sqrt_message():
    result = check_scaled_dot_product(attention_no_scale)
    assert "inputs: q (2, 4) float64, k (2, 4) float64, v (2, 3) float64" in result.message
    assert "in `output` at index [0, 0]: expected 0.8808, got 0.982" in result.message
    text = str(result)
    assert text.startswith("✘ check_scaled_dot_product: case 1 of 5 (tiny hand-computable case")
    assert text.splitlines()[-1].startswith("  hint: The scores are not scaled")


def test_fully_masked_row_nan_is_reported_as_nan():
    result = check_scaled_dot_product(attention_fill_inf)
    assert "expected 0, got NaN" in result.message
    assert "mask (3, 4) bool" in result.message
    assert "masked row" in result.message


def test_wrong_shape_names_both_shapes():
    result = check_scaled_dot_product(attention_transposed_output)
    assert "`output` has shape (3, 2); expected shape (2, 3)" in result.message


def test_function_returning_none_says_so():
    result = check_scaled_dot_product(attention_forgot_return)
    assert_failed(result, 1)
    assert "returned None" in result.message
    assert "forget `return`" in result.message


def test_missing_mask_parameter_points_at_the_signature():
    result = check_scaled_dot_product(attention_no_mask_argument)
    assert_failed(result, 4, "signature", "fn(q, k, v, mask)")
    assert "raised TypeError" in result.message


def test_exception_inside_numpy_points_at_learners_line():
    result = check_scaled_dot_product(attention_bad_matmul)
    assert_failed(result, 1)
    last = result.message.splitlines()[-1]
    assert "raised ValueError" in last
    assert "in attention_bad_matmul: `scores = q @ k / np.sqrt(k.shape[-1])`" in last


# ------------------------------------------------------------------------- causal mask


@pytest.mark.parametrize(
    ("fn", "case_number", "hint"),
    [
        (mask_upper, 1, "np.tril"),
        (mask_no_diagonal, 1, "diagonal is missing"),
        (mask_inverted, 1, "True and False are swapped"),
        (mask_ints, 1, "masks must be boolean"),
        (mask_squeezed, 2, "With a single position"),
        (lambda n: np.ones((n, n), dtype=bool), 1, "above the diagonal must be False"),
    ],
)
def test_causal_mask_bugs_get_targeted_hints(fn, case_number, hint):
    assert_failed(check_causal_mask(fn), case_number, hint)


def test_int_mask_message_names_the_dtype():
    result = check_causal_mask(mask_ints)
    assert "right values but dtype int64; expected dtype bool" in result.message
    assert "dtype is int64" in result.hint


def test_upper_triangle_message_shows_first_wrong_entry():
    result = check_causal_mask(mask_upper)
    assert "at index [0, 1]: expected False, got True" in result.message


def test_passing_a_result_instead_of_a_function():
    result = check_causal_mask(causal_mask(3))
    assert not result
    assert "expected your function itself" in result.message
    assert "check_causal_mask(my_function)" in result.hint


# ------------------------------------------------------------------- the case runner


def _case(expected, **kw):
    return Case("doubling", args={"x": np.array([1.0, 2.0, 3.0])}, expected=np.asarray(expected), **kw)


def test_runner_accepts_lists_and_tensors():
    assert run_cases("c", lambda x: [2.0, 4.0, 6.0], [_case([2.0, 4.0, 6.0])])
    tensor = torch.tensor([2.0, 4.0, 6.0], requires_grad=True)
    assert run_cases("c", lambda x: tensor * 1, [_case([2.0, 4.0, 6.0])])
    assert to_numpy(tensor).dtype == np.float32


def test_runner_uses_per_case_tolerance():
    off = lambda x: 2 * x + 1e-3  # noqa: E731
    assert not run_cases("c", off, [_case([2.0, 4.0, 6.0])])
    assert run_cases("c", off, [_case([2.0, 4.0, 6.0], atol=1e-2)])


def test_runner_reports_first_differing_index_and_stops():
    calls = []

    def fn(x):
        calls.append(1)
        return np.array([2.0, 4.0, 7.0])

    cases = [_case([2.0, 4.0, 6.0], hint="double it"), _case([2.0, 4.0, 6.0])]
    result = run_cases("check_double", fn, cases)
    assert len(calls) == 1
    assert (result.cases_passed, result.cases_total) == (0, 2)
    assert "at index [2]: expected 6, got 7" in result.message
    assert result.hint == "double it"
    assert result.args[0].tolist() == [1.0, 2.0, 3.0]


def test_runner_reports_wrong_type():
    result = run_cases("c", lambda x: "six", [_case([2.0, 4.0, 6.0])])
    assert "returned a str" in result.message
    assert "expected an array of numbers of shape (3,)" in result.message


def test_runner_survives_a_broken_diagnosis():
    def broken(got, case):
        raise RuntimeError("diagnosis bug")

    result = run_cases("c", lambda x: x, [_case([2.0, 4.0, 6.0], hint="fallback", diagnose=broken)])
    assert result.hint == "fallback"


def test_runner_does_not_raise_for_any_exception_type():
    def fn(x):
        raise KeyError("missing")

    result = run_cases("c", fn, [_case([2.0, 4.0, 6.0])])
    assert "your function raised KeyError: 'missing' (line" in result.message
    assert "raise KeyError(\"missing\")" in result.message


# --------------------------------------------------------------------------- display


def test_text_and_html_reports():
    passed = check_causal_mask(mask_torch)
    failed = check_softmax(softmax_no_max)
    assert repr(passed) == "✔ check_causal_mask: all 3 hidden cases pass"
    assert repr(failed).startswith("✘ check_softmax: case 3 of 7 (large logits")
    assert "\n  hint: " in repr(failed)
    for result, colour in ((passed, "#2e7d32"), (failed, "#c62828")):
        page = result._repr_html_()
        assert isinstance(page, str) and page.startswith("<div")
        assert html.escape(result.message) in page
        assert html.escape(result.hint) in page
        assert colour in page


def _attention_nan_replaced(q, k, v, mask=None):
    scores = q @ k.T / np.sqrt(k.shape[-1])
    if mask is not None:
        scores = np.where(mask, scores, -np.inf)
    exp = np.exp(scores - scores.max(axis=-1, keepdims=True))
    weights = np.nan_to_num(exp / exp.sum(axis=-1, keepdims=True))   # 0/0 -> 0
    return weights @ v, weights


def _attention_zero_rows(q, k, v, mask=None):
    scores = q @ k.T / np.sqrt(k.shape[-1])
    if mask is None:
        mask = np.ones(scores.shape, dtype=bool)
    exp = np.where(mask, np.exp(scores - scores.max(axis=-1, keepdims=True)), 0.0)
    total = exp.sum(axis=-1, keepdims=True)
    weights = exp / np.where(total > 0, total, 1.0)
    return weights @ v, weights


def test_attention_that_replaces_nan_passes_with_a_note_and_a_clean_one_without():
    from attncourse.checks.self_attention import SDP_NAN_REPLACED_NOTE

    noted = check_scaled_dot_product(_attention_nan_replaced)
    clean = check_scaled_dot_product(_attention_zero_rows)
    assert noted.passed and SDP_NAN_REPLACED_NOTE in noted.message
    assert clean.passed and SDP_NAN_REPLACED_NOTE not in clean.message


def test_the_notes_claim_nan_reaches_q_through_an_additive_mask_not_through_masked_fill():
    q, k = torch.randn(2, 3, requires_grad=True), torch.randn(2, 3)
    allowed = torch.tensor([[True, False], [False, False]])   # row 1 fully masked
    bias = torch.zeros(2, 2).masked_fill(~allowed, float("-inf"))
    torch.softmax(q @ k.T + bias, -1).nan_to_num().sum().backward()
    assert q.grad[1].isnan().all() and not q.grad[0].isnan().any()
    q.grad = None
    torch.softmax((q @ k.T).masked_fill(~allowed, float("-inf")), -1).nan_to_num().sum().backward()
    assert not q.grad.isnan().any()
