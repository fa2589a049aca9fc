"""The course's masks and score-only variants through FlexAttention.

FlexAttention (``torch.nn.attention.flex_attention``) takes an attention variant as two
small functions: a ``mask_mod(b, h, q_idx, kv_idx)`` saying which keys a query may see
and a ``score_mod(score, b, h, q_idx, kv_idx)`` changing a scaled score. Eager, it computes
the scores densely (this CPU runs it so, forward only); compiled, it fuses them into one
tiled kernel that skips the tiles a block mask marks empty.

A score-only variant of the course (one that overrides
:meth:`~attncourse.nn.causal_attention.CausalSelfAttention.attend` to change the scores
alone) runs here once it declares the same change as a ``score_mod`` method:
:func:`use_flex` routes its ``attend`` through :func:`flex_heads`.

Source: Dong et al. (2025), "FlexAttention: A Programming Model for Generating Fused
Attention Variants", MLSys 2025 (arXiv:2412.05496): score_mod, mask_mod and
BlockMask.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator

import torch
from torch import nn
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
ScoreMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def mask_mod_from_allowed(allowed: torch.Tensor) -> MaskMod:
    """A ``mask_mod`` reading a dense bool mask, True = may attend.

    ``allowed``: ``(tgt_len, src_len)`` or ``(batch, 1, tgt_len, src_len)``. Raises
    ``ValueError`` for another shape or a dtype other than bool.
    """
    if allowed.dtype != torch.bool or allowed.dim() not in (2, 4) or (allowed.dim() == 4 and allowed.shape[1] != 1):
        raise ValueError(f"allowed must be a bool (tgt_len, src_len) or (batch, 1, tgt_len, src_len) tensor, "
                         f"got {tuple(allowed.shape)} {allowed.dtype}")
    if allowed.dim() == 2:
        return lambda b, h, q_idx, kv_idx: allowed[q_idx, kv_idx]
    return lambda b, h, q_idx, kv_idx: allowed[b, 0, q_idx, kv_idx]


def flex_heads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None = None,
               score_mod: ScoreMod | None = None, block_size: int = 128) -> torch.Tensor:
    """``softmax(score_mod(q k^T / sqrt(d_k)))`` over the allowed keys, times ``v``, by FlexAttention.

    ``q (batch, h, tgt_len, d_k)``, ``k, v (batch, g, src_len, d_k)`` with ``g`` dividing
    ``h`` (grouped-query heads shared, not copied); ``allowed`` as
    :func:`mask_mod_from_allowed`, or None for every key. Returns the heads ``(batch, h,
    tgt_len, d_v)``; a query with no allowed key gets zeros, as in the course's
    :func:`~attncourse.functional.torch_attention.masked_softmax`. Raises ``ValueError``
    for heads that do not divide.
    """
    if q.dim() != 4 or k.dim() != 4 or q.shape[1] % k.shape[1]:
        raise ValueError(f"q (batch, h, tgt_len, d) and k (batch, g, src_len, d) need g dividing h, "
                         f"got {tuple(q.shape)} and {tuple(k.shape)}")
    block_mask = None
    if allowed is not None:
        mask_mod = mask_mod_from_allowed(allowed)
        batch = None if allowed.dim() == 2 else allowed.shape[0]
        block_mask = create_block_mask(mask_mod, batch, None, q.shape[2], k.shape[2], device=q.device,
                                       BLOCK_SIZE=block_size)
    heads = flex_attention(q, k, v, score_mod=score_mod, block_mask=block_mask,
                           scale=1 / math.sqrt(q.shape[-1]), enable_gqa=k.shape[1] != q.shape[1])
    if allowed is None:
        return heads
    # Flex's rows with no allowed key are zeros already; said here, not left to its version.
    empty = ~allowed.any(dim=-1, keepdim=True)
    return heads.masked_fill(empty if allowed.dim() == 4 else empty[None, None], 0.0)


def _flex_attend(module: nn.Module) -> Callable[..., tuple[torch.Tensor, torch.Tensor | None]]:
    """``module.attend`` through :func:`flex_heads` with ``module.score_mod`` (and its bias)."""
    own = module.attend

    def attend(q, k, v, allowed, bias, *, need_weights=False, fast=True, is_causal=False,
               query_positions=None, key_positions=None):
        if need_weights or not fast:  # flex gives no weights: the written-out path does
            return own(q, k, v, allowed, bias, need_weights=need_weights, fast=fast, is_causal=is_causal,
                       query_positions=query_positions, key_positions=key_positions)
        if bias is None:
            score_mod = module.score_mod
        else:  # ALiBi's (h, tgt_len, src_len) bias, added after the variant's change
            def score_mod(score, b, h, q_idx, kv_idx):
                return module.score_mod(score, b, h, q_idx, kv_idx) + bias[h, q_idx, kv_idx]
        return flex_heads(q, k, v, allowed, score_mod), None

    return attend


@contextlib.contextmanager
def use_flex(model: nn.Module) -> Iterator[int]:
    """Inside, every attention of ``model`` with a ``score_mod`` method attends by FlexAttention.

    Yields how many modules were routed (0: no score-only variant in the model). Calls
    that ask for the weights keep the module's own path. Their ``attend`` is put back on
    exit, also after an error.
    """
    routed = [m for m in model.modules() if callable(getattr(m, "score_mod", None)) and hasattr(m, "attend")]
    for module in routed:
        module.attend = _flex_attend(module)
    try:
        yield len(routed)
    finally:
        for module in routed:
            del module.attend  # the instance attribute: the class's attend shows again


__all__ = ["MaskMod", "ScoreMod", "flex_heads", "mask_mod_from_allowed", "use_flex"]
