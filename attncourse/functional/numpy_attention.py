"""Scaled dot-product self-attention in NumPy, one named step at a time.

This is the teaching path: every intermediate of the computation is kept in a
frozen :class:`SelfAttentionTrace`, so a chapter, a figure or a widget can show
any step. The fast, batched path lives in :mod:`attncourse.functional.torch_attention`
and the two are tested equal.

Masks follow one convention everywhere in the course: ``True`` means *may attend*.

References
----------
Vaswani et al. (2017), "Attention Is All You Need", section 3.2.1, equation (1):
``Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V``.
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
    """Numerically stable softmax, with an optional boolean mask.

    The row maximum is subtracted before exponentiating, which leaves the result
    unchanged (softmax is invariant to adding a constant to a row) but keeps
    ``exp`` from overflowing at large logits.

    Parameters
    ----------
    x : ndarray, any shape
        Logits, e.g. scaled alignment scores ``(tgt_len, src_len)``.
    axis : int
        Axis to normalise over (the key axis for attention).
    mask : ndarray of bool, broadcastable to ``x.shape``, optional
        ``True`` where an entry may receive weight. Masked entries get exactly 0.

    Returns
    -------
    ndarray, same shape as ``x``
        Non-negative weights that sum to 1 along ``axis``; a row whose entries
        are all masked is all zeros (never NaN).

    Raises
    ------
    ValueError
        If ``mask`` does not broadcast to ``x.shape``.
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
    """Every intermediate of one self-attention computation, one field per step.

    The torch path (:func:`attncourse.functional.torch_attention.self_attention`)
    fills the same fields with tensors that carry leading batch dimensions.

    In matrix form (all queries) ``n_q = seq_len``; in vector form (one query,
    ``query_index`` set) the leading query axis is dropped from ``q``,
    ``scores``, ``scaled_scores``, ``weights``, ``weighted_values`` and ``output``.

    Attributes
    ----------
    x : (seq_len, d_model)
        Input embeddings X.
    w_q, w_k : (d_model, d_k)
        Query and key projection matrices W^Q, W^K.
    w_v : (d_model, d_v)
        Value projection matrix W^V.
    q : (n_q, d_k)
        Step 1, queries Q = X W^Q (only the chosen row in vector form).
    k : (seq_len, d_k)
        Step 1, keys K = X W^K.
    v : (seq_len, d_v)
        Step 1, values V = X W^V.
    scores : (n_q, seq_len)
        Step 2, alignment scores Q K^T.
    scaled_scores : (n_q, seq_len)
        Step 3, scores / sqrt(d_k).
    weights : (n_q, seq_len)
        Step 4, attention weights, softmax over keys; rows sum to 1 (0 if fully masked).
    weighted_values : (n_q, seq_len, d_v)
        Step 5, each value vector multiplied by its weight: ``weights[..., j] * v[j]``.
    output : (n_q, d_v)
        Step 6, the sum of the weighted values over keys (the context vectors).
    mask : (n_q, seq_len) bool or None
        ``True`` where a query may attend to a key.
    query_index : int or None
        The query position in vector form, ``None`` in matrix form.
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
    """Scaled dot-product attention, ``softmax(Q K^T / sqrt(d_k)) V``, in NumPy.

    Queries may come from any sequence (cross-attention) or from the same one
    as the keys (self-attention).

    Parameters
    ----------
    q : (tgt_len, d_k) or (d_k,)
        Queries; a 1-D array is a single query.
    k : (src_len, d_k)
        Keys.
    v : (src_len, d_v)
        Values, one per key.
    mask : bool array broadcastable to (tgt_len, src_len), optional
        ``True`` where a query may attend to a key.

    Returns
    -------
    output : (tgt_len, d_v) or (d_v,)
        Context vectors.
    weights : (tgt_len, src_len) or (src_len,)
        Attention weights; a fully masked row is all zeros and its output is 0.

    Raises
    ------
    ValueError
        If query and key widths differ, keys and values differ in number, or
        the mask does not fit; the message names both shapes.

    References
    ----------
    Vaswani et al. (2017), section 3.2.1, equation (1).
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
    """Self-attention of a sequence with itself, keeping every intermediate.

    With ``query_index=None`` this is the matrix form (all positions at once);
    with ``query_index=i`` it is the vector form, the walk-through for token i.
    Both run the same six steps of :data:`STEPS`: project, score, scale,
    softmax, weight, sum.

    Parameters
    ----------
    x : (seq_len, d_model)
        Input embeddings X, one row per token.
    w_q, w_k : (d_model, d_k)
        Query and key projections W^Q, W^K.
    w_v : (d_model, d_v)
        Value projection W^V.
    mask : bool array broadcastable to (seq_len, seq_len), optional
        ``True`` where query i may attend to key j (e.g. :func:`causal_mask`).
    query_index : int, optional
        Compute only the output of this position (vector form).

    Returns
    -------
    SelfAttentionTrace
        See its attributes for the shape of every step.

    Raises
    ------
    ValueError
        If a projection does not fit ``x`` or ``query_index`` is out of range;
        messages name the shapes involved.

    References
    ----------
    Vaswani et al. (2017), section 3.2.1, equation (1).
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
    """Boolean causal mask: position i may attend to positions j <= i.

    Returns
    -------
    (seq_len, seq_len) bool
        Lower-triangular, ``True`` = may attend.

    References
    ----------
    Vaswani et al. (2017), section 3.2.3 (masking in the decoder).
    """
    if seq_len < 1:
        raise ValueError(f"seq_len must be at least 1, got {seq_len}")
    return np.tril(np.ones((seq_len, seq_len), dtype=bool))


def padding_mask(lengths, max_len: int | None = None) -> np.ndarray:
    """Key padding mask from sequence lengths.

    Parameters
    ----------
    lengths : (batch,) ints
        Number of real tokens in each sequence.
    max_len : int, optional
        Padded length; defaults to ``max(lengths)``.

    Returns
    -------
    (batch, max_len) bool
        ``True`` at real tokens (may be attended), ``False`` at padding.
        Broadcast it over queries as ``mask[:, None, :]``.
    """
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or lengths.size == 0:
        raise ValueError(f"lengths must be a non-empty 1-D sequence of ints, got shape {lengths.shape}")
    max_len = int(lengths.max()) if max_len is None else max_len
    if lengths.min() < 0 or lengths.max() > max_len:
        raise ValueError(f"lengths {lengths.tolist()} must lie in [0, max_len={max_len}]")
    return np.arange(max_len)[None, :] < lengths[:, None]
