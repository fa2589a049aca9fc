"""Causal self-attention with fewer key/value heads: multi-query and grouped-query attention.

Multi-head attention (chapter 5) projects queries, keys and values into h heads
each. While generating, the keys and values of every earlier token are kept in a
KV cache, whose size per token is ``2 * layers * heads * d_k`` numbers; at long
contexts reading it dominates the time per token. Shazeer (2019) keeps h query
heads but a *single* key and value head shared by all of them (multi-query
attention, MQA); Ainslie et al. (2023) take the middle road of g groups of query
heads, each sharing one key/value head (grouped-query attention, GQA):

    head_i = Attention(Q W_i^Q, K W_{g(i)}^K, V W_{g(i)}^V),  g(i) = floor(i / (h / g))

so ``num_kv_heads = h`` is multi-head attention, ``1`` is multi-query and values
in between are grouped. The cache and W^K, W^V shrink by h / g; the queries and
W^O do not change.

:class:`CausalSelfAttention` is that attention for a decoder-only model, with
the position schemes that act inside attention: RoPE rotates queries and keys
(:mod:`attncourse.nn.rope`), ALiBi biases the scores (:mod:`attncourse.nn.alibi`).
It can also restrict each query to the last ``window`` keys (sliding-window
attention; :func:`attncourse.functional.sliding_window_mask`, the same window of w keys).
The cache is chapter
6's :class:`~attncourse.nn.attention.KVCache`, holding the ``num_kv_heads`` heads
(keys already rotated with RoPE), so its memory shrinks with them. It implements
:class:`~attncourse.nn.protocol.DecoderAttention`, registered as ``"gqa"`` with its
options in :class:`GQAOptions` (:mod:`attncourse.nn.spec`).

Its :meth:`~CausalSelfAttention.forward` is the plumbing (checks, head split,
positions, cache, masks); the scores and weights are one step,
:meth:`~CausalSelfAttention.attend`, that a subclass may replace: a variant whose only
change is the score is that method and its options (:mod:`attncourse.nn.attend`, where
the checks, :func:`allowed_keys` and :func:`repeat_kv` shared by every decoder attention
live; they are importable from here as before).

References
----------
Shazeer (2019), "Fast Transformer Decoding: One Write-Head is All You Need", section 3.
Ainslie et al. (2023), "GQA: Training Generalized Multi-Query Transformer Models
from Multi-Head Checkpoints", section 2.2.
Vaswani et al. (2017), section 3.2.2 (multi-head attention), equation (1).
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
from attncourse.nn.rope import RopeScaling, apply_rope
from attncourse.nn.spec import register_attention

#: What ``CausalSelfAttention(positional=...)`` accepts: schemes acting inside attention, or None.
ATTENTION_POSITIONAL: tuple[str | None, ...] = (None, "rope", "alibi")


@dataclass(frozen=True)
class GQAOptions:
    """The options of attention variant ``"gqa"`` (:class:`CausalSelfAttention`) in a model spec.

    Attributes
    ----------
    num_kv_heads : int, optional
        g key/value heads; None for h (multi-head attention), 1 for multi-query.
    window : int, optional
        Sliding window of ``window`` keys per query (see :func:`allowed_keys`).
    bias : bool
        Biases on the four projections (GPT-2 has them; Llama-style models do not).
    """

    # metadata: how train-lm offers each option (attncourse.recipes.lm_config)
    num_kv_heads: int | None = field(default=None, metadata={
        "help": "key/value heads: 1 multi-query, between grouped-query (default: --num-heads)",
        "check": "positive_int", "limit": (1, 64, "memory grows with it"), "metavar": "G"})
    window: int | None = field(default=None, metadata={
        "help": "sliding-window attention over W tokens", "check": "positive_int",
        "limit": (1, 8192, "a window wider than --max-len's ceiling changes nothing"), "metavar": "W"})
    bias: bool = field(default=False, metadata={"help": "biases on the projections W^Q, W^K, W^V, W^O"})


class CausalSelfAttention(nn.Module, DecoderAttention):
    """Self-attention with ``num_heads`` query heads and ``num_kv_heads`` key/value heads.

    Implements :class:`~attncourse.nn.protocol.DecoderAttention` (variant ``"gqa"``).

    Parameters
    ----------
    d_model : int
    num_heads : int
        h query heads, each d_k = d_model / h wide.
    num_kv_heads : int, optional
        g key/value heads, dividing h; default h (multi-head). 1 is multi-query attention.
    positional : {None, "rope", "alibi"}
        A position scheme acting inside attention (None when positions are added
        to the embeddings, or absent).
    causal : bool
        Apply the causal mask (default). ``False`` lets every position see the
        whole sequence, the future included.
    window : int, optional
        Sliding window of ``window`` keys per query, itself included: the last ``window``
        keys if causal, a centred window (odd ``window``) if not; see :func:`allowed_keys`.
    rope_base : float
        theta's base for RoPE (10000).
    bias : bool
        Biases on the four projections.
    rope_scaling : RopeScaling, optional
        RoPE stretched past its training length (PI, NTK-aware, YaRN; chapter 12).

    Attributes
    ----------
    w_q : nn.Linear(d_model, h * d_k)
    w_k, w_v : nn.Linear(d_model, g * d_k)
        One key and one value projection per kv head (h / g times smaller than in MHA).
    w_o : nn.Linear(h * d_k, d_model)
    options : GQAOptions (or a subclass's options)
        The options it was built with, for :meth:`attend` to read.

    Raises
    ------
    ValueError
        If a size is not a positive int, ``d_model`` is not divisible by ``num_heads``,
        ``num_heads`` not by ``num_kv_heads``, ``positional`` is unknown, or ``window`` is
        not a positive int (odd when not causal).

    References
    ----------
    Shazeer (2019); Ainslie et al. (2023), section 2.2; Su et al. (2021); Press et al. (2022).
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
        """Build the ``"gqa"`` variant of a model spec (:mod:`attncourse.nn.spec`), or a subclass's
        whose options have those of :class:`GQAOptions` (``"gated"``,
        :class:`~attncourse.nn.gated.GatedSelfAttention`); ``options`` is kept as :attr:`options`."""
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
        """Attend from each new position to the cached ones and to the new ones allowed by the mask.

        Parameters
        ----------
        x : (batch, seq_len, d_model)
            The new positions; with ``kv_cache`` they come after the ``len(kv_cache)`` cached ones.
        mask : bool tensor broadcastable to (batch, num_heads, seq_len, cache_len + seq_len), optional
            Extra mask, ``True`` = may attend (e.g. a key padding mask ``[:, None, None, :]``),
            combined with the causal and window masks.
        kv_cache : KVCache, optional
            Keys (rotated, with RoPE) and values of earlier positions,
            ``(batch, num_kv_heads, cache_len, d_k)``; this call's are appended in place.
        need_weights : bool
            Return the weights (forces the written-out path).
        fast : bool
            Use ``scaled_dot_product_attention`` when the weights are not needed.
        positions : (seq_len,) int tensor, optional
            RoPE's position of each new token; default ``cache_len + arange(seq_len)``.
            Unused by the other schemes (ALiBi's distances follow the cache's order).

        Returns
        -------
        output : (batch, seq_len, d_model)
        weights : (batch, num_heads, seq_len, cache_len + seq_len) or None
            Rows sum to 1 (0 where masked; a fully masked row is all zeros).

        Raises
        ------
        ValueError
            If ``x`` is not ``(batch, seq_len, d_model)``, the cache is not
            ``(batch, num_kv_heads, cache_len, d_k)``, ``mask`` is not a bool tensor
            broadcastable to ``(batch, num_heads, seq_len, cache_len + seq_len)``, or
            ``positions`` is not a ``(seq_len,)`` integer tensor.
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
        """The attend step, which a variant that only changes the scores replaces.

        Everything else (checks, heads, positions, cache, masks, output) is :meth:`forward`'s,
        and the variant's options are :attr:`options`. The default is
        :func:`~attncourse.nn.attend.dot_product_attend`; cosine-similarity attention is::

            def attend(self, q, k, v, allowed, bias, **_):
                q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
                return softmax_attend(q, k, v, allowed, bias, scale=self.options.temperature)

        Parameters
        ----------
        q : (batch, h, seq_len, d_k)
            Queries (rotated, with RoPE).
        k, v : (batch, g, cache_len + seq_len, d_k)
            The cache's keys and values and this call's, g = ``num_kv_heads``.
        allowed : bool tensor broadcastable to (batch, h, seq_len, cache_len + seq_len), or None
            Causal, window and caller's masks combined; None: every key.
        bias : (h, seq_len, cache_len + seq_len) float tensor or None
            ALiBi's, added to the scores.
        need_weights, fast : bool
            As :meth:`forward`.
        is_causal : bool
            ``allowed`` is None or exactly the causal mask (see
            :func:`~attncourse.nn.attend.sdpa_attend`).
        query_positions : (seq_len,) int tensor
            Each query's position (RoPE's): for a variant whose scores depend on positions.
        key_positions : (cache_len + seq_len,) int tensor
            Each key's: the cached keys numbered by their order in the cache, then the queries'.

        Returns
        -------
        heads : (batch, h, seq_len, d_k)
        weights : (batch, h, seq_len, cache_len + seq_len) or None
            May be returned whether asked for or not: :meth:`forward` drops them unless
            ``need_weights`` (or ``fast=False``).
        """
        return dot_product_attend(q, k, v, allowed, bias, need_weights=need_weights, fast=fast,
                                  is_causal=is_causal)

    def output(self, x: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """W^O applied to the merged heads ``(batch, h, seq_len, d_k)`` -> ``(batch, seq_len, d_model)``.

        ``x`` is the attention's input; a subclass may read it (the gate of
        :class:`~attncourse.nn.gated.GatedSelfAttention`).
        """
        return self.w_o(merge_heads(heads))


register_attention("gqa", GQAOptions, CausalSelfAttention.from_options)

__all__ = ["ATTENTION_POSITIONAL", "CausalSelfAttention", "GQAOptions", "allowed_keys", "repeat_kv", "validate_call",
           "validate_mask", "validate_positions"]
