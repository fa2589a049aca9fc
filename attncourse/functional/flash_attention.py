"""FlashAttention in PyTorch: the tiled forward and the recomputing backward, batched.

Source: Dao (2023), "FlashAttention-2", algorithms 1 and 2.
"""

from __future__ import annotations

import math

import torch

from attncourse.functional.tiled_attention import key_blocks, validate_block_sizes
from attncourse.functional.torch_attention import _as_mask
from attncourse.functional.validation import validate_attention_shapes


def _tile_allowed(mask, causal, r0, r1, c0, c1, device) -> torch.Tensor | None:
    """The boolean ``(..., rows, cols)`` tile that may be attended, or None (all of it)."""
    allowed = None if mask is None else mask[..., r0:r1, c0:c1]
    if causal:
        future = torch.arange(c0, c1, device=device)[None, :] > torch.arange(r0, r1, device=device)[:, None]
        allowed = ~future if allowed is None else allowed & ~future
    return allowed


def _forward(q, k, v, mask, causal, block_q, block_k, scale):
    """Tiled forward: the output ``(..., tgt_len, d_v)`` and ``L (..., tgt_len)``."""
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
    """Tiled backward, recomputing each tile of weights from ``L``."""
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
    """Tiled attention whose backward recomputes the weights instead of storing them."""

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
    """Exact attention, tile by tile, with a backward that recomputes the weights (Dao 2023).

    Shapes: query (..., tgt_len, d_k); key (..., src_len, d_k); value (..., src_len, d_v);
    mask bool, broadcastable to (..., tgt_len, src_len). Returns (..., tgt_len, d_v), and
    lse (..., tgt_len) with ``return_lse``. Raises ValueError on shapes or block sizes
    that do not fit; TypeError if the mask is not boolean.
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
