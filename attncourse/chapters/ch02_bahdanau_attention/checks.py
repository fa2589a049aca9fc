"""Checks of chapter 2's exercises: Bahdanau's alignment score and the masked softmax.

Each check runs the learner's function on hidden cases and returns a
:class:`~attncourse.checks.core.CheckResult`; a failure is compared with typical buggy
versions (the tanh left out, W_a and U_a swapped, padding zeroed after the softmax, ...)
so that the hint names the likely bug.

References
----------
Bahdanau, Cho, Bengio (2015), "Neural Machine Translation by Jointly Learning to
Align and Translate", ICLR, section 3.1, equations (5)-(6), appendix A.1.2.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from attncourse.checks.core import Case, CheckResult, run_cases, same_values
from attncourse.checks.guard import SOFTMAX, allowing
from attncourse.functional import (
    additive_attention_step,
    masked_softmax,
    padding_mask,
    softmax,
)

# Loose enough for a learner who computes in float32 torch, tight enough to
# tell every buggy variant apart.
_ATOL = 1e-5
_RTOL = 1e-4
# ------------------------------------------------------------- Bahdanau alignment score

SCORE_LAYOUT_HINT = (
    "Follow the paper's score, v_a applied to the tanh of W_a on the decoder state plus U_a "
    "on each annotation, in the paper's layout, w_a (attn_dim, query_dim) and u_a (attn_dim, "
    "key_dim): W_a on the state is one vector of attn_dim; U_a on every annotation at once is "
    "(src_len, attn_dim), one row per source position; add them (the vector broadcasts over "
    "the rows), take tanh, then reduce each row to one number with v_a."
)
SCORE_NO_TANH_HINT = (
    "The tanh is missing: it goes between the sum of the two projections and v_a. Without it the score is linear "
    "in s_prev and h_j, a one-layer network with no hidden nonlinearity."
)
SCORE_TANH_OUTSIDE_HINT = (
    "tanh goes inside, on the attn_dim-vector that sums the two projections, before the "
    "product with v_a; you applied it to the score after it."
)
SCORE_SWAPPED_HINT = (
    "W_a and U_a are swapped: W_a acts on the decoder state, U_a on each annotation."
)
SCORE_TRANSPOSED_HINT = (
    "A weight matrix is used transposed. In the paper's layout w_a is (attn_dim, query_dim) "
    "and u_a is (attn_dim, key_dim), acting on column vectors; the annotations are the rows "
    "of h, so applying U_a to all of them at once takes u_a transposed, on the right."
)
SCORE_WEIGHTS_HINT = (
    "Your result sums to 1: those are the attention weights alpha_j, the softmax of the scores. "
    "This exercise asks for the scores e_j themselves; the softmax is the next step."
)
SCORE_HIDDEN_HINT = (
    "You returned the hidden vectors after the tanh, shape (src_len, attn_dim); reduce each "
    "to one score with v_a."
)
SCORE_1D_HINT = (
    "Return a 1-D array of scores, shape (src_len,), one per source position, not a row or a "
    "column vector."
)


def _score_variants(s_prev, h, w_a, u_a, v_a) -> list[tuple[str, np.ndarray]]:
    """Outputs of typical buggy alignment models whose shapes fit, each with its hint."""
    recipes = [
        (SCORE_NO_TANH_HINT, lambda: (w_a @ s_prev + h @ u_a.T) @ v_a),
        (SCORE_TANH_OUTSIDE_HINT, lambda: np.tanh((w_a @ s_prev + h @ u_a.T) @ v_a)),
        (SCORE_SWAPPED_HINT, lambda: np.tanh(u_a @ s_prev + h @ w_a.T) @ v_a),
        (SCORE_TRANSPOSED_HINT, lambda: np.tanh(w_a.T @ s_prev + h @ u_a) @ v_a),
        (SCORE_TRANSPOSED_HINT, lambda: np.tanh(s_prev @ w_a + h @ u_a.T) @ v_a),
        (SCORE_TRANSPOSED_HINT, lambda: np.tanh(w_a @ s_prev + h @ u_a) @ v_a),
        (SCORE_WEIGHTS_HINT, lambda: softmax(np.tanh(w_a @ s_prev + h @ u_a.T) @ v_a)),
    ]
    variants = []
    for hint, recipe in recipes:
        try:
            variants.append((hint, recipe()))
        except ValueError:
            pass  # the shapes do not fit, so this bug raises instead
    return variants


def _diagnose_additive_score(got: Any, case: Case) -> str | None:
    s_prev, h, w_a, u_a, v_a = (case.args[name] for name in ("s_prev", "h", "w_a", "u_a", "v_a"))
    expected = np.asarray(case.expected)
    if not isinstance(got, np.ndarray):
        return None
    if got.shape != expected.shape:
        if got.shape == (h.shape[0], v_a.shape[0]):
            return SCORE_HIDDEN_HINT
        if got.size == expected.size:
            return SCORE_1D_HINT
        return None
    for hint, variant in _score_variants(s_prev, h, w_a, u_a, v_a):
        if (variant.shape == expected.shape and not same_values(variant, expected, case)
                and same_values(got, variant, case)):
            return hint
    got = got.astype(np.float64)
    if (got >= 0).all() and np.isclose(got.sum(), 1.0, atol=1e-4) and not np.isclose(expected.sum(), 1.0):
        return SCORE_WEIGHTS_HINT
    return None


def _score_case(description: str, rng: np.random.Generator, src_len: int, query_dim: int, key_dim: int,
                attn_dim: int, *, scale: float = 1.0, zero_v: bool = False,
                hint: str = SCORE_LAYOUT_HINT) -> Case:
    args = {
        "s_prev": scale * rng.normal(size=query_dim),
        "h": scale * rng.normal(size=(src_len, key_dim)),
        "w_a": rng.normal(size=(attn_dim, query_dim)),
        "u_a": rng.normal(size=(attn_dim, key_dim)),
        "v_a": np.zeros(attn_dim) if zero_v else rng.normal(size=attn_dim),
    }
    return Case(
        description=description,
        args=args,
        expected=additive_attention_step(*args.values()).scores,
        atol=_ATOL,
        rtol=_RTOL,
        hint=hint,
        diagnose=_diagnose_additive_score,
    )


def additive_score_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_additive_score`, drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    return [
        _score_case(
            "square weights: query_dim = key_dim = attn_dim = 3, src_len=4", rng, 4, 3, 3, 3,
            hint="Here w_a and u_a are square, so a swapped or transposed one still runs, giving wrong scores. "
                 + SCORE_LAYOUT_HINT,
        ),
        _score_case(
            "Bahdanau's shapes in miniature: query_dim=2, key_dim=4 (a bidirectional encoder, "
            "2 * 2), attn_dim=3, src_len=5", rng, 5, 2, 4, 3,
        ),
        _score_case(
            "v_a = 0, the paper's initialisation: every score is 0, query_dim=3, key_dim=2, "
            "attn_dim=4, src_len=3", rng, 3, 3, 2, 4, zero_v=True,
            hint="With v_a = 0 every score is 0, whatever the tanh gives; the weights (the next step) "
                 "would be uniform. " + SCORE_LAYOUT_HINT,
        ),
        _score_case(
            "a single source position, src_len=1, query_dim=2, key_dim=4, attn_dim=3", rng, 1, 2, 4, 3,
            hint="With one source position the result is still an array of shape (1,). "
                 + SCORE_LAYOUT_HINT,
        ),
        _score_case(
            "large states, tanh saturates: query_dim=5, key_dim=6, attn_dim=4, src_len=7",
            rng, 7, 5, 6, 4, scale=3.0,
        ),
    ]


@allowing("NumPy operations: matrix products (@) and np.tanh.")
def check_additive_score(fn: Callable[..., Any]) -> CheckResult:
    """Check a learner's Bahdanau alignment model, the scores of one decoding step.

    Parameters
    ----------
    fn : callable
        The learner's ``additive_score(s_prev, h, w_a, u_a, v_a)``, called with
        float64 ndarrays in that order, matrices in the paper's layout (they act
        on column vectors, as in :mod:`attncourse.functional.additive`):

        - ``s_prev`` : (query_dim,), the previous decoder state s_{i-1};
        - ``h`` : (src_len, key_dim), the annotations h_j, one row per source position;
        - ``w_a`` : (attn_dim, query_dim), W_a;
        - ``u_a`` : (attn_dim, key_dim), U_a;
        - ``v_a`` : (attn_dim,), v_a;
        - returns ``scores`` : (src_len,), e_j = v_a^T tanh(W_a s_prev + U_a h_j),
          the scores before the softmax. A NumPy array, a torch tensor or a
          nested list.

    Returns
    -------
    CheckResult
        Truthy when every hidden case passes; otherwise the first failing case,
        the first wrong entry (or the exception and the learner's line that
        raised it, e.g. a matrix product whose shapes do not fit) and a hint
        naming the likely bug: tanh missing or applied after v_a, W_a and U_a
        swapped or transposed, the weights (softmax) returned instead of the
        scores, the hidden vectors returned without v_a.

    Notes
    -----
    The hidden cases are square matrices (where a swapped or transposed matrix
    still runs and gets a specific hint), the paper's shapes in miniature with
    key_dim = 2 * query_dim, v_a = 0 (every score 0), a single source position,
    and large states that saturate the tanh. The reference is the ``scores``
    field of :func:`attncourse.functional.additive_attention_step`.

    References
    ----------
    Bahdanau et al. (2015), section 3.1, equation (6), and appendix A.1.2.

    Examples
    --------
    >>> import numpy as np
    >>> def my_additive_score(s_prev, h, w_a, u_a, v_a):
    ...     return np.tanh(w_a @ s_prev + h @ u_a.T) @ v_a
    >>> check_additive_score(my_additive_score)
    ✔ check_additive_score: all 5 hidden cases pass
    """
    return run_cases("check_additive_score", fn, additive_score_cases(),
                     references=(additive_attention_step,))



# ---------------------------------------------------------------------- masked softmax

MSM_RULE = (
    "Softmax over the source positions of each row (the last axis), with padded positions "
    "(mask False) getting weight exactly 0 and the real ones summing to 1."
)
MSM_INVERTED_HINT = (
    "The mask is used the wrong way round: True marks a real source token, which gets weight; "
    "False marks padding, which gets exactly 0."
)
MSM_AFTER_HINT = (
    "You zeroed the padded weights after the softmax without renormalising, so rows with padding "
    "sum to less than 1. Mask the scores before the softmax (padded scores -> -inf), so that the "
    "real positions share all the weight."
)
MSM_PRODUCT_HINT = (
    'Multiplying the scores by the mask gives padded positions a score of 0, not a weight of 0: '
    "an exponential of 1 still takes weight. A padded position's score must be one whose exponential is "
    'exactly 0, set before the softmax.'
)
MSM_NO_MASK_HINT = (
    "The mask is ignored: padded positions (mask False) got weight. Set their scores to -inf "
    "before the softmax, so that exp gives exactly 0."
)
MSM_AXIS_HINT = (
    "Your softmax runs over the batch axis (axis 0). Each row, one sentence's scores over its "
    "source positions, must sum to 1: normalise along the last axis."
)
MSM_GLOBAL_MAX_HINT = (
    "NaN where the padded positions hold the largest scores: you subtract the row max over all "
    "positions, padding included, so every real position's exponential underflows to 0 and "
    "the row is 0 over 0. Take the max over the real positions only: fill the padded scores with -inf "
    "first, then subtract the row max."
)
MSM_NO_MAX_HINT = (
    "The exponential of a large score overflows to infinity, and infinity over infinity is "
    "NaN. Subtract each row's max (over "
    "its real positions) before exponentiating; the softmax does not change."
)
MSM_NAN_ROW_HINT = (
    "A fully padded row (a source sentence of length 0) has no position to attend to, and dividing "
    "by its total weight of 0 gives 0 / 0 = NaN (as happens after filling every score with -inf). "
    "Give such rows zero weights, for example by zeroing the rows whose mask holds no True."
)
MSM_UNIFORM_ROW_HINT = (
    "A fully padded row got uniform weights 1/src_len: filling all its scores with the same large "
    "negative number leaves them equal, and softmax spreads the weight evenly. A row with no real "
    "token must get all-zero weights."
)
MSM_LEAK_HINT = (
    "Padded positions (mask False) got nonzero weight, up to {largest}. Set their scores to -inf "
    "(or a number so negative that exp gives exactly 0) before the softmax."
)
MSM_SUM_HINT = "Each row with at least one real token must sum to 1 over its real positions."
MSM_TRANSPOSED_HINT = "Your result is transposed: the weights have the shape of the scores, (batch, src_len)."
MSM_SHAPE_HINT = "Return weights of the same shape as the scores, (batch, src_len)."


def _masked_softmax_variants(scores: np.ndarray, mask: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """Outputs of typical buggy masked softmaxes, each with the hint that names its bug."""
    filled = np.where(mask, scores, -np.inf)
    e_all_max = np.where(mask, np.exp(filled - scores.max(axis=-1, keepdims=True)), 0.0)
    e_no_max = np.where(mask, np.exp(scores), 0.0)
    return [
        (MSM_INVERTED_HINT, softmax(scores, mask=~mask)),
        (MSM_AFTER_HINT, softmax(scores) * mask),
        (MSM_PRODUCT_HINT, softmax(scores * mask)),
        (MSM_NO_MASK_HINT, softmax(scores)),
        (MSM_AXIS_HINT, softmax(scores, axis=0, mask=mask)),
        (MSM_GLOBAL_MAX_HINT, e_all_max / e_all_max.sum(axis=-1, keepdims=True)),
        (MSM_NO_MAX_HINT, e_no_max / e_no_max.sum(axis=-1, keepdims=True)),
    ]


def _diagnose_masked_softmax(got: Any, case: Case) -> str | None:
    scores, mask = case.args["scores"], case.args["mask"]
    expected = np.asarray(case.expected)
    if not isinstance(got, np.ndarray):
        return None
    if got.shape != expected.shape:
        return MSM_TRANSPOSED_HINT if got.shape == expected.T.shape else MSM_SHAPE_HINT
    got = got.astype(np.float64)
    empty = ~mask.any(axis=-1)
    if empty.any() and same_values(got[~empty], expected[~empty], case):
        if np.isnan(got[empty]).any():
            return MSM_NAN_ROW_HINT
        if np.allclose(got[empty], 1.0 / mask.shape[-1], atol=case.atol):
            return MSM_UNIFORM_ROW_HINT
        return None
    variants = [(hint, v) for hint, v in _masked_softmax_variants(scores, mask) if not same_values(v, expected, case)]
    # A bug that empties a row (an inverted mask on a row without padding) also gives
    # NaN there, which the variants, built on the course's softmax, write as zeros.
    candidates = [got, np.nan_to_num(got, nan=0.0)] if np.isnan(got).any() else [got]
    for candidate in candidates:
        for hint, variant in variants:
            if same_values(candidate, variant, case):
                return hint
    if np.isnan(got[~empty]).any():
        return MSM_NO_MAX_HINT
    padded = ~empty[:, None] & ~mask
    leaked = np.abs(np.where(padded, got, 0.0))
    if leaked.max() > case.atol:
        return MSM_LEAK_HINT.format(largest=f"{leaked.max():.3g}")
    if not np.allclose(got[~empty].sum(axis=-1), 1.0, atol=1e-4):
        return MSM_SUM_HINT
    return None


def _masked_softmax_case(description: str, scores: Any, lengths: list[int], hint: str = MSM_RULE) -> Case:
    scores = np.asarray(scores, dtype=np.float64)
    mask = padding_mask(lengths, scores.shape[-1])
    return Case(
        description=description,
        args={"scores": scores, "mask": mask},
        expected=softmax(scores, mask=mask),
        atol=_ATOL,
        rtol=_RTOL,
        hint=hint,
        diagnose=_diagnose_masked_softmax,
    )


def masked_softmax_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_masked_softmax`, random ones drawn with ``seed``.

    ``batch != src_len`` in every case with more than one row, so a softmax over
    the wrong axis shows.
    """
    rng = np.random.default_rng(seed)
    large = 1000.0 + rng.normal(size=(2, 4))
    high_padding = rng.normal(size=(2, 5))
    high_padding[0, 3:] = [900.0, 1000.0]
    high_padding[1, 2:] = [950.0, 800.0, 1000.0]
    return [
        _masked_softmax_case("two sentences of lengths 4 and 2, src_len=4", rng.normal(size=(2, 4)), [4, 2]),
        _masked_softmax_case(
            "a sentence with a single real token: lengths [1, 5], src_len=5", rng.normal(size=(2, 5)), [1, 5],
            "A row with one real token puts all its weight, exactly 1, on that token. " + MSM_RULE,
        ),
        _masked_softmax_case(
            "batch=4, src_len=6, lengths [6, 3, 1, 4]", 2 * rng.normal(size=(4, 6)), [6, 3, 1, 4],
        ),
        _masked_softmax_case(
            "large scores around 1000: lengths [3, 2], src_len=4", large, [3, 2], MSM_NO_MAX_HINT,
        ),
        _masked_softmax_case(
            "padded positions hold the largest scores (up to 1000): lengths [3, 2], src_len=5",
            high_padding, [3, 2],
            "The scores at padded positions can be anything, even the largest of the row; they must "
            "still get weight 0 and not change the other weights. " + MSM_RULE,
        ),
        _masked_softmax_case(
            "a fully padded row (a source of length 0): lengths [3, 0, 1], src_len=4",
            rng.normal(size=(3, 4)), [3, 0, 1], MSM_NAN_ROW_HINT,
        ),
    ]


