"""Checks for the exercises of the attention-at-scale chapter: the online softmax update,
the rescaling of the partial output, and causal linear attention as a running sum.

Each check runs the learner's function on hidden cases and, when a case fails, compares
the output with typical buggy versions (the normaliser not rescaled, the rescaling factor
upside down, the future keys included...) so that the hint names the likely bug.

References
----------
Milakov, Gimelshein (2018), "Online normalizer calculation for softmax", algorithm 3.
Dao (2023), "FlashAttention-2", algorithm 1, lines 8-10.
Katharopoulos et al. (2020), "Transformers are RNNs", eqs. (10)-(12).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attncourse.checks.core import (
    Case,
    CheckResult,
    buggy_variants,
    run_cases,
    variant_hint,
)
from attncourse.checks.guard import ATTENTION, SOFTMAX, allowing
from attncourse.functional.linear_attention import elu_feature_map, linear_attention
from attncourse.functional.tiled_attention import online_softmax_step

# --------------------------------------------------------------------------- online softmax update

UPDATE_HINT = (
    "The new maximum is the larger of the old one and the new scores' largest; the new "
    "normaliser is the old one carried over to the new maximum plus the new block's "
    "exponentials taken under the new maximum, row by row (reduce over the last axis). Before "
    "any key the maximum is -inf and the normaliser 0, and the exponential of -inf is 0."
)
UPDATE_NO_RESCALE_HINT = (
    "The old normaliser l was summed under the old maximum m: carry it over to the new maximum "
    "(one factor, at most 1) before adding the new block's sum, or it mixes two different scales."
)
UPDATE_FLIPPED_HINT = (
    "Your rescaling factor grows: carrying the old normaliser to a larger maximum must shrink "
    "it (a factor at most 1), so the exponent is the old maximum minus the new one."
)
UPDATE_OLD_MAX_HINT = (
    "Subtract the *new* maximum m_new from the new scores before exponentiating; with the old m "
    "a larger new score overflows."
)
UPDATE_NAN_HINT = (
    'Your result has NaN where no key has been seen yet: with both maxima at -inf, their '
    'difference is NaN. Where the new maximum is still -inf, shift by a finite number instead (any: '
    'every exponential there is 0).'
)


def _update_expected(m, l, scores):
    d_v = 1
    m_new, l_new, _ = online_softmax_step(m, l, np.zeros((len(m), d_v)), scores, np.zeros((scores.shape[-1], d_v)))
    return m_new, l_new


def _diagnose_update(got: Any, case: Case) -> str | None:
    m, l, scores = (case.args[key] for key in ("m", "l", "scores"))
    if not isinstance(got, tuple) or len(got) != 2:
        return "Return a pair (m_new, l_new), each of shape (rows,)."
    l_got = np.asarray(got[1], dtype=np.float64)
    if np.isnan(l_got).any():
        return UPDATE_NAN_HINT
    m_new = np.maximum(m, scores.max(axis=-1))
    shift = np.where(np.isfinite(m_new), m_new, 0.0)
    old = np.where(np.isfinite(m), m, 0.0)
    p_sum = np.exp(scores - shift[:, None]).sum(axis=-1)
    variants = buggy_variants([
        (UPDATE_NO_RESCALE_HINT, lambda: l + p_sum),
        (UPDATE_FLIPPED_HINT, lambda: np.where(l > 0, np.exp(shift - old), 0.0) * l + p_sum),
        (UPDATE_OLD_MAX_HINT, lambda: np.exp(m - shift) * l + np.exp(scores - old[:, None]).sum(axis=-1)),
    ])
    return variant_hint(l_got, variants, case.expected[1], case)


def online_update_cases(seed: int = 0) -> list[Case]:
    """Hidden cases of :func:`check_online_softmax_update`."""
    rng = np.random.default_rng(seed)
    inputs = [
        ("first block: nothing seen yet", np.full(2, -np.inf), np.zeros(2), rng.normal(size=(2, 3))),
        ("a new block with a larger maximum", np.array([0.5, -1.0]), np.array([1.7, 2.2]),
         rng.normal(size=(2, 4)) + 2.0),
        ("a new block with a smaller maximum", np.array([3.0]), np.array([1.2]), rng.normal(size=(1, 5)) - 2.0),
        ("large scores (exp would overflow)", np.array([990.0, 1000.0]), np.array([1.5, 1.0]),
         np.array([[1000.0, 1001.0], [999.0, 1002.0]])),
        ("masked keys (-inf) in the block, one row with nothing yet",
         np.array([-np.inf, 0.0]), np.array([0.0, 1.0]), np.array([[-np.inf, -np.inf], [-np.inf, 0.5]])),
    ]
    cases = []
    for description, m, l, scores in inputs:
        cases.append(Case(description, {"m": m, "l": l, "scores": scores}, _update_expected(m, l, scores),
                          rtol=1e-9, atol=1e-12, hint=UPDATE_HINT, output_names=("m_new", "l_new"),
                          diagnose=_diagnose_update))
    return cases


@allowing("NumPy operations: np.maximum, np.where, np.isfinite, np.exp and np.sum.",
          library=SOFTMAX)
def check_online_softmax_update(fn) -> CheckResult:
    """Check a learner's online softmax update for one new block of scores.

    The learner's function is called as ``fn(m, l, scores)`` with the running maximum
    ``m (rows,)``, the running normaliser ``l (rows,)`` and a new block of scaled scores
    ``scores (rows, block)`` (``-inf`` where masked), and returns ``(m_new, l_new)``:
    ``m_new = max(m, rowmax(scores))``, ``l_new = exp(m - m_new) l + rowsum(exp(scores - m_new))``
    (Milakov & Gimelshein 2018, algorithm 3). Reference:
    :func:`attncourse.functional.online_softmax_step`.

    Examples
    --------
    >>> def update(m, l, scores):
    ...     m_new = np.maximum(m, scores.max(axis=-1))
    ...     shift = np.where(np.isfinite(m_new), m_new, 0.0)
    ...     return m_new, np.exp(m - shift) * l + np.exp(scores - shift[:, None]).sum(axis=-1)
    >>> check_online_softmax_update(update).passed
    True
    """
    return run_cases("check_online_softmax_update", fn, online_update_cases(),
                     references=(online_softmax_step,))


# --------------------------------------------------------------------------- rescaling the output

RESCALE_HINT = (
    'The old unnormalised output was summed under the old maximum: rescale it to the new one (one'
    " factor per row), then add the new block's values weighted by the exponentials of its scores"
    ' taken under the new maximum; do not divide by l yet.'
)
RESCALE_NONE_HINT = (
    "You added the new block without rescaling the old output: carry acc over to the new "
    "maximum first (one factor per row, broadcast over d_v)."
)
RESCALE_FLIPPED_HINT = (
    "Your factor grows: carrying the output to a larger maximum must shrink it (a factor at "
    "most 1), so the exponent is the old maximum minus the new one."
)
RESCALE_NORMALISED_HINT = (
    "Keep acc unnormalised: do not divide by the sum of the block's exponentials. The division by "
    "l happens once, after the last block."
)


def _diagnose_rescale(got: Any, case: Case) -> str | None:
    acc, m, m_new, scores, v_block = (case.args[key] for key in ("acc", "m", "m_new", "scores", "v_block"))
    p = np.exp(scores - m_new[:, None])
    variants = buggy_variants([
        (RESCALE_NONE_HINT, lambda: acc + p @ v_block),
        (RESCALE_FLIPPED_HINT, lambda: np.exp(m_new - m)[:, None] * acc + p @ v_block),
        (RESCALE_NORMALISED_HINT, lambda: np.exp(m - m_new)[:, None] * acc
         + (p / p.sum(axis=-1, keepdims=True)) @ v_block),
    ])
    return variant_hint(got, variants, case.expected, case)


def rescale_cases(seed: int = 0) -> list[Case]:
    """Hidden cases of :func:`check_rescale_output`."""
    rng = np.random.default_rng(seed)
    cases = []
    for description, rows, block, d_v, lift in (("2 rows, a block of 3 keys, d_v=4", 2, 3, 4, 1.5),
                                                ("3 rows, a block of 5 keys, d_v=2", 3, 5, 2, 3.0),
                                                ("1 row, new block below the old maximum", 1, 4, 3, -2.0)):
        m = rng.normal(size=rows)
        scores = rng.normal(size=(rows, block)) + lift
        m_new = np.maximum(m, scores.max(axis=-1))
        acc = rng.normal(size=(rows, d_v))
        v_block = rng.normal(size=(block, d_v))
        expected = np.exp(m - m_new)[:, None] * acc + np.exp(scores - m_new[:, None]) @ v_block
        cases.append(Case(description, {"acc": acc, "m": m, "m_new": m_new, "scores": scores, "v_block": v_block},
                          expected, rtol=1e-9, atol=1e-12, hint=RESCALE_HINT, diagnose=_diagnose_rescale))
    return cases


@allowing("NumPy operations: np.exp, broadcasting and matrix products.",
          library=SOFTMAX + ATTENTION)
def check_rescale_output(fn) -> CheckResult:
    """Check a learner's update of the unnormalised partial output for one new block.

    Called as ``fn(acc, m, m_new, scores, v_block)`` with ``acc (rows, d_v)`` the running
    sum of ``exp(score - m) v`` over the keys seen so far, ``m (rows,)`` the old and
    ``m_new (rows,)`` the new running maximum, the block's scaled scores
    ``scores (rows, block)`` and values ``v_block (block, d_v)``; returns the new
    ``acc (rows, d_v)`` = ``exp(m - m_new) acc + exp(scores - m_new) v_block``
    (Dao 2023, algorithm 1, line 10).

    Examples
    --------
    >>> def rescale(acc, m, m_new, scores, v_block):
    ...     return np.exp(m - m_new)[:, None] * acc + np.exp(scores - m_new[:, None]) @ v_block
    >>> check_rescale_output(rescale).passed
    True
    """
    return run_cases("check_rescale_output", fn, rescale_cases(), references=(online_softmax_step,))


# --------------------------------------------------------------------------- causal linear attention

LINEAR_HINT = (
    "With the feature map phi (elu plus 1), keep two running sums over the keys seen so far: "
    "S, the outer products of each mapped key with its value (d_k, d_v), and z, the mapped keys "
    "(d_k,); output i reads S with the mapped query i and divides by that query's product with z."
)
LINEAR_NOT_CAUSAL_HINT = (
    "Every row uses all the keys: add key i to the running sums *before* computing output i, "
    "and only the keys up to i."
)
LINEAR_NO_NORM_HINT = (
    "Divide by the mapped query's product with the running normaliser z, so that the weights "
    "sum to 1."
)
LINEAR_NO_PHI_HINT = "Apply the feature map phi (elu plus 1) to queries and keys, not the raw q and k."
LINEAR_LAGGED_HINT = "Output i must include key i itself: update S and z with key i, then read them with q_i."


def _diagnose_linear(got: Any, case: Case) -> str | None:
    q, k, v = (case.args[key] for key in ("q", "k", "v"))
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
    states = np.cumsum(phi_k[:, :, None] * v[:, None, :], axis=0)

    def raw_causal():
        sim = np.tril(q @ k.T)
        return sim @ v / sim.sum(axis=-1, keepdims=True)

    def lagged():
        shifted = np.concatenate([np.zeros_like(states[:1]), states[:-1]])
        z = np.concatenate([np.zeros_like(phi_k[:1]), np.cumsum(phi_k, axis=0)[:-1]])
        return np.einsum("nk,nkv->nv", phi_q, shifted) / np.einsum("nk,nk->n", phi_q, z)[:, None]

    variants = buggy_variants([
        (LINEAR_NOT_CAUSAL_HINT, lambda: linear_attention(q, k, v)),
        (LINEAR_NO_NORM_HINT, lambda: np.einsum("nk,nkv->nv", phi_q, states)),
        (LINEAR_NO_PHI_HINT, raw_causal),
        (LINEAR_LAGGED_HINT, lagged),
    ])
    return variant_hint(got, variants, case.expected, case)


def linear_cases(seed: int = 0) -> list[Case]:
    """Hidden cases of :func:`check_causal_linear_attention`."""
    rng = np.random.default_rng(seed)
    cases = []
    for description, n, d_k, d_v in (("6 positions, d_k=3, d_v=2", 6, 3, 2), ("1 position", 1, 4, 3),
                                      ("10 positions, d_k=5, d_v=4", 10, 5, 4)):
        q, k, v = rng.normal(size=(n, d_k)), rng.normal(size=(n, d_k)), rng.normal(size=(n, d_v))
        cases.append(Case(description, {"q": q, "k": k, "v": v}, linear_attention(q, k, v, causal=True),
                          rtol=1e-8, atol=1e-10, hint=LINEAR_HINT, diagnose=_diagnose_linear))
    return cases


@allowing("NumPy operations: np.where, np.exp, np.outer, matrix products and a loop over "
          "positions; the feature map phi may be the package's elu_feature_map.",
          library=SOFTMAX + ATTENTION,
          allow=("attncourse.functional.linear_attention.elu_feature_map",))
def check_causal_linear_attention(fn) -> CheckResult:
    """Check a learner's causal linear attention written as a running sum.

    Called as ``fn(q, k, v)`` with ``q, k (n, d_k)`` and ``v (n, d_v)``; returns
    ``(n, d_v)``, output i = ``phi(q_i)^T S_i / (phi(q_i)^T z_i)`` with
    ``S_i = sum_{j<=i} phi(k_j) v_j^T``, ``z_i = sum_{j<=i} phi(k_j)`` and
    ``phi(x) = elu(x) + 1`` (Katharopoulos et al. 2020, eqs. 10-12). Reference:
    :func:`attncourse.functional.linear_attention` with ``causal=True``.

    Examples
    --------
    >>> from attncourse.functional import elu_feature_map as phi
    >>> def causal_linear(q, k, v):
    ...     S, z, out = np.zeros((k.shape[1], v.shape[1])), np.zeros(k.shape[1]), []
    ...     for qi, ki, vi in zip(phi(q), phi(k), v):
    ...         S, z = S + np.outer(ki, vi), z + ki
    ...         out.append(qi @ S / (qi @ z))
    ...     return np.array(out)
    >>> check_causal_linear_attention(causal_linear).passed
    True
    """
    return run_cases("check_causal_linear_attention", fn, linear_cases(),
                     references=(linear_attention,))


__all__ = [
    "check_causal_linear_attention",
    "check_online_softmax_update",
    "check_rescale_output",
    "linear_cases",
    "online_update_cases",
    "rescale_cases",
]
