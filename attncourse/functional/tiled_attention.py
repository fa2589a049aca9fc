"""FlashAttention's tiled forward pass in NumPy, one tile at a time (chapter 9).

Source: Dao (2023), "FlashAttention-2", algorithm 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from attncourse.functional.validation import validate_attention_shapes


def online_softmax_step(
    m: np.ndarray, l: np.ndarray, acc: np.ndarray, scores: np.ndarray, v_block: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fold scores (rows, block) and v_block (block, d_v) into m, l (rows,), acc (rows, d_v)."""
    m_new = np.maximum(m, scores.max(axis=-1, initial=-np.inf))
    shift = np.where(np.isfinite(m_new), m_new, 0.0)  # a row with nothing yet shifts by 0
    p = np.exp(scores - shift[:, None])  # exp(-inf) = 0 on masked keys
    alpha = np.exp(m - shift)  # rescales what was summed under the old max; 0 when m = -inf
    return m_new, alpha * l + p.sum(axis=-1), alpha[:, None] * acc + p @ v_block


@dataclass(frozen=True)
class TileStep:
    """The state after one tile: scores (rows, cols); m, l (tgt_len,); output (tgt_len, d_v)."""

    q_block: int
    k_block: int
    rows: tuple[int, int]
    cols: tuple[int, int]
    scores: np.ndarray
    m: np.ndarray
    l: np.ndarray
    output: np.ndarray


@dataclass(frozen=True)
class TiledAttention:
    """The tiled forward's output (tgt_len, d_v) and log-sum-exp lse (tgt_len,)."""

    output: np.ndarray
    lse: np.ndarray
    steps: list[TileStep]
    block_q: int
    block_k: int
    src_len: int


def validate_block_sizes(block_q: int, block_k: int) -> None:
    """Raise ValueError unless ``block_q`` and ``block_k`` are positive integers."""
    for name, size in (("block_q", block_q), ("block_k", block_k)):
        if int(size) != size or size < 1:
            raise ValueError(f"{name} must be a positive integer, got {size!r}")


