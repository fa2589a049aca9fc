"""Scaled dot-product self-attention in NumPy, one named step at a time (chapter 4).

Source: Vaswani et al. (2017), "Attention Is All You Need", section 3.2.1, eq. (1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from attncourse.functional.validation import (
    validate_attention_shapes,
    validate_projection_shapes,
)

#: The six steps of self-attention, in order, as the course names them.
STEPS: tuple[str, ...] = ("project", "score", "scale", "softmax", "weight", "sum")


def softmax(x: np.ndarray, axis: int = -1, mask: np.ndarray | None = None) -> np.ndarray:
    """Numerically stable softmax over ``axis``; masked entries (False) get 0.

    Raises ValueError if ``mask`` does not broadcast to ``x``.
    """
    x = np.asarray(x)
    x = x.astype(np.result_type(x.dtype, np.float32), copy=False)
    if mask is None:
        mask = np.ones(x.shape, dtype=bool)
    else:
        mask = np.asarray(mask, dtype=bool)
        try:
            mask = np.broadcast_to(mask, x.shape)
        except ValueError:
            raise ValueError(
                f"mask of shape {mask.shape} does not broadcast to logits of shape {x.shape}"
            ) from None
    masked = np.where(mask, x, -np.inf)
    row_max = np.max(masked, axis=axis, keepdims=True)
    # A fully masked row has max -inf; shifting by 0 instead keeps it finite.
    row_max = np.where(np.isfinite(row_max), row_max, 0.0)
    with np.errstate(over="ignore"):  # x - max may overflow to -inf near 1e308: exp gives 0, as it should
        exp = np.where(mask, np.exp(masked - row_max), 0.0)
    total = np.sum(exp, axis=axis, keepdims=True)
    return exp / np.where(total > 0, total, 1.0)


#: NumPy arrays on the teaching path, torch tensors from the batched torch path.
Array = Any


@dataclass(frozen=True)
class SelfAttentionTrace:
    """Every intermediate of one self-attention: q (n_q, d_k), k (seq_len, d_k), v (seq_len,
    d_v), scores and weights (n_q, seq_len), output (n_q, d_v).
    """

    x: Array
    w_q: Array
    w_k: Array
    w_v: Array
    q: Array
    k: Array
    v: Array
    scores: Array
    scaled_scores: Array
    weights: Array
    weighted_values: Array
    output: Array
    mask: Array | None
    query_index: int | None

    @property
    def d_k(self) -> int:
        """Width of queries and keys."""
        return self.k.shape[-1]


def scaled_dot_product_attention(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, mask: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``softmax(Q K^T / sqrt(d_k)) V`` (Vaswani et al. 2017, eq. (1)).

    Shapes: q (tgt_len, d_k) or (d_k,); k (src_len, d_k); v (src_len, d_v); mask bool,
    broadcastable to (tgt_len, src_len). Returns output (tgt_len, d_v) and weights
    (tgt_len, src_len). Raises ValueError if the shapes or the mask do not fit.
    """
    q, k, v = (np.asarray(a) for a in (q, k, v))
    if q.ndim > 2 or k.ndim != 2 or v.ndim != 2:
        raise ValueError(
            f"the NumPy path takes one sequence: queries (tgt_len, d_k), keys (src_len, d_k), values "
            f"(src_len, d_v); got queries {q.shape}, keys {k.shape}, values {v.shape}. "
            f"For batches use attncourse.functional.attention (torch)"
        )
    validate_attention_shapes(q.shape, k.shape, v.shape, None if mask is None else np.shape(mask))
    weights = softmax(q @ k.T / np.sqrt(k.shape[-1]), mask=mask)
    return weights @ v, weights


def self_attention_trace(
    x: np.ndarray,
    w_q: np.ndarray,
    w_k: np.ndarray,
    w_v: np.ndarray,
    mask: np.ndarray | None = None,
    query_index: int | None = None,
) -> SelfAttentionTrace:
    """Self-attention of x (seq_len, d_model), every step kept (Vaswani et al. 2017, eq. (1)).

    Shapes: w_q, w_k (d_model, d_k); w_v (d_model, d_v). Raises ValueError if a
    projection does not fit ``x`` or ``query_index`` is out of range.
    """
    x, w_q, w_k, w_v = (np.asarray(a) for a in (x, w_q, w_k, w_v))
    if x.ndim != 2:
        raise ValueError(
            f"the NumPy path takes one sequence of embeddings (seq_len, d_model), got shape {x.shape}; "
            f"for batches use attncourse.functional.self_attention (torch)"
        )
    validate_projection_shapes(x.shape, w_q.shape, w_k.shape, w_v.shape)
    n = x.shape[0]
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        validate_attention_shapes((n, w_q.shape[1]), (n, w_k.shape[1]), (n, w_v.shape[1]), mask.shape)
        mask = np.broadcast_to(mask, (n, n))
    if query_index is not None:
        if not -n <= query_index < n:
            raise ValueError(f"query_index {query_index} is out of range for a sequence of length {n}")
        query_index = query_index % n

    q = x @ w_q  # step 1: project
    k = x @ w_k
    v = x @ w_v
    rows = slice(None) if query_index is None else query_index
    q = q[rows]
    row_mask = None if mask is None else mask[rows]
    scores = q @ k.T  # step 2: score every key against the query
    scaled = scores / np.sqrt(k.shape[-1])  # step 3: scale
    weights = softmax(scaled, mask=row_mask)  # step 4: normalise over keys
    weighted = weights[..., :, None] * v  # step 5: weight each value
    output = weighted.sum(axis=-2)  # step 6: sum over keys
    return SelfAttentionTrace(
        x=x, w_q=w_q, w_k=w_k, w_v=w_v, q=q, k=k, v=v, scores=scores,
        scaled_scores=scaled, weights=weights, weighted_values=weighted,
        output=output, mask=row_mask, query_index=query_index,
    )


def causal_mask(seq_len: int) -> np.ndarray:
    """``(seq_len, seq_len)`` bool: i may attend to j <= i (Vaswani et al. 2017, sec. 3.2.3)."""
    if seq_len < 1:
        raise ValueError(f"seq_len must be at least 1, got {seq_len}")
    return np.tril(np.ones((seq_len, seq_len), dtype=bool))


def padding_mask(lengths, max_len: int | None = None) -> np.ndarray:
    """``(batch, max_len)`` bool, True at real tokens, from lengths ``(batch,)``."""
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or lengths.size == 0:
        raise ValueError(f"lengths must be a non-empty 1-D sequence of ints, got shape {lengths.shape}")
    max_len = int(lengths.max()) if max_len is None else max_len
    if lengths.min() < 0 or lengths.max() > max_len:
        raise ValueError(f"lengths {lengths.tolist()} must lie in [0, max_len={max_len}]")
    return np.arange(max_len)[None, :] < lengths[:, None]
