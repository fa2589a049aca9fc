"""Checks of chapter 4's exercises: the softmax and scaled dot-product attention.

Each check runs the learner's function on hidden cases and returns a
:class:`~attncourse.checks.core.CheckResult`; a failure is compared with typical buggy
versions (a softmax without the max subtraction, attention without the 1/sqrt(d_k)
scaling, ...) so that the hint names the likely bug. The chapter's causal mask is
checked by :func:`attncourse.checks.masks.check_causal_mask`, which chapter 6 uses too.

References
----------
Vaswani et al. (2017), "Attention Is All You Need", section 3.2.1, equation (1).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from attncourse.checks.core import Case, CheckResult, run_cases, same_values
from attncourse.checks.guard import ATTENTION, SOFTMAX, allowing, unwrap
from attncourse.functional import (
    attention,
    scaled_dot_product_attention,
    softmax,
)

# --------------------------------------------------------------------------- softmax

SOFTMAX_FORMULA_HINT = (
    "Softmax exponentiates every logit, then divides each exponential by the sum of the "
    "exponentials of its slice along `axis`, so that every slice along `axis` sums to 1."
)
SOFTMAX_MAX_HINT = (
    'The exponential of a large logit overflows to infinity, and infinity over infinity is NaN. '
    'Softmax does not change when the same constant is subtracted from every logit along `axis`: '
    'choose, for each slice, the constant that turns its largest exponential into 1.'
)
SOFTMAX_GLOBAL_MAX_HINT = (
    'You subtract a single max of the whole array, so every exponential of a row far below it '
    'underflows to 0, and 0 over 0 is NaN. Each slice along `axis` needs its own maximum.'
)
SOFTMAX_WHOLE_SUM_HINT = (
    'Your result sums to 1 over the whole array instead of along `axis`. Each slice along `axis` '
    'must be divided by its own sum, kept in a shape that broadcasts against the array.'
)
SOFTMAX_AXIS_HINT = (
    "You normalised along the wrong axis. Use the `axis` argument for both the max and the "
    "sum instead of a fixed axis."
)
SOFTMAX_NO_EXP_HINT = (
    "Exponentiate before normalising: dividing the logits by their sum is not softmax. "
    + SOFTMAX_FORMULA_HINT
)
SOFTMAX_KEEPDIMS_HINT = (
    'Your sums broadcast along the wrong axis: a reduction drops the reduced axis unless told to '
    'keep it with length 1, and only then is each slice divided by its own sum.'
)
SOFTMAX_SHAPE_HINT = (
    "softmax returns an array of the same shape as x; only the max and the sum inside it "
    "are reduced (keeping the reduced axis, with length 1)."
)
SOFTMAX_SUM_HINT = "Every slice along `axis` should sum to 1: divide the exponentials by their sum."


def _softmax_variants(x: np.ndarray, axis: int) -> list[tuple[str, np.ndarray]]:
    """Outputs of typical buggy softmaxes on ``x``, each with the hint that names its bug."""
    e_naive = np.exp(x)
    e_global = np.exp(x - x.max())
    e_row = np.exp(x - x.max(axis=axis, keepdims=True))
    variants = [
        (SOFTMAX_MAX_HINT, e_naive / e_naive.sum(axis=axis, keepdims=True)),
        (SOFTMAX_GLOBAL_MAX_HINT, e_global / e_global.sum(axis=axis, keepdims=True)),
        (SOFTMAX_WHOLE_SUM_HINT, e_row / e_row.sum()),
        (SOFTMAX_WHOLE_SUM_HINT, e_naive / e_naive.sum()),
        (SOFTMAX_NO_EXP_HINT, x / x.sum(axis=axis, keepdims=True)),
    ]
    if x.ndim > 1:
        other = 0 if axis % x.ndim == x.ndim - 1 else -1
        variants.append((SOFTMAX_AXIS_HINT, softmax(x, axis=other)))
        try:
            variants.append((SOFTMAX_KEEPDIMS_HINT, e_row / e_row.sum(axis=axis)))
        except ValueError:
            pass  # the shapes do not broadcast, so this bug raises instead
    return variants


def _diagnose_softmax(got: Any, case: Case) -> str | None:
    x = case.args["x"]
    axis = case.args["axis"]
    if not isinstance(got, np.ndarray):
        return None
    if got.shape != x.shape:
        return SOFTMAX_SHAPE_HINT
    expected = np.asarray(case.expected)
    for hint, variant in _softmax_variants(x, axis):
        if not same_values(variant, expected, case) and same_values(got, variant, case):
            return hint
    if not np.isfinite(got.astype(np.float64)).all():
        return SOFTMAX_MAX_HINT
    if not np.allclose(got.astype(np.float64).sum(axis=axis), 1.0, atol=1e-4):
        return SOFTMAX_SUM_HINT
    return None


def _softmax_case(description: str, x: Any, axis: int, hint: str, nudge: str) -> Case:
    x = np.asarray(x, dtype=np.float64)
    return Case(
        description=description,
        args={"x": x, "axis": axis},
        expected=softmax(x, axis=axis),
        hint=hint,
        diagnose=_diagnose_softmax,
        nudge=nudge,
    )


def softmax_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_softmax`, random ones drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    return [
        _softmax_case("a plain row [1, 2, 3]", [1.0, 2.0, 3.0], -1, SOFTMAX_FORMULA_HINT,
                      "Which two steps does the softmax formula take, and what must a row sum to?"),
        _softmax_case(
            "a 2-D matrix, softmax along the last axis", rng.normal(size=(3, 4)), -1,
            "Normalise each row on its own. " + SOFTMAX_KEEPDIMS_HINT,
            "Each row is a softmax of its own: what does each row's sum have to be divided by?",
        ),
        _softmax_case("large logits [1000, 1001, 1002]", [1000.0, 1001.0, 1002.0], -1, SOFTMAX_MAX_HINT,
                      "What does np.exp return for 1000? And does the softmax change when the "
                      "same constant is subtracted from every logit?"),
        _softmax_case(
            "rows shifted by a constant: the second row is the first plus 1000",
            [[1.0, 2.0, 3.0, 4.0], [1001.0, 1002.0, 1003.0, 1004.0]], -1,
            "Both rows must get the same weights, since softmax ignores a constant shift. "
            "Subtract each row's own maximum, kept with its reduced axis of length 1.",
            "Both rows must get the same weights: is what you subtract the same for every row?",
        ),
        _softmax_case(
            "all-equal logits, rows of 0s and of 7s", [[0.0, 0.0, 0.0], [7.0, 7.0, 7.0]], -1,
            "Equal logits get equal weights: every entry should be 1/3 here.",
            "Equal logits get equal weights.",
        ),
        _softmax_case(
            "softmax along axis=0 (columns)", rng.normal(size=(4, 3)), 0,
            "Along axis 0 each column sums to 1. " + SOFTMAX_AXIS_HINT,
            "Along axis 0 each column sums to 1: does your function use its `axis` argument?",
        ),
        _softmax_case(
            "a 3-D batch (2, 3, 4) along the last axis", 3 * rng.normal(size=(2, 3, 4)), -1,
            SOFTMAX_KEEPDIMS_HINT,
            "Look at the shape of the sums you divide by: does each entry meet its own row's sum?",
        ),
    ]


@allowing("NumPy operations: np.exp, np.max and np.sum (or the array methods).", library=SOFTMAX)
def check_softmax(fn: Callable[..., Any]) -> CheckResult:
    """Check a learner's softmax on hidden cases, large logits among them.

    Parameters
    ----------
    fn : callable
        The learner's ``softmax(x, axis=-1)``, called as ``fn(x, axis)``:

        - ``x`` : float ndarray of any shape, e.g. ``(src_len,)`` or ``(tgt_len, src_len)``;
        - ``axis`` : int, the axis to normalise over;
        - returns an array of the same shape as ``x``, non-negative, summing to 1
          along ``axis``; a NumPy array, a torch tensor or a nested list.

    Returns
    -------
    CheckResult
        Truthy when every hidden case passes. Otherwise it names the first failing
        case, its inputs' shapes, the first wrong entry (expected and got) and a
        hint. It is returned, never displayed nor raised.

    Notes
    -----
    The hidden cases are a plain row, a matrix along its last axis, large logits
    (1000, 1001, 1002: a softmax without max subtraction gives NaN), two rows that
    differ by a constant, all-equal logits, a column-wise softmax (``axis=0``) and
    a 3-D batch. The reference is :func:`attncourse.functional.softmax`.

    Examples
    --------
    In a notebook cell, end with the check to see the result box:

    >>> import numpy as np
    >>> def my_softmax(x, axis=-1):
    ...     z = x - x.max(axis=axis, keepdims=True)
    ...     e = np.exp(z)
    ...     return e / e.sum(axis=axis, keepdims=True)
    >>> check_softmax(my_softmax)
    ✔ check_softmax: all 7 hidden cases pass
    """
    return run_cases("check_softmax", fn, softmax_cases(), references=(softmax,))


# ------------------------------------------------------------ scaled dot-product attention

SDP_PAIR_HINT = "Return both arrays, in this order: the output, then the weights."
SDP_ORDER_HINT = "Your two results are swapped: the output comes first, then the weights."
SDP_OUTPUT_T_HINT = (
    "Your output is transposed: it must be (tgt_len, d_v), one row per query. Multiply the "
    "weights, (tgt_len, src_len), by the values, (src_len, d_v), in that order."
)
SDP_WEIGHTS_T_HINT = (
    "Your weights are transposed: they must be (tgt_len, src_len), one row per query, "
    "from scores that pair each query (a row of q, on the left) with each key (a row of k)."
)
SDP_NO_SCALE_HINT = (
    "The scores are not scaled: divide them by the square root of d_k, the width of a key, "
    "before the softmax (equation 1 of Vaswani et al. 2017). Without it, large d_k makes the softmax too peaked."
)
SDP_DK_HINT = (
    "You divided the scores by d_k; equation (1) divides them by its square root."
)
SDP_QUERY_AXIS_HINT = (
    "Your softmax runs over the query axis (axis 0), so columns sum to 1. Each query's "
    "weights over the keys must sum to 1: take the softmax along the key axis, the last one."
)
SDP_INVERTED_HINT = (
    "The mask is used the wrong way round. In this course True means *may attend*: keep the "
    "scores where mask is True and set them to -inf where it is False."
)
SDP_NAN_ROW_HINT = (
    "A query whose mask row is all False has no key to attend to, and filling every one of its "
    "scores with -inf gives 0 / 0 = NaN. Give such rows zero weights (and so a zero output), "
    "for example by zeroing the weights of the rows whose mask holds no True entry."
)
SDP_UNIFORM_ROW_HINT = (
    "A fully masked row (every mask entry False) got uniform weights 1/src_len: filling all its "
    "scores with the same large negative number leaves them equal, and softmax spreads the weight "
    "evenly. A query that may attend to nothing must get zero weights and a zero output."
)
SDP_MASKED_WEIGHT_HINT = (
    "Masked positions (mask False) got nonzero weight, up to {largest}. Set their scores to -inf "
    "(or a number so negative that exp gives exactly 0) before the softmax; multiplying the "
    "scores by the mask gives them a score of 0, not a weight of 0."
)
SDP_MASK_AFTER_HINT = (
    "Each query's weights must sum to 1 over the keys it may attend to: apply the mask to the "
    "scores before the softmax, not to the weights after it."
)
SDP_OUTPUT_HINT = (
    "Your weights are right but the output is not: the output is the weighted sum of the "
    "values: the weights times v."
)


def _diagnose_scaled_dot_product(got: Any, case: Case) -> str | None:
    q, k, v = case.args["q"], case.args["k"], case.args["v"]
    mask = case.args.get("mask")
    exp_out, exp_w = (np.asarray(a) for a in case.expected)
    if not isinstance(got, tuple):
        if isinstance(got, np.ndarray) and got.shape in (exp_out.shape, exp_w.shape):
            return SDP_PAIR_HINT
        return None
    if len(got) != 2:
        return SDP_PAIR_HINT
    out, w = got
    if not (isinstance(out, np.ndarray) and isinstance(w, np.ndarray)):
        return None
    if (same_values(out, exp_w, case) and same_values(w, exp_out, case)) or (
        exp_out.shape != exp_w.shape and out.shape == exp_w.shape and w.shape == exp_out.shape
    ):
        return SDP_ORDER_HINT
    if w.shape == exp_w.T.shape != exp_w.shape or (same_values(w, exp_w.T, case) and not same_values(w, exp_w, case)):
        return SDP_WEIGHTS_T_HINT
    if out.shape == exp_out.T.shape != exp_out.shape or (
        same_values(out, exp_out.T, case) and not same_values(out, exp_out, case)
    ):
        return SDP_OUTPUT_T_HINT

    d_k = k.shape[-1]
    scores = q @ k.T
    variants = [
        (SDP_NO_SCALE_HINT, softmax(scores, mask=mask)),
        (SDP_DK_HINT, softmax(scores / d_k, mask=mask)),
        (SDP_QUERY_AXIS_HINT, softmax(scores / np.sqrt(d_k), axis=0, mask=mask)),
    ]
    if mask is not None:
        variants.append((SDP_INVERTED_HINT, softmax(scores / np.sqrt(d_k), mask=~mask)))
    variants = [(hint, vw) for hint, vw in variants if not same_values(vw, exp_w, case)]
    for hint, variant_w in variants:
        if same_values(w, variant_w, case):
            return hint
    for hint, variant_w in variants:
        if same_values(out, variant_w @ v, case):
            return hint

    if mask is not None and w.shape == exp_w.shape:
        w = w.astype(np.float64)
        fully_masked = ~mask.any(axis=-1)
        if fully_masked.any():
            rows_out = out[fully_masked] if out.shape == exp_out.shape else out
            if np.isnan(w[fully_masked]).any() or np.isnan(rows_out.astype(np.float64)).any():
                return SDP_NAN_ROW_HINT
            if np.allclose(w[fully_masked], 1.0 / mask.shape[-1], atol=case.atol):
                return SDP_UNIFORM_ROW_HINT
        partly = ~fully_masked[:, None] & ~mask
        if partly.any():
            leaked = np.abs(np.where(partly, w, 0.0))
            if np.nanmax(leaked) > case.atol:
                return SDP_MASKED_WEIGHT_HINT.format(largest=f"{np.nanmax(leaked):.3g}")
        sums = w[~fully_masked].sum(axis=-1)
        if not np.allclose(sums, 1.0, atol=1e-4):
            return SDP_MASK_AFTER_HINT
    if same_values(w, exp_w, case) and not same_values(out, exp_out, case):
        return SDP_OUTPUT_HINT
    return None


def _sdp_case(description: str, q: Any, k: Any, v: Any, mask: Any, hint: str) -> Case:
    args = {"q": np.asarray(q, dtype=np.float64), "k": np.asarray(k, dtype=np.float64),
            "v": np.asarray(v, dtype=np.float64)}
    if mask is not None:
        args["mask"] = np.asarray(mask, dtype=bool)
    # Loose enough for a learner who computes in float32 torch, tight enough to
    # tell every buggy variant apart.
    return Case(
        description=description,
        args=args,
        expected=scaled_dot_product_attention(*args.values()),
        atol=1e-5,
        rtol=1e-4,
        hint=hint,
        output_names=("output", "weights"),
        diagnose=_diagnose_scaled_dot_product,
    )


def scaled_dot_product_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_scaled_dot_product`, random ones drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    equation = (
        "Follow equation (1): the product of queries and keys, divided by the square root of "
        "d_k, a softmax over the keys (last axis), then the weights times the values."
    )
    shapes = (
        "With tgt_len, src_len, d_k and d_v all different, every shape tells: scores and weights are "
        "(tgt_len, src_len), the output is (tgt_len, d_v). " + equation
    )
    causal = np.tril(np.ones((5, 5), dtype=bool))
    padded = np.array([[True, True, False, False], [False, False, False, False], [True, True, True, False]])
    return [
        _sdp_case(
            "tiny hand-computable case: scaled scores [[2, 0], [1, 0]]",
            q=[[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 0.0]],
            k=[[1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]],
            v=[[1.0, 0.0, 2.0], [0.0, 1.0, 0.0]],
            mask=None, hint=equation,
        ),
        _sdp_case(
            "random, tgt_len=3, src_len=5, d_k=4, d_v=2",
            rng.normal(size=(3, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 2)), None, shapes,
        ),
        _sdp_case(
            "random, tgt_len=4, src_len=2, d_k=8, d_v=6",
            rng.normal(size=(4, 8)), rng.normal(size=(2, 8)), rng.normal(size=(2, 6)), None, shapes,
        ),
        _sdp_case(
            "causal mask, seq_len=5, d_k=4, d_v=3",
            rng.normal(size=(5, 4)), rng.normal(size=(5, 4)), rng.normal(size=(5, 3)), causal,
            "Masked positions (mask False) must get weight exactly 0: set their scores to -inf "
            "before the softmax. True means may attend.",
        ),
        _sdp_case(
            "masked row: query 1 may attend to no key, tgt_len=3, src_len=4",
            rng.normal(size=(3, 4)), rng.normal(size=(4, 4)), rng.normal(size=(4, 3)), padded,
            "A query whose mask row is all False must get zero weights and a zero output, never NaN.",
        ),
    ]


@allowing("NumPy operations: matrix products, np.where, np.exp, np.max and np.sum; your own "
          "my_softmax.",
          library=SOFTMAX + ATTENTION)
def check_scaled_dot_product(fn: Callable[..., Any]) -> CheckResult:
    """Check a learner's scaled dot-product attention, masks included.

    Parameters
    ----------
    fn : callable
        The learner's ``attention(q, k, v, mask=None)``, called as ``fn(q, k, v)``
        without a mask and ``fn(q, k, v, mask)`` with one:

        - ``q`` : (tgt_len, d_k) float ndarray, the queries;
        - ``k`` : (src_len, d_k) float ndarray, the keys;
        - ``v`` : (src_len, d_v) float ndarray, the values;
        - ``mask`` : (tgt_len, src_len) bool ndarray or None, ``True`` where a
          query may attend to a key;
        - returns the pair ``(output, weights)``: ``output`` (tgt_len, d_v) and
          ``weights`` (tgt_len, src_len), rows summing to 1 over the allowed
          keys. A query whose mask row is all False gets zero weights and a zero
          output, never NaN. NumPy arrays, torch tensors or nested lists.

    Returns
    -------
    CheckResult
        Truthy when every hidden case passes; otherwise the first failing case,
        the first wrong entry of ``output`` or ``weights`` and a hint naming the
        likely bug: missing 1/sqrt(d_k), division by d_k, softmax over the query
        axis, an inverted mask, weight leaking to masked keys, NaN or uniform
        weights in a fully masked row, a transposed result.

    Notes
    -----
    The hidden cases are a tiny case that can be checked by hand, two random
    cross-attention cases with ``tgt_len != src_len`` and ``d_k != d_v``, a causal
    mask and a mask with a fully masked row. The reference is
    :func:`attncourse.functional.scaled_dot_product_attention`.

    References
    ----------
    Vaswani et al. (2017), section 3.2.1, equation (1).

    Examples
    --------
    >>> import numpy as np
    >>> from attncourse.functional import softmax
    >>> def my_attention(q, k, v, mask=None):
    ...     scores = q @ k.T / np.sqrt(k.shape[-1])
    ...     weights = softmax(scores, mask=mask)
    ...     return weights @ v, weights
    >>> check_scaled_dot_product(my_attention)
    ✔ check_scaled_dot_product: all 5 hidden cases pass
    """
    result = run_cases("check_scaled_dot_product", fn, scaled_dot_product_cases(),
                       references=(scaled_dot_product_attention, attention))
    if result.passed and _replaces_nan(fn):
        result = replace(result, message=f"{result.message}. {SDP_NAN_REPLACED_NOTE}")
    return result


SDP_NAN_REPLACED_NOTE = (
    "A note: your function lets the fully masked row become 0 / 0 = NaN and then replaces "
    "the NaN. The result is right, but in a model the backward pass goes through that 0 / 0 "
    "too: with the mask added to the scores (an additive -inf), NaN reaches the gradients "
    "of q and k and spoils training. Giving such a row zero weights without dividing by "
    "zero avoids NaN in both passes."
)


def _replaces_nan(fn: Callable[..., Any]) -> bool:
    """Whether the learner's source replaces NaN after the fact (``nan_to_num``, ``isnan``)."""
    try:
        source = inspect.getsource(unwrap(fn))
    except (OSError, TypeError):  # no source to read (a builtin, a lambda made by exec)
        return False
    return re.search(r"\b(nan_to_num|isnan)\b", source) is not None



__all__ = [
    "check_scaled_dot_product",
    "check_softmax",
    "scaled_dot_product_cases",
    "softmax_cases",
]
