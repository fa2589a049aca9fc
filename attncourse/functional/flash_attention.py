"""FlashAttention in PyTorch: the tiled forward and the recomputing backward, batched.

The same algorithm as the NumPy teaching path :mod:`attncourse.functional.tiled_attention`
(online softmax over blocks of keys, one query block at a time), written for tensors with
leading batch dimensions, plus the backward pass as an ``torch.autograd.Function``:
the forward saves only the output O and the log-sum-exp ``L`` of each row, never the
``(tgt_len, src_len)`` weights, and the backward rebuilds each tile of weights as
``P = exp(S - L)`` from Q and K (Dao 2023, algorithm 2). It is written with Python loops
over tiles of ordinary tensor operations: it shows the algorithm and its memory, not the
speed of a fused GPU kernel (that is ``torch.nn.functional.scaled_dot_product_attention``).

References
----------
Dao, Fu, Ermon, Rudra, Ré (2022), "FlashAttention: Fast and Memory-Efficient Exact
Attention with IO-Awareness", algorithms 1-2 and appendix B.
Dao (2023), "FlashAttention-2", algorithm 1 (forward) and algorithm 2 (backward).
"""

from __future__ import annotations

import math

import torch

from attncourse.functional.tiled_attention import key_blocks, validate_block_sizes
from attncourse.functional.torch_attention import _as_mask
from attncourse.functional.validation import validate_attention_shapes


def _tile_allowed(mask, causal, r0, r1, c0, c1, device) -> torch.Tensor | None:
    """The boolean ``(..., rows, cols)`` tile of what may be attended, or None (everything)."""
    allowed = None if mask is None else mask[..., r0:r1, c0:c1]
    if causal:
        future = torch.arange(c0, c1, device=device)[None, :] > torch.arange(r0, r1, device=device)[:, None]
        allowed = ~future if allowed is None else allowed & ~future
    return allowed


