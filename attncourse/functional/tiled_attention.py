"""FlashAttention's tiled forward pass in NumPy, one tile at a time: the teaching path.

Exact attention ``softmax(Q K^T / sqrt(d_k)) V`` computed without ever holding the
``(tgt_len, src_len)`` matrix of scores: queries are cut into blocks of ``block_q`` rows,
keys and values into blocks of ``block_k`` rows, and each query block walks over the key
blocks keeping three running quantities per query row:

- ``m``, the largest scaled score seen so far (the running maximum);
- ``l``, the sum of ``exp(score - m)`` over the keys seen so far (the running normaliser);
- ``acc``, the sum of ``exp(score - m) * v`` over the same keys (the unnormalised output).

The first two are the online softmax of Milakov & Gimelshein (2018, algorithm 3), which
computes a softmax's normaliser in one pass; rescaling the partial output ``acc`` along with
them is Rabe & Staats (2021, section 3) and FlashAttention (Dao et al. 2022).

A new block of scores ``s`` updates them as FlashAttention-2 does (Dao 2023, algorithm 1,
lines 8-10): ``m' = max(m, rowmax(s))``, ``l' = exp(m - m') l + rowsum(exp(s - m'))``,
``acc' = exp(m - m') acc + exp(s - m') V_j``; after the last block the output is
``acc / l`` and the log-sum-exp ``L = m + log(l)`` is kept for the backward pass (line 13).
The result equals the textbook formula up to rounding.

The block sizes change nothing in the result; they set how much is held at once
(``block_q x block_k`` scores, instead of ``tgt_len x src_len``) and, on a GPU, how many
times K and V are read from memory (once per query block). Masks follow the course's
convention, ``True`` = may attend; a query with no allowed key gets a zero output and
``L = -inf``. The batched torch version is :mod:`attncourse.functional.flash_attention`.

References
----------
Milakov, Gimelshein (2018), "Online normalizer calculation for softmax", algorithm 3.
Rabe, Staats (2021), "Self-attention Does Not Need O(n^2) Memory", section 3.
Dao, Fu, Ermon, Rudra, Ré (2022), "FlashAttention", algorithm 1.
Dao (2023), "FlashAttention-2", algorithm 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from attncourse.functional.validation import validate_attention_shapes


def online_softmax_step(
    m: np.ndarray, l: np.ndarray, acc: np.ndarray, scores: np.ndarray, v_block: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Fold one block of scaled scores into the running max, normaliser and output.

    Parameters
    ----------
    m : (rows,)
        Running maximum of the scaled scores seen so far; ``-inf`` before any key.
    l : (rows,)
        Running normaliser, sum of ``exp(score - m)``; 0 before any key.
    acc : (rows, d_v)
        Running unnormalised output, sum of ``exp(score - m) * v``; 0 before any key.
    scores : (rows, block)
        The new block's scaled scores, ``-inf`` where masked.
    v_block : (block, d_v)
        The values of the block's keys.

    Returns
    -------
    m, l, acc
        The updated quantities, same shapes. A row whose scores are all ``-inf`` so far
        keeps ``m = -inf``, ``l = 0``, ``acc = 0`` (never NaN).

    References
    ----------
    Dao (2023), "FlashAttention-2", algorithm 1, lines 8-10; Milakov & Gimelshein
    (2018), algorithm 3.
    """
    m_new = np.maximum(m, scores.max(axis=-1, initial=-np.inf))
    shift = np.where(np.isfinite(m_new), m_new, 0.0)  # a row with nothing yet shifts by 0
    p = np.exp(scores - shift[:, None])  # exp(-inf) = 0 on masked keys
    alpha = np.exp(m - shift)  # rescales what was summed under the old max; 0 when m = -inf
    return m_new, alpha * l + p.sum(axis=-1), alpha[:, None] * acc + p @ v_block


@dataclass(frozen=True)
class TileStep:
    """The state after one tile (a query block against a key block) has been folded in.

    Attributes
    ----------
    q_block, k_block : int
        Indices of the query block and of the key block of this tile.
    rows, cols : tuple of int
        ``(start, stop)`` of the tile's query rows and key columns.
    scores : (rows, cols)
        The tile's scaled scores, ``-inf`` where masked: all the scores this step sees.
    m, l : (tgt_len,)
        Running maximum and normaliser of every query row (``-inf`` and 0 for rows not
        reached yet or with no allowed key so far).
    output : (tgt_len, d_v)
        The partial output ``acc / l`` of every row (0 where ``l = 0``): the exact output
        once a row's last key block is in.
    """

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
    """The result of the tiled forward pass.

    Attributes
    ----------
    output : (tgt_len, d_v)
        The context vectors, equal to ``softmax(Q K^T / sqrt(d_k)) V``.
    lse : (tgt_len,)
        Log-sum-exp of each row's scaled scores, ``L = m + log(l)`` (``-inf`` for a
        fully masked row): all the backward pass needs to rebuild the weights.
    steps : list of TileStep
        One entry per tile computed, in order (empty unless a trace was asked for).
    block_q, block_k : int
        The block sizes used.
    src_len : int
        The number of keys.
    """

    output: np.ndarray
    lse: np.ndarray
    steps: list[TileStep]
    block_q: int
    block_k: int
    src_len: int