def key_blocks(src_len: int, block_k: int, last_row: int, causal: bool) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` of each key block a query block ending at ``last_row`` visits."""
    for start in range(0, src_len, block_k):
        if causal and start > last_row:
            return
        yield start, min(start + block_k, src_len)


def _tiles(q, k, v, mask, causal, block_q, block_k, keep) -> Iterator[tuple]:
    """The tiled forward: each tile's state when ``keep``, then the final ``(m, l, acc)``."""
    n_q, n_k = q.shape[0], k.shape[0]
    scale = 1.0 / np.sqrt(k.shape[-1])
    dtype = np.result_type(q.dtype, k.dtype, v.dtype, np.float32)
    m = np.full(n_q, -np.inf, dtype=dtype)
    l = np.zeros(n_q, dtype=dtype)
    acc = np.zeros((n_q, v.shape[-1]), dtype=dtype)
    for i, r0 in enumerate(range(0, n_q, block_q)):
        r1 = min(r0 + block_q, n_q)
        q_i = q[r0:r1]  # load a block of queries (line 4 of Dao 2023, algorithm 1)
        # With a causal mask, key blocks wholly in the future are skipped, not computed.
        for j, (c0, c1) in enumerate(key_blocks(n_k, block_k, r1 - 1, causal)):
            s = (q_i @ k[c0:c1].T) * scale  # line 8: one tile of scores
            allowed = np.ones(s.shape, dtype=bool) if mask is None else mask[r0:r1, c0:c1]
            if causal:
                allowed = allowed & (np.arange(c0, c1)[None, :] <= np.arange(r0, r1)[:, None])
            s = np.where(allowed, s, -np.inf)
            m[r0:r1], l[r0:r1], acc[r0:r1] = online_softmax_step(m[r0:r1], l[r0:r1], acc[r0:r1], s, v[c0:c1])
            if keep:
                yield i, j, (r0, r1), (c0, c1), s, m.copy(), l.copy(), acc.copy()
    yield m, l, acc


def _finish(m, l, acc):
    safe = np.where(l > 0, l, 1.0)
    output = np.where((l > 0)[:, None], acc / safe[:, None], 0.0)
    with np.errstate(divide="ignore"):
        lse = np.where(l > 0, m + np.log(safe), -np.inf)
    return output, lse


def tiled_attention(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    mask: np.ndarray | None = None,
    causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
    trace: bool = False,
) -> TiledAttention:
    """Exact attention, tile by tile, as FlashAttention computes it (Dao 2023, algorithm 1).

    Shapes: q (tgt_len, d_k); k (src_len, d_k); v (src_len, d_v); mask bool, broadcastable
    to (tgt_len, src_len). Raises ValueError on shapes or block sizes that do not fit.
    """
    q, k, v = (np.asarray(a) for a in (q, k, v))
    if q.ndim != 2 or k.ndim != 2 or v.ndim != 2:
        raise ValueError(
            f"the NumPy path takes one sequence: queries (tgt_len, d_k), keys (src_len, d_k), values "
            f"(src_len, d_v); got queries {q.shape}, keys {k.shape}, values {v.shape}. "
            f"For batches use attncourse.functional.flash_attention (torch)"
        )
    validate_attention_shapes(q.shape, k.shape, v.shape, None if mask is None else np.shape(mask))
    validate_block_sizes(block_q, block_k)
    if mask is not None:
        mask = np.broadcast_to(np.asarray(mask, dtype=bool), (q.shape[0], k.shape[0]))
    steps = []
    for item in _tiles(q, k, v, mask, causal, int(block_q), int(block_k), trace):
        if len(item) == 3:
            m, l, acc = item
            break
        i, j, rows, cols, s, m_now, l_now, acc_now = item
        partial, _ = _finish(m_now, l_now, acc_now)
        steps.append(TileStep(i, j, rows, cols, s, m_now, l_now, partial))
    output, lse = _finish(m, l, acc)
    return TiledAttention(output, lse, steps, int(block_q), int(block_k), k.shape[0])


def weights_from_lse(q: np.ndarray, k: np.ndarray, lse: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Weights ``exp(Q K^T / sqrt(d_k) - L)``, (tgt_len, src_len), from lse (tgt_len,)."""
    s = (np.asarray(q) @ np.asarray(k).T) / np.sqrt(np.shape(k)[-1])
    allowed = np.isfinite(lse)[:, None] & (True if mask is None else np.asarray(mask, dtype=bool))
    return np.where(allowed, np.exp(s - np.where(np.isfinite(lse), lse, 0.0)[:, None]), 0.0)


@dataclass(frozen=True)
class OnlineSoftmaxTrace:
    """One query's online softmax, block by block; output (n_steps, d_v)."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    blocks: list[tuple[int, int]]
    scores: list[np.ndarray]
    running_max: np.ndarray
    normaliser: np.ndarray
    output: np.ndarray
    lse: float


def online_softmax_trace(
    q: np.ndarray, k: np.ndarray, v: np.ndarray, block_size: int, mask: np.ndarray | None = None
) -> OnlineSoftmaxTrace:
    """One query's weighted sum of values, one block of keys at a time (Milakov 2018, alg. 3).

    Shapes: q (d_k,); k (src_len, d_k); v (src_len, d_v); mask (src_len,) bool. Raises
    ValueError if the shapes do not fit or ``block_size`` is below 1.
    """
    q = np.asarray(q)
    if q.ndim != 1:
        raise ValueError(f"online_softmax_trace takes one query (d_k,), got shape {q.shape}")
    row_mask = None if mask is None else np.asarray(mask, dtype=bool)[None, :]
    result = tiled_attention(q[None, :], k, v, mask=row_mask, block_q=1, block_k=block_size, trace=True)
    steps = result.steps
    return OnlineSoftmaxTrace(
        q=q, k=np.asarray(k), v=np.asarray(v),
        blocks=[step.cols for step in steps],
        scores=[step.scores[0] for step in steps],
        running_max=np.array([step.m[0] for step in steps]),
        normaliser=np.array([step.l[0] for step in steps]),
        output=np.stack([step.output[0] for step in steps]),
        lse=float(result.lse[0]),
    )


__all__ = [
    "OnlineSoftmaxTrace",
    "TileStep",
    "TiledAttention",
    "online_softmax_step",
    "online_softmax_trace",
    "tiled_attention",
    "weights_from_lse",
]
