"""Softmax with a temperature tau (chapter 2).

Source: Hinton et al. (2015), "Distilling the Knowledge in a Neural Network", section 2.
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
    """Softmax of ``scores / tau`` over ``axis``, stable for tau in (0, inf]; any shape.

    Raises ValueError if tau is not > 0 or the mask does not broadcast; TypeError if the
    mask is not boolean. Source: Hinton et al. (2015), section 2.
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
    """tau -> 0 limit of :func:`softmax_with_temperature`: one-hot at the argmax, ties split.

    Raises ValueError or TypeError as :func:`softmax_with_temperature`.
    """
    scores = np.asarray(scores, dtype=np.result_type(np.asarray(scores).dtype, np.float32))
    mask = _broadcast_mask(mask, scores.shape)
    masked = np.where(mask, scores, -np.inf)
    is_max = mask & (masked == np.max(masked, axis=axis, keepdims=True))
    count = np.sum(is_max, axis=axis, keepdims=True)
    return is_max / np.where(count > 0, count, 1)


def entropy(weights: Any) -> float:
    """Entropy -sum_j w_j ln w_j of weights ``(n,)``, in nats."""
    w = np.asarray(weights.detach().cpu() if hasattr(weights, "detach") else weights, dtype=float)
    positive = w[w > 0]
    return float(-(positive * np.log(positive)).sum())