def validate_block_sizes(block_q: int, block_k: int) -> None:
    """Raise ``ValueError`` naming ``block_q`` or ``block_k`` if it is not a positive integer."""
    for name, size in (("block_q", block_q), ("block_k", block_k)):
        if int(size) != size or size < 1:
            raise ValueError(f"{name} must be a positive integer, got {size!r}")


def key_blocks(src_len: int, block_k: int, last_row: int, causal: bool) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` of each key block that a query block ending at row ``last_row`` visits.

    With ``causal``, the walk stops at the first block wholly after ``last_row``: every key
    from there on lies in the future of every query of the block (top-left alignment).
    """
    for start in range(0, src_len, block_k):
        if causal and start > last_row:
            return
        yield start, min(start + block_k, src_len)


def _tiles(q, k, v, mask, causal, block_q, block_k, keep) -> Iterator[tuple]:
    """Run the tiled forward pass, yielding ``(i, j, rows, cols, scores, m, l, acc)`` per tile
    when ``keep`` (a trace) and the final ``(m, l, acc)`` at the end."""
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
    """Exact scaled dot-product attention, tile by tile, as FlashAttention computes it.

    Parameters
    ----------
    q : (tgt_len, d_k)
        Queries.
    k : (src_len, d_k)
        Keys.
    v : (src_len, d_v)
        Values.
    mask : bool array broadcastable to (tgt_len, src_len), optional
        ``True`` where a query may attend to a key.
    causal : bool
        Also forbid keys after the query (query i sees keys j <= i, the top-left
        alignment of ``torch.nn.functional.scaled_dot_product_attention(is_causal=True)``);
        key blocks that lie wholly in the future are skipped, not computed.
    block_q, block_k : int
        Rows of queries and of keys per tile, B_r and B_c in the papers (need not divide
        the lengths: the last block is shorter). They set the memory held at once,
        ``block_q * block_k`` scores, never the result.
    trace : bool
        Keep a :class:`TileStep` per tile in ``steps`` (copies of the running state:
        for small inputs only).

    Returns
    -------
    TiledAttention
        ``output (tgt_len, d_v)``, ``lse (tgt_len,)`` and, with ``trace``, the steps.

    Raises
    ------
    ValueError
        If the shapes do not fit (the message names both) or a block size is not a
        positive integer.

    References
    ----------
    Dao (2023), "FlashAttention-2", algorithm 1 (forward pass); Dao et al. (2022),
    algorithm 1; Milakov & Gimelshein (2018), algorithm 3.
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
    """Attention weights rebuilt from the saved log-sum-exp: ``P = exp(Q K^T / sqrt(d_k) - L)``.

    This is what FlashAttention's backward pass does tile by tile instead of storing P
    (Dao 2023, algorithm 2, line 11); here for a whole (small) matrix, to check it.

    Parameters
    ----------
    q : (tgt_len, d_k)
    k : (src_len, d_k)
    lse : (tgt_len,)
        ``L`` from :func:`tiled_attention` (``-inf`` for a fully masked row).
    mask : bool array broadcastable to (tgt_len, src_len), optional

    Returns
    -------
    (tgt_len, src_len)
        The softmax weights; rows sum to 1, fully masked rows are 0.
    """
    s = (np.asarray(q) @ np.asarray(k).T) / np.sqrt(np.shape(k)[-1])
    allowed = np.isfinite(lse)[:, None] & (True if mask is None else np.asarray(mask, dtype=bool))
    return np.where(allowed, np.exp(s - np.where(np.isfinite(lse), lse, 0.0)[:, None]), 0.0)


@dataclass(frozen=True)
class OnlineSoftmaxTrace:
    """The online softmax for one query, one block of keys at a time.

    Attributes
    ----------
    q : (d_k,)
        The query.
    k : (src_len, d_k), v : (src_len, d_v)
        Keys and values.
    blocks : list of (start, stop)
        The key positions of each step.
    scores : list of (stop - start,) arrays
        The scaled scores each step sees: never more than ``block_size`` of them.
    running_max, normaliser : (n_steps,)
        ``m`` and ``l`` after each step.
    output : (n_steps, d_v)
        The running output ``acc / l`` after each step; the last row is the result.
    lse : float
        ``m + log(l)`` after the last step.
    """

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
    """The softmax-weighted sum of values for one query, computed one block of keys at a time.

    The tiled forward pass with a single query row (:func:`tiled_attention` with
    ``block_q = 1``), with its running state kept after every block.

    Parameters
    ----------
    q : (d_k,)
        One query.
    k : (src_len, d_k), v : (src_len, d_v)
        Keys and values.
    block_size : int
        Keys per step (>= 1; need not divide src_len).
    mask : (src_len,) bool, optional
        ``True`` where the query may attend to a key.

    Returns
    -------
    OnlineSoftmaxTrace

    Raises
    ------
    ValueError
        If ``q`` is not one vector, the shapes do not fit, or ``block_size`` is below 1.

    References
    ----------
    Milakov & Gimelshein (2018), algorithm 3 (the running max and normaliser), extended
    to the weighted sum of values as in Rabe & Staats (2021), section 3, and Dao (2023),
    algorithm 1.
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
