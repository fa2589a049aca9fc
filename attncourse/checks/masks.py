"""Checks for the mask exercises of the chapters "The bottleneck" and "Bahdanau attention".

The first chapter pads sentences of different lengths into one batch and marks the real
tokens (the padding mask); the second gives padding no weight in the softmax (the masked
softmax). Each check runs the learner's function on hidden cases and returns a
:class:`~attncourse.checks.core.CheckResult`; a failure is compared with typical buggy
versions (the mask inverted, off by one, the softmax over the wrong axis, ...) so that the
hint names the likely bug. :func:`draw_lengths` draws the sequence lengths of the cases
added at grading time, for these checks and chapter 7's left-padded causal mask.

References
----------
Bahdanau, Cho, Bengio (2015), "Neural Machine Translation by Jointly Learning to
Align and Translate", ICLR, appendix A.1.2 (padding).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from attncourse.checks.core import Case, CheckResult, run_cases, same_values
from attncourse.functional import (
    masked_softmax,
    padding_mask,
    softmax,
)

# Loose enough for a learner who computes in float32 torch, tight enough to
# tell every buggy variant apart.
_ATOL = 1e-5
_RTOL = 1e-4
# ----------------------------------------------------------------------- padding mask

PAD_RULE = (
    "Sequences are padded at the end: in row b, a position is a real token (True) when it "
    "comes before that sequence's length, and padding (False) otherwise."
)
PAD_INVERTED_HINT = (
    "True and False are swapped. In this course True marks a real token, a position that may "
    "be attended, and False marks padding (torch's key_padding_mask uses the opposite)."
)
PAD_OFF_BY_ONE_HINT = (
    "One position too many is True: a sequence of length L has its real tokens at positions "
    "0 .. L-1, so position L itself is already padding."
)
PAD_ONE_SHORT_HINT = (
    "One real token is missing: positions 0 .. L-1 are all real, the last one (L-1) included; "
    "compare positions with L, not with L - 1."
)
PAD_LEFT_HINT = (
    "Your padding is at the start of each row. In this course sequences are padded at the end: "
    "the first length positions are real."
)
PAD_DTYPE_HINT = (
    "The pattern is right but the dtype is {dtype}; masks must be boolean. Used as an index, "
    "an integer array is read as positions and a float one is rejected; only a bool array "
    "selects entries. A comparison gives booleans directly; otherwise convert at the end."
)
PAD_MAX_LEN_HINT = (
    "Your mask has as many columns as the longest sequence; it must have max_len columns, which can be more than the "
    "longest sequence (a batch padded to a fixed length). Use the max_len argument."
)
PAD_TRANSPOSED_HINT = "Your mask is transposed: it must be (batch, max_len), one row per sequence."
PAD_SHAPE_HINT = (
    "Return a (batch, max_len) array, one row per sequence, even when batch or max_len is 1: "
    "watch out for squeezing axes away."
)


def _diagnose_padding_mask(got: Any, case: Case) -> str | None:
    lengths, max_len = case.args["lengths"], case.args["max_len"]
    expected = np.asarray(case.expected)
    if not isinstance(got, np.ndarray):
        return None
    if got.shape != expected.shape:
        if got.shape == expected.T.shape:
            return PAD_TRANSPOSED_HINT
        if got.shape == (lengths.size, int(lengths.max())):
            return PAD_MAX_LEN_HINT
        return PAD_SHAPE_HINT
    if not np.isin(got, (0, 1)).all():
        return None
    pattern = got.astype(bool)
    positions, column = np.arange(max_len)[None, :], lengths[:, None]
    variants = [
        (PAD_INVERTED_HINT, ~expected),
        (PAD_OFF_BY_ONE_HINT, positions <= column),
        (PAD_ONE_SHORT_HINT, positions < column - 1),
        (PAD_LEFT_HINT, positions >= max_len - column),
    ]
    for hint, variant in variants:
        if not np.array_equal(variant, expected) and np.array_equal(pattern, variant):
            return hint
    if np.array_equal(pattern, expected) and got.dtype != bool:
        return PAD_DTYPE_HINT.format(dtype=got.dtype)
    return None


def padding_mask_cases(seed: int | None = None) -> list[Case]:
    """The hidden cases of :func:`check_padding_mask`; with ``seed`` (the grade of record's),
    two more batches of lengths drawn from it."""
    def case(description: str, lengths: list[int], max_len: int, hint: str = PAD_RULE) -> Case:
        lengths_array = np.asarray(lengths, dtype=np.int64)
        return Case(
            description=description,
            args={"lengths": lengths_array, "max_len": max_len},
            expected=padding_mask(lengths_array, max_len),
            atol=0.0,
            rtol=0.0,
            hint=hint,
            dtype=bool,
            diagnose=_diagnose_padding_mask,
        )

    return [
        case("lengths [3, 1, 4], max_len=4", [3, 1, 4], 4),
        case(
            "max_len longer than every sequence: lengths [2, 3], max_len=5", [2, 3], 5,
            "The mask has max_len columns even when every sequence is shorter. " + PAD_RULE,
        ),
        case(
            "an empty sequence and a full one: lengths [0, 5, 2], max_len=5", [0, 5, 2], 5,
            "A sequence of length 0 is all padding (a row of False); one of length max_len is all "
            "real tokens (a row of True). " + PAD_RULE,
        ),
        case("one sequence of one token: lengths [1], max_len=1", [1], 1, PAD_SHAPE_HINT),
    ] + [case(f"drawn when graded: lengths {lengths}, max_len={max_len}", lengths, max_len)
         for lengths, max_len in draw_lengths(seed)]


def draw_lengths(seed: int | None, max_len: tuple[int, int] = (1, 11), shortest: int = 0,
                 batch: tuple[int, int] = (1, 5)) -> list[tuple[list[int], int]]:
    """Two ``(lengths, max_len)`` drawn from the grading seed (none without one).

    Parameters
    ----------
    seed : int or None
        The grading seed; None (the check in the learner's notebook) draws nothing.
    max_len : (int, int)
        Least and greatest padded length, inclusive.
    shortest : int
        Least sequence length (0: a sequence may be all padding).
    batch : (int, int)
        Least and greatest number of sequences, inclusive.

    Returns
    -------
    list of (list of int, int)
        Each batch's sequence lengths, each in ``[shortest, max_len]``, and its ``max_len``.
    """
    if seed is None:
        return []
    rng = np.random.default_rng(seed)
    drawn = []
    for _ in range(2):
        n = int(rng.integers(max_len[0], max_len[1] + 1))
        size = int(rng.integers(batch[0], batch[1] + 1))
        drawn.append(([int(v) for v in rng.integers(shortest, n + 1, size=size)], n))
    return drawn


def check_padding_mask(fn: Callable[..., Any]) -> CheckResult:
    """Check a learner's padding mask, built from sequence lengths.

    Parameters
    ----------
    fn : callable
        The learner's ``padding_mask(lengths, max_len)``, called as
        ``fn(lengths, max_len)``:

        - ``lengths`` : (batch,) int64 ndarray, the number of real tokens of
          each sequence, each in [0, max_len];
        - ``max_len`` : int, the padded length (it may exceed ``max(lengths)``);
        - returns a (batch, max_len) array of dtype bool, ``True`` at real tokens
          (position j < lengths[b]) and ``False`` at padding. 0/1 integers are
          not accepted: masks are boolean throughout the course. NumPy array,
          torch tensor or nested list.

    Returns
    -------
    CheckResult
        Truthy when every hidden case passes; otherwise the first failing case
        and a hint for the likely bug: True/False swapped, ``<=`` instead of
        ``<``, padding at the start, ``max(lengths)`` columns instead of
        ``max_len``, a non-boolean dtype, a squeezed or transposed shape.

    Notes
    -----
    The hidden cases are a plain batch, a ``max_len`` longer than every
    sequence, an empty sequence next to a full one, and a batch of one sequence
    of one token. The reference is :func:`attncourse.functional.padding_mask`.

    References
    ----------
    Bahdanau et al. (2015), section 3.1: the weights alpha_ij range over the
    source positions j = 1..T_x of each sentence, so padding gets none.

    Examples
    --------
    >>> import numpy as np
    >>> def my_padding_mask(lengths, max_len):
    ...     return np.arange(max_len)[None, :] < np.asarray(lengths)[:, None]
    >>> check_padding_mask(my_padding_mask)
    ✔ check_padding_mask: all 4 hidden cases pass
    """
    return run_cases("check_padding_mask", fn, padding_mask_cases(), references=(padding_mask,))


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
    "check_masked_softmax",
    "check_padding_mask",
    "draw_lengths",
    "masked_softmax_cases",
    "padding_mask_cases",
]
