"""Causal self-attention with g key/value heads for h query heads: MHA, GQA, MQA.

Source: Shazeer (2019), section 3; Ainslie et al. (2023), "GQA", section 2.2.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from attncourse.functional.sparse_masks import validate_sliding_window
from attncourse.nn.alibi import alibi_bias
from attncourse.nn.attend import (  # allowed_keys ... repeat_kv: re-exported, chapters import them from here
    allowed_keys,
    dot_product_attend,
    repeat_kv,
    validate_call,
    validate_mask,
    validate_positions,
)
from attncourse.nn.attention import KVCache, merge_heads, split_heads
from attncourse.nn.protocol import DecoderAttention
from attncourse.nn.registry import register_attention
from attncourse.nn.rope import RopeScaling, apply_rope

#: What ``CausalSelfAttention(positional=...)`` accepts: schemes acting inside attention, or None.
ATTENTION_POSITIONAL: tuple[str | None, ...] = (None, "rope", "alibi")


@dataclass(frozen=True)
class GQAOptions:
    """Options of variant ``"gqa"`` (:class:`CausalSelfAttention`)."""

    # metadata: how train-lm offers each option (attncourse.recipes.lm_config)
    num_kv_heads: int | None = field(default=None, metadata={
        "help": "key/value heads: 1 multi-query, between grouped-query (default: --num-heads)",
        "check": "positive_int", "limit": (1, 64, "memory grows with it"), "metavar": "G"})
    window: int | None = field(default=None, metadata={
        "help": "sliding-window attention over W tokens", "check": "positive_int",
        "limit": (1, 8192, "a window wider than --max-len's ceiling changes nothing"), "metavar": "W"})
    bias: bool = field(default=False, metadata={"help": "biases on the projections W^Q, W^K, W^V, W^O"})


class CausalSelfAttention(nn.Module, DecoderAttention):
    """Self-attention with ``num_heads`` query and ``num_kv_heads`` key/value heads.

    ``positional``: None, ``"rope"`` or ``"alibi"``; ``window``: :func:`allowed_keys`.
    Raises ``ValueError`` for a non-positive size, heads that do not divide, an unknown
    ``positional`` or a bad ``window``. Source: Ainslie et al. (2023), section 2.2.
    """

    def __init__(self, d_model: int, num_heads: int, num_kv_heads: int | None = None,
                 positional: str | None = None, causal: bool = True, window: int | None = None,
                 rope_base: float = 10000.0, bias: bool = False, rope_scaling: RopeScaling | None = None) -> None:
        super().__init__()
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        for name, value in (("d_model", d_model), ("num_heads", num_heads), ("num_kv_heads", num_kv_heads)):
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} must be divisible by num_heads={num_heads}")
        if num_heads % num_kv_heads:
            raise ValueError(f"num_heads={num_heads} must be a multiple of num_kv_heads={num_kv_heads} "
                             f"(each kv head serves a group of query heads)")
        if positional not in ATTENTION_POSITIONAL:
            raise ValueError(f"positional must be one of {ATTENTION_POSITIONAL}, got {positional!r}")
        if window is not None:
            window = validate_sliding_window(window, causal)
        self.d_model, self.num_heads, self.num_kv_heads = int(d_model), int(num_heads), int(num_kv_heads)
        self.d_k = self.d_model // self.num_heads
        if positional == "rope" and self.d_k % 2:
            raise ValueError(f"RoPE rotates feature pairs: d_k = d_model / num_heads = {self.d_k} must be even")
        self.positional, self.causal, self.window = positional, bool(causal), window
        self.rope_base, self.rope_scaling = float(rope_base), rope_scaling
        # What attend() may read; from_options puts a subclass's own options (with more fields) here.
        self.options: GQAOptions = GQAOptions(num_kv_heads, window, bias)
        self.w_q = nn.Linear(d_model, self.num_heads * self.d_k, bias=bias)
        self.w_k = nn.Linear(d_model, self.num_kv_heads * self.d_k, bias=bias)
        self.w_v = nn.Linear(d_model, self.num_kv_heads * self.d_k, bias=bias)
        self.w_o = nn.Linear(self.num_heads * self.d_k, d_model, bias=bias)

    @classmethod
    def from_options(cls, options: GQAOptions, *, d_model: int, num_heads: int, causal: bool,
                     positional: str | None, rope_base: float,
                     rope_scaling: RopeScaling | None = None) -> CausalSelfAttention:
        """Build ``"gqa"`` (or a subclass) from ``options``, kept as :attr:`options`."""
        module = cls(d_model, num_heads, options.num_kv_heads, positional, causal, options.window,
                     rope_base, options.bias, rope_scaling)
        module.options = options
        return module

    def cache_numbers_per_token(self) -> int:
        """Numbers cached per token: a key and a value for each kv head, ``2 g d_k``."""
        return 2 * self.num_kv_heads * self.d_k

    def empty_cache(self, batch: int, dtype: torch.dtype | None = None, device=None) -> KVCache:
        """A :class:`KVCache` with no entries, ``k, v: (batch, num_kv_heads, 0, d_k)``."""
        dtype = self.w_q.weight.dtype if dtype is None else dtype
        device = self.w_q.weight.device if device is None else device
        empty = torch.zeros(batch, self.num_kv_heads, 0, self.d_k, dtype=dtype, device=device)
        return KVCache(k=empty, v=empty.clone())

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, kv_cache: KVCache | None = None,
                need_weights: bool = False, fast: bool = True,
                positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attend from each new position to the cached and the allowed new ones.

        ``x (batch, seq_len, d_model)``; bool ``mask`` (True = may attend) broadcasts to
        ``(batch, num_heads, seq_len, cache_len + seq_len)``; ``kv_cache`` grows in
        place. Returns the output (like ``x``) and the weights (None if ``fast`` and not
        ``need_weights``). Raises ``ValueError`` for a bad shape or dtype.
        """
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (batch, seq_len, d_model={self.d_model}), got {tuple(x.shape)}")
        batch, seq_len, _ = x.shape
        offset = 0 if kv_cache is None else len(kv_cache)
        if kv_cache is not None:
            cached = tuple(kv_cache.k.shape)
            if (len(cached) != 4 or cached[0] != batch or cached[1] != self.num_kv_heads
                    or cached[3] != self.d_k or kv_cache.v.shape != kv_cache.k.shape):
                raise ValueError(f"kv_cache must hold (batch={batch}, num_kv_heads={self.num_kv_heads}, "
                                 f"cache_len, d_k={self.d_k}) keys and values, got keys {cached} "
                                 f"and values {tuple(kv_cache.v.shape)}")
        positions = validate_call(mask, positions, batch, self.num_heads, seq_len, offset, x.device)
        q = split_heads(self.w_q(x), self.num_heads)  # (batch, h, seq_len, d_k)
        k = split_heads(self.w_k(x), self.num_kv_heads)  # (batch, g, seq_len, d_k)
        v = split_heads(self.w_v(x), self.num_kv_heads)
        if self.positional == "rope":
            q = apply_rope(q, positions, self.rope_base, self.rope_scaling)
            k = apply_rope(k, positions, self.rope_base, self.rope_scaling)
        if kv_cache is not None:
            kv_cache.append(k, v)
            k, v = kv_cache.k, kv_cache.v
        src_len = k.shape[2]
        allowed = allowed_keys(seq_len, src_len, self.causal, self.window, device=x.device)
        if mask is not None:
            allowed = mask if allowed is None else mask & allowed
        bias = None
        if self.positional == "alibi":
            bias = alibi_bias(self.num_heads, seq_len, src_len, dtype=q.dtype).to(x.device)
        # the cached keys are numbered by their order in the cache, as ALiBi's distances are
        key_positions = positions if offset == 0 else torch.cat(
            [torch.arange(offset, device=x.device), positions])
        heads, weights = self.attend(q, k, v, allowed, bias, need_weights=need_weights, fast=fast,
                                     is_causal=self.causal and self.window is None and mask is None
                                     and offset == 0, query_positions=positions, key_positions=key_positions)
        # The written-out path (fast=False) has always returned its weights; otherwise only when asked.
        return self.output(x, heads), (weights if need_weights or not fast else None)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor | None,
               bias: torch.Tensor | None, *, need_weights: bool = False, fast: bool = True,
               is_causal: bool = False, query_positions: torch.Tensor | None = None,
               key_positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The step a score-only variant replaces; default :func:`dot_product_attend`.

        ``q (batch, h, seq_len, d_k)``, ``k, v (batch, g, src_len, d_k)`` -> heads
        shaped like ``q``, weights or None. Cosine attention: normalise ``q`` and ``k``,
        then return ``softmax_attend(q, k, v, allowed, bias, scale=...)``.
        """
        return dot_product_attend(q, k, v, allowed, bias, need_weights=need_weights, fast=fast,
                                  is_causal=is_causal)

    def output(self, x: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """W^O on the merged heads ``(batch, h, seq_len, d_k)``."""
        return self.w_o(merge_heads(heads))


register_attention("gqa", GQAOptions, CausalSelfAttention.from_options)

__all__ = ["ATTENTION_POSITIONAL", "CausalSelfAttention", "GQAOptions", "allowed_keys", "repeat_kv", "validate_call",
           "validate_mask", "validate_positions"]