@allowing("NumPy operations such as np.where, np.exp, np.max and np.sum; your own my_softmax.",
          library=SOFTMAX)
def check_masked_softmax(fn: Callable[..., Any]) -> CheckResult:
    """Check a learner's softmax over source positions that gives padding no weight.

    Parameters
    ----------
    fn : callable
        The learner's ``masked_softmax(scores, mask)``, called as ``fn(scores, mask)``:

        - ``scores`` : (batch, src_len) float64 ndarray, the alignment scores
          e_j of one decoding step for each sentence of the batch;
        - ``mask`` : (batch, src_len) bool ndarray, ``True`` at real source
          tokens (may be attended) and ``False`` at padding, as made by
          :func:`attncourse.functional.padding_mask`;
        - returns ``weights`` : (batch, src_len), the softmax of each row over
          its real positions: padded positions get weight 0, and the real ones
          sum to 1. A row with no real token (every mask entry False) gets all
          zeros, never NaN. A NumPy array, a torch tensor or a nested list.

    Returns
    -------
    CheckResult
        Truthy when every hidden case passes; otherwise the first failing case,
        the first wrong entry and a hint naming the likely bug: the mask
        inverted or ignored, padded weights zeroed after the softmax without
        renormalising, scores multiplied by the mask, the softmax over the batch
        axis, no max subtraction, a max taken over padded scores too, NaN or
        uniform weights in a fully padded row.

    Notes
    -----
    The hidden cases are two plain batches, a sentence with a single real token,
    large scores (~1000), padded positions holding the largest scores of their
    row, and last a fully padded row. That last case is tested on purpose: an
    empty source can occur in a batch, and one NaN row would make the whole
    batch's loss NaN; the course's softmax and attention functions return zeros
    there, and so must this one. Filling padded scores with a large negative
    number such as -1e9 instead of -inf is accepted wherever a row has a real
    token (exp underflows to exactly 0 in float64), but gives uniform weights in
    the fully padded row, which fails. Weights are compared with a tolerance of
    1e-5, so float32 results pass. The reference is
    :func:`attncourse.functional.softmax` with ``mask=mask``.

    References
    ----------
    Bahdanau et al. (2015), section 3.1, equation (6): alpha_ij is a softmax of
    e_ij over the source positions j = 1..T_x, the real tokens of sentence i.

    Examples
    --------
    >>> import numpy as np
    >>> def my_masked_softmax(scores, mask):
    ...     filled = np.where(mask, scores, -np.inf)
    ...     row_max = filled.max(axis=-1, keepdims=True)
    ...     row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    ...     e = np.where(mask, np.exp(filled - row_max), 0.0)
    ...     total = e.sum(axis=-1, keepdims=True)
    ...     return e / np.where(total > 0, total, 1.0)
    >>> check_masked_softmax(my_masked_softmax)
    ✔ check_masked_softmax: all 6 hidden cases pass
    """
    return run_cases("check_masked_softmax", fn, masked_softmax_cases(),
                     references=(softmax, masked_softmax))


__all__ = [
    "additive_score_cases",
    "check_additive_score",
    "check_masked_softmax",
    "masked_softmax_cases",
]
