"""Scaled dot-product attention in PyTorch, batched and differentiable.

Source: Vaswani et al. (2017), "Attention Is All You Need", section 3.2.1, eq. (1).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from attncourse.functional.numpy_attention import SelfAttentionTrace
from attncourse.functional.validation import (
    validate_attention_shapes,
    validate_projection_shapes,
)


def _as_mask(mask, device: torch.device) -> torch.Tensor | None:
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor):
        mask = np.ascontiguousarray(mask)  # torch cannot wrap NumPy views with negative strides
    mask = torch.as_tensor(mask, device=device)
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be boolean (True = may attend), got dtype {mask.dtype}")
    return mask


def masked_softmax(logits: torch.Tensor, mask: torch.Tensor | None = None, dim: int = -1) -> torch.Tensor:
    """Softmax of logits ``(..., tgt_len, src_len)`` over ``dim``; masked entries get 0."""
    if mask is None:
        return torch.softmax(logits, dim=dim)
    mask = _as_mask(mask, logits.device)
    fully_masked = ~mask.any(dim=dim, keepdim=True)
    # -inf on masked entries; a row with no allowed entry is set to 0 so that
    # softmax sees finite numbers and neither the value nor the gradient is NaN.
    logits = logits.masked_fill(~mask, float("-inf")).masked_fill(fully_masked, 0.0)
    return torch.softmax(logits, dim=dim).masked_fill(~mask, 0.0)


def attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Batched ``softmax(Q K^T / sqrt(d_k)) V`` with its weights (Vaswani et al. 2017, eq. (1)).

    Shapes: query (..., tgt_len, d_k); key (..., src_len, d_k); value (..., src_len, d_v);
    mask bool, broadcastable to (..., tgt_len, src_len). Returns (..., tgt_len, d_v) and
    (..., tgt_len, src_len). Raises ValueError on shapes that do not fit; TypeError if the
    mask is not boolean.
    """
    mask = _as_mask(mask, query.device)
    validate_attention_shapes(query.shape, key.shape, value.shape, None if mask is None else tuple(mask.shape))
    scores = query @ key.transpose(-2, -1) / math.sqrt(key.shape[-1])
    weights = masked_softmax(scores, mask)
    return weights @ value, weights


def self_attention(
    x: torch.Tensor,
    w_q: torch.Tensor,
    w_k: torch.Tensor,
    w_v: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> SelfAttentionTrace:
    """Batched self-attention of x (..., seq_len, d_model), every intermediate kept (eq. (1)).

    Shapes: w_q, w_k (d_model, d_k); w_v (d_model, d_v). Raises ValueError if a
    projection or the mask does not fit ``x``.
    """
    validate_projection_shapes(x.shape, w_q.shape, w_k.shape, w_v.shape)
    mask = _as_mask(mask, x.device)
    q, k, v = x @ w_q, x @ w_k, x @ w_v
    validate_attention_shapes(q.shape, k.shape, v.shape, None if mask is None else tuple(mask.shape))
    scores = q @ k.transpose(-2, -1)
    scaled = scores / math.sqrt(k.shape[-1])
    weights = masked_softmax(scaled, mask)
    weighted = weights.unsqueeze(-1) * v.unsqueeze(-3)
    return SelfAttentionTrace(
        x=x, w_q=w_q, w_k=w_k, w_v=w_v, q=q, k=k, v=v, scores=scores,
        scaled_scores=scaled, weights=weights, weighted_values=weighted,
        output=weighted.sum(dim=-2), mask=mask, query_index=None,
    )
