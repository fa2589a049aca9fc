"""Scaled dot-product attention in PyTorch, batched and differentiable.

The same maths as :mod:`attncourse.functional.numpy_attention`, written for
tensors with any number of leading batch dimensions. Masks use the course
convention: ``True`` means *may attend* (the same as the boolean ``attn_mask``
of ``torch.nn.functional.scaled_dot_product_attention``, and the opposite of
``key_padding_mask`` in ``torch.nn.MultiheadAttention``).

References
----------
Vaswani et al. (2017), "Attention Is All You Need", section 3.2.1, equation (1).
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
    """Softmax over ``dim`` where masked entries get exactly zero weight.

    Parameters
    ----------
    logits : (..., tgt_len, src_len)
        Scaled alignment scores.
    mask : bool tensor broadcastable to ``logits``, optional
        ``True`` where an entry may receive weight.
    dim : int
        The key axis.

    Returns
    -------
    Tensor, same shape as ``logits``
        Weights summing to 1 along ``dim``; a fully masked row is all zeros,
        and its gradient is zero, never NaN.
    """
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
    """Batched scaled dot-product attention that also returns the weights.

    Parameters
    ----------
    query : (..., tgt_len, d_k)
    key : (..., src_len, d_k)
    value : (..., src_len, d_v)
    mask : bool tensor broadcastable to (..., tgt_len, src_len), optional
        ``True`` where a query may attend to a key. For a key padding mask of
        shape ``(batch, src_len)`` pass ``mask[:, None, :]``.

    Returns
    -------
    output : (..., tgt_len, d_v)
        Context vectors; zero for a query that may attend to nothing.
    weights : (..., tgt_len, src_len)
        Attention weights, rows summing to 1 (0 for fully masked rows).

    Raises
    ------
    ValueError
        If the shapes do not fit; the message names both shapes.
    TypeError
        If the mask is not boolean.

    References
    ----------
    Vaswani et al. (2017), section 3.2.1, equation (1).
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
    """Batched self-attention with every intermediate kept (matrix form).

    Parameters
    ----------
    x : (..., seq_len, d_model)
        Input embeddings; any number of leading batch dimensions.
    w_q, w_k : (d_model, d_k)
    w_v : (d_model, d_v)
    mask : bool tensor broadcastable to (..., seq_len, seq_len), optional
        ``True`` where query i may attend to key j.

    Returns
    -------
    SelfAttentionTrace
        Fields hold tensors with the batch dimensions in front, e.g.
        ``weights: (..., seq_len, seq_len)``,
        ``weighted_values: (..., seq_len, seq_len, d_v)``.

    Raises
    ------
    ValueError
        If a projection or the mask does not fit ``x``.

    References
    ----------
    Vaswani et al. (2017), section 3.2.1, equation (1).
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
