"""What every decoder attention shares: call checks, allowed keys, kv heads, attend.

Source: Vaswani et al. (2017), eq. (1), section 3.2.3; Ainslie et al. (2023), 2.2.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attncourse.functional.sparse_masks import validate_sliding_window
from attncourse.functional.torch_attention import masked_softmax


def validate_call(mask: torch.Tensor | None, positions: torch.Tensor | None, batch: int, num_heads: int,
               seq_len: int, offset: int, device) -> torch.Tensor:
    """Check a call's ``mask`` and ``positions`` (``ValueError``); return positions."""
    if mask is not None:
        validate_mask(mask, (batch, num_heads, seq_len, offset + seq_len))
    return validate_positions(positions, seq_len, offset, device)


def validate_positions(positions: torch.Tensor | None, seq_len: int, offset: int, device) -> torch.Tensor:
    """``positions``, checked ``(seq_len,)`` ints, or ``offset + arange(seq_len)``."""
    if positions is None:
        return torch.arange(offset, offset + seq_len, device=device)
    if (not isinstance(positions, torch.Tensor) or positions.shape != (seq_len,)
            or positions.is_floating_point() or positions.is_complex() or positions.dtype == torch.bool):
        shape = tuple(positions.shape) if isinstance(positions, torch.Tensor) else type(positions).__name__
        raise ValueError(f"positions must be a (seq_len={seq_len},) integer tensor, got {shape}")
    return positions.to(device)


def validate_mask(mask: torch.Tensor, scores_shape: tuple[int, ...]) -> None:
    """Raise ``ValueError`` unless bool ``mask`` broadcasts to ``scores_shape``."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        kind = mask.dtype if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"mask must be a bool tensor (True = may attend), got {kind}")
    try:
        broadcast = torch.broadcast_shapes(mask.shape, scores_shape)
    except RuntimeError:
        broadcast = None
    if broadcast != torch.Size(scores_shape):
        raise ValueError(f"mask {tuple(mask.shape)} does not broadcast to the scores' shape "
                         f"(batch, num_heads, seq_len, cache_len + seq_len) = {scores_shape}")


def repeat_kv(x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """``(batch, num_kv_heads, seq_len, d)`` -> ``(batch, num_heads, seq_len, d)``.

    Query head i reads kv head ``i // group``; ``ValueError`` unless the heads divide.
    """
    if x.dim() != 4 or num_heads % x.shape[1] != 0:
        raise ValueError(
            f"repeat_kv needs (batch, num_kv_heads, seq_len, d) with num_heads={num_heads} a multiple of "
            f"num_kv_heads, got {tuple(x.shape)}"
        )
    group = num_heads // x.shape[1]
    return x if group == 1 else x.repeat_interleave(group, dim=1)


def allowed_keys(tgt_len: int, src_len: int, causal: bool = True, window: int | None = None,
                 device=None) -> torch.Tensor | None:
    """Bool ``(tgt_len, src_len)``, True = may attend, or None when every key is.

    Queries are the last ``tgt_len`` positions; ``window`` as in
    :func:`sliding_window_mask`. Raises ``ValueError`` for a bad window.
    """
    if window is not None:
        window = validate_sliding_window(window, causal)
        reach = window - 1 if causal else (window - 1) // 2  # largest |i - j| allowed
        if reach >= src_len - 1:
            window = None  # the window holds every key
    if (not causal or tgt_len <= 1) and window is None:
        return None  # one query at the last position may see every key, as may a query without a mask
    query_pos = torch.arange(tgt_len, device=device)[:, None] + (src_len - tgt_len)
    key_pos = torch.arange(src_len, device=device)[None, :]
    allowed = torch.ones(tgt_len, src_len, dtype=torch.bool, device=device)
    if causal:
        allowed &= key_pos <= query_pos
    if window is not None:
        allowed &= (query_pos - key_pos).abs() <= reach
    return allowed


def softmax_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None,
                   bias: torch.Tensor | None = None, scale: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``softmax(q k^T * scale + bias) v`` over allowed keys; default scale 1/sqrt(d).

    ``q (batch, h, n, d)``, ``k, v (batch, g, m, d)`` (g divides h) -> heads ``(batch,
    h, n, d_v)``, weights ``(batch, h, n, m)`` (a query with no allowed key: zeros).
    """
    k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])
    scores = q @ k.transpose(-2, -1)
    # Divided, not multiplied by 1 / sqrt(d): the trained models' numbers were computed this way.
    scores = scores / math.sqrt(q.shape[-1]) if scale is None else scores * scale
    if bias is not None:
        scores = scores + bias
    weights = masked_softmax(scores, allowed)
    return weights @ v, weights


def sdpa_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None,
                bias: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
    """:func:`softmax_attend`'s heads via SDPA; ``is_causal``: the causal mask."""
    # Without a bias SDPA shares the kv heads itself (enable_gqa), reading each one once;
    # with ALiBi's float bias the heads are expanded first.
    if bias is not None:
        k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])
    gqa = k.shape[1] != q.shape[1]
    if bias is None and (allowed is None or is_causal):
        return F.scaled_dot_product_attention(q, k, v, is_causal=is_causal and allowed is not None,
                                              enable_gqa=gqa)
    if allowed is None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    # A row with no allowed key (e.g. a left-padding query) attends everywhere, then is zeroed.
    fully_masked = ~allowed.any(dim=-1, keepdim=True)
    allowed = allowed | fully_masked
    attn_mask = allowed if bias is None else bias.masked_fill(~allowed, float("-inf"))
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, enable_gqa=gqa)
    return out.masked_fill(fully_masked, 0.0)


def dot_product_attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None,
                       bias: torch.Tensor | None = None, *, need_weights: bool = False, fast: bool = True,
                       is_causal: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Default attend: :func:`sdpa_attend`; :func:`softmax_attend` for weights."""
    if need_weights or not fast:
        return softmax_attend(q, k, v, allowed, bias)
    return sdpa_attend(q, k, v, allowed, bias, is_causal), None


__all__ = ["allowed_keys", "validate_call", "validate_mask", "validate_positions", "dot_product_attend", "repeat_kv",
           "sdpa_attend", "softmax_attend"]