def _forward(q, k, v, mask, causal, block_q, block_k, scale):
    """Tiled forward pass: returns the output ``(..., tgt_len, d_v)`` and ``L (..., tgt_len)``."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    out = torch.empty(*q.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
    lse = torch.empty(q.shape[:-1], dtype=q.dtype, device=q.device)
    for r0 in range(0, n_q, block_q):
        r1 = min(r0 + block_q, n_q)
        q_i = q[..., r0:r1, :]
        m = torch.full(q_i.shape[:-1], float("-inf"), dtype=q.dtype, device=q.device)
        l = torch.zeros_like(m)
        acc = torch.zeros(*q_i.shape[:-1], v.shape[-1], dtype=q.dtype, device=q.device)
        for c0, c1 in key_blocks(n_k, block_k, r1 - 1, causal):
            s = (q_i @ k[..., c0:c1, :].transpose(-2, -1)) * scale
            allowed = _tile_allowed(mask, causal, r0, r1, c0, c1, q.device)
            if allowed is not None:
                s = s.masked_fill(~allowed, float("-inf"))
            m_new = torch.maximum(m, s.amax(dim=-1))
            shift = torch.where(torch.isfinite(m_new), m_new, torch.zeros_like(m_new))
            p = torch.exp(s - shift[..., None])
            alpha = torch.exp(m - shift)
            l = alpha * l + p.sum(dim=-1)
            acc = alpha[..., None] * acc + p @ v[..., c0:c1, :]
            m = m_new
        seen = l > 0
        safe = torch.where(seen, l, torch.ones_like(l))
        out[..., r0:r1, :] = torch.where(seen[..., None], acc / safe[..., None], torch.zeros_like(acc))
        lse[..., r0:r1] = torch.where(seen, m + torch.log(safe), torch.full_like(m, float("-inf")))
    return out, lse


def _backward(q, k, v, out, lse, grad_out, mask, causal, block_q, block_k, scale):
    """Tiled backward pass, recomputing each tile of weights from ``L`` (Dao 2023, algorithm 2)."""
    n_q, n_k = q.shape[-2], k.shape[-2]
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    delta = (grad_out * out).sum(dim=-1)  # D_i = rowsum(dO_i * O_i), line 4
    finite = torch.isfinite(lse)
    lse_safe = torch.where(finite, lse, torch.zeros_like(lse))
    for r0 in range(0, n_q, block_q):
        r1 = min(r0 + block_q, n_q)
        q_i, do_i = q[..., r0:r1, :], grad_out[..., r0:r1, :]
        for c0, c1 in key_blocks(n_k, block_k, r1 - 1, causal):
            s = (q_i @ k[..., c0:c1, :].transpose(-2, -1)) * scale
            allowed = finite[..., r0:r1, None]
            tile = _tile_allowed(mask, causal, r0, r1, c0, c1, q.device)
            if tile is not None:
                allowed = allowed & tile
            p = torch.where(allowed, torch.exp(s - lse_safe[..., r0:r1, None]), torch.zeros_like(s))  # line 11
            dv[..., c0:c1, :] += p.transpose(-2, -1) @ do_i  # line 12
            dp = do_i @ v[..., c0:c1, :].transpose(-2, -1)  # line 13
            ds = p * (dp - delta[..., r0:r1, None])  # line 14
            dq[..., r0:r1, :] += (ds @ k[..., c0:c1, :]) * scale  # line 15
            dk[..., c0:c1, :] += (ds.transpose(-2, -1) @ q_i) * scale  # line 16
    return dq, dk, dv


class FlashAttentionFunction(torch.autograd.Function):
    """Tiled attention whose backward recomputes the weights instead of storing them.

    ``FlashAttentionFunction.apply(q, k, v, mask, causal, block_q, block_k)`` with the
    shapes of :func:`flash_attention` (mask already a bool tensor broadcast to
    ``(..., tgt_len, src_len)``, or None); returns the output and ``L`` (no gradient).
    Saved for backward: q, k, v, the output and
    ``L`` of each row, O(n d) numbers instead of the O(n^2) weights.
    """

    @staticmethod
    def forward(ctx, q, k, v, mask, causal, block_q, block_k):
        scale = 1.0 / math.sqrt(q.shape[-1])
        out, lse = _forward(q, k, v, mask, causal, block_q, block_k, scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mask, ctx.settings = mask, (causal, block_q, block_k, scale)
        ctx.mark_non_differentiable(lse)
        return out, lse

    @staticmethod
    def backward(ctx, grad_out, _grad_lse):
        q, k, v, out, lse = ctx.saved_tensors
        causal, block_q, block_k, scale = ctx.settings
        dq, dk, dv = _backward(q, k, v, out, lse, grad_out, ctx.mask, causal, block_q, block_k, scale)
        return dq, dk, dv, None, None, None, None


def flash_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    is_causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
    return_lse: bool = False,
):
    """Exact scaled dot-product attention computed tile by tile, with a memory-light backward.

    Parameters
    ----------
    query : (..., tgt_len, d_k)
    key : (..., src_len, d_k)
    value : (..., src_len, d_v)
        The leading (batch, head) dimensions of the three must be equal.
    mask : bool tensor broadcastable to (..., tgt_len, src_len), optional
        ``True`` where a query may attend to a key (a key padding mask ``(batch, src_len)``
        goes in as ``mask[:, None, :]``).
    is_causal : bool
        Query i sees keys j <= i (top-left alignment, as in
        ``torch.nn.functional.scaled_dot_product_attention``); future key blocks are skipped.
    block_q, block_k : int
        B_r and B_c, rows of queries and keys per tile; any positive sizes (the last block
        may be shorter). They change the memory held at once (``block_q * block_k`` scores
        per batch entry) and the number of passes over K and V (``ceil(tgt_len / block_q)``),
        not the result.
    return_lse : bool
        Also return ``L (..., tgt_len)``, the log-sum-exp of each row (``-inf`` for a fully
        masked row); it carries no gradient.

    Returns
    -------
    output : (..., tgt_len, d_v)
        Equal to ``softmax(Q K^T / sqrt(d_k)) V``; zero for a query that may attend to
        nothing (where SDPA gives NaN). Differentiable through :class:`FlashAttentionFunction`.
    lse : (..., tgt_len), only with ``return_lse``

    Raises
    ------
    ValueError
        If the shapes do not fit (the message names both), the batch dimensions differ,
        or a block size is not a positive integer.
    TypeError
        If the mask is not boolean.

    References
    ----------
    Dao (2023), "FlashAttention-2", algorithms 1 and 2; Dao et al. (2022), algorithm 1.
    """
    validate_block_sizes(block_q, block_k)
    mask = _as_mask(mask, query.device)
    scores = validate_attention_shapes(query.shape, key.shape, value.shape, None if mask is None else tuple(mask.shape))
    if query.ndim < 2 or query.shape[:-2] != key.shape[:-2]:
        raise ValueError(
            f"queries {tuple(query.shape)} and keys {tuple(key.shape)} must have the same leading "
            f"(batch, head) dimensions"
        )
    if mask is not None:
        mask = mask.broadcast_to(scores)  # a view: no (tgt_len, src_len) copy per batch entry
    out, lse = FlashAttentionFunction.apply(query, key, value, mask, bool(is_causal), int(block_q), int(block_k))
    return (out, lse) if return_lse else out


__all__ = ["FlashAttentionFunction", "flash_attention"]
