"""Softmax with a temperature: one knob between "pick the best" and "spread evenly".

Attention weights are a softmax of scores. Dividing the scores by a temperature
tau > 0 before the softmax changes how peaked the weights are without changing
their order:

    alpha_j(tau) = exp(e_j / tau) / sum_k exp(e_k / tau)

* tau = 1 is the ordinary softmax.
* tau -> 0 sharpens it towards the *hardmax*: all the weight on the largest
  score (split evenly when several scores tie for the largest). This is the
  limit in which soft attention becomes a hard choice of one position.
* tau -> inf flattens it towards the uniform distribution over the positions
  that may be attended.

The function is the teaching helper behind those two limits; it uses the
course's mask convention (``True`` = may attend, masked entries get exactly 0).

References
----------
Hinton, Vinyals, Dean (2015), "Distilling the Knowledge in a Neural Network",
section 2 (softmax with a temperature T).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from attncourse.functional.numpy_attention import softmax


def _broadcast_mask(mask: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray:
    if mask is None:
        return np.ones(shape, dtype=bool)
    mask = np.asarray(mask)
    if mask.dtype != bool:
        raise TypeError(f"mask must be boolean (True = may attend), got dtype {mask.dtype}")
    try:
        return np.broadcast_to(mask, shape)
    except ValueError:
        raise ValueError(f"mask of shape {mask.shape} does not broadcast to scores of shape {shape}") from None


def softmax_with_temperature(
    scores: np.ndarray, tau: float, mask: np.ndarray | None = None, axis: int = -1
) -> np.ndarray:
    """Softmax of ``scores / tau`` over ``axis``, stable for any tau in (0, inf].

    The row maximum is subtracted *before* dividing by tau, so a tiny tau sends
    the non-maximal entries to ``-inf`` (weight 0) and the maximal ones to 0
    (weight 1 each before normalising) instead of overflowing to ``inf - inf``.
    That makes the tau -> 0 limit exact: for a small enough tau the result *is*
    the hardmax, with ties split evenly. ``tau = numpy.inf`` gives the uniform
    distribution over the unmasked entries.

    Parameters
    ----------
    scores : ndarray, any shape, e.g. (tgt_len, src_len)
        Alignment scores e_j; finite.
    tau : float
        Temperature, > 0 (``numpy.inf`` allowed).
    mask : ndarray of bool, broadcastable to ``scores.shape``, optional
        ``True`` where an entry may receive weight; masked entries get exactly 0.
        A fully masked row is all zeros (never NaN).
    axis : int
        The axis to normalise over (the key axis).

    Returns
    -------
    ndarray, same shape as ``scores``
        Weights that sum to 1 along ``axis`` over the unmasked entries.

    Raises
    ------
    ValueError
        If ``tau`` is not > 0 (or is NaN), or the mask does not broadcast to the scores.
    TypeError
        If ``mask`` is not boolean.

    References
    ----------
    Hinton et al. (2015), section 2.
    """
    tau = float(tau)
    if math.isnan(tau) or tau <= 0.0:
        raise ValueError(f"temperature tau must be > 0 (use numpy.inf for the uniform limit), got {tau}")
    scores = np.asarray(scores, dtype=np.result_type(np.asarray(scores).dtype, np.float32))
    mask = _broadcast_mask(mask, scores.shape)
    masked = np.where(mask, scores, -np.inf)
    row_max = np.max(masked, axis=axis, keepdims=True)
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    # (e_j - max) <= 0 on unmasked entries, so dividing by a tiny tau gives 0 or -inf, never inf - inf.
    shifted = np.where(mask, scores - row_max, 0.0) / tau
    return softmax(shifted, axis=axis, mask=mask)


def hardmax(scores: np.ndarray, mask: np.ndarray | None = None, axis: int = -1) -> np.ndarray:
    """The tau -> 0 limit of :func:`softmax_with_temperature`: one-hot at the argmax, ties split.

    Parameters
    ----------
    scores : ndarray, any shape
        Alignment scores.
    mask : ndarray of bool, broadcastable to ``scores.shape``, optional
        ``True`` where an entry may receive weight; masked entries get 0 and
        are never the argmax. A fully masked row is all zeros.
    axis : int
        The axis to normalise over.

    Returns
    -------
    ndarray, same shape as ``scores``
        1 / m at each of the m largest unmasked scores of a row, 0 elsewhere.

    Raises
    ------
    ValueError
        If the mask does not broadcast to the scores.
    TypeError
        If ``mask`` is not boolean.
    """
    scores = np.asarray(scores, dtype=np.result_type(np.asarray(scores).dtype, np.float32))
    mask = _broadcast_mask(mask, scores.shape)
    masked = np.where(mask, scores, -np.inf)
    is_max = mask & (masked == np.max(masked, axis=axis, keepdims=True))
    count = np.sum(is_max, axis=axis, keepdims=True)
    return is_max / np.where(count > 0, count, 1)


def entropy(weights: Any) -> float:
    """Entropy -sum_j w_j ln w_j of a weight vector, in nats (0 ln 0 = 0).

    Parameters
    ----------
    weights : array-like or tensor, (n,)
        Non-negative weights summing to 1.

    Returns
    -------
    float
        0 for a one-hot vector, ln n for the uniform one.
    """
    w = np.asarray(weights.detach().cpu() if hasattr(weights, "detach") else weights, dtype=float)
    positive = w[w > 0]
    return float(-(positive * np.log(positive)).sum())

