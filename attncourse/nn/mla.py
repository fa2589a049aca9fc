"""Multi-head latent attention (MLA): a KV cache of one small latent per token.

DeepSeek-V2 (DeepSeek-AI 2024, section 2.1) compresses each token's keys and
values into one latent vector c_KV of width d_c, and caches that instead of the
keys and values of h heads. With the equations' numbers (section 2.1.2-2.1.3):

    c_t^KV = W^DKV h_t                                   (9)   (d_c,)
    k_t^C  = W^UK c_t^KV,   v_t^C = W^UV c_t^KV          (10, 11)   (h * d_h,)
    q_t^C  = W^Q h_t                                     (queries not compressed here)
    q_t^R  = RoPE(W^QR h_t)                              (14)  (h * d_h^R,)
    k_t^R  = RoPE(W^KR h_t)                              (15)  (d_h^R,), shared by all heads
    q_{t,i} = [q_{t,i}^C; q_{t,i}^R],  k_{t,i} = [k_{t,i}^C; k_t^R]      (16, 17)
    o_{t,i} = sum_j softmax_j(q_{t,i} . k_{j,i} / sqrt(d_h + d_h^R)) v_{j,i}^C   (18)
    u_t = W^O [o_{t,1}; ...; o_{t,h}]                    (19)

RoPE cannot act on k^C (a rotation between W^UK and the query would stop W^UK
from being absorbed), hence the *decoupled* rotary key k^R of width d_h^R,
computed from h_t and shared by the heads.

At inference the up-projections are **absorbed** (section 2.1.2): the score
q_{t,i}^C . (W_i^UK c_j) equals ((W_i^UK)^T q_{t,i}^C) . c_j, and
W^O_i W_i^UV folds into one (d_model, d_c) matrix per head, so attention reads
the latents c_j directly and the cache holds d_c + d_h^R numbers per token and
layer, whatever the number of heads. :class:`MultiHeadLatentAttention` computes
the plain form while training and, with a :class:`LatentCache`, either form
(``absorbed``); both give the same output (tested in float64).

Simplifications against the paper: the queries are not compressed (DeepSeek-V2
also compresses them, eqs. 12-13, to save activation memory in training; this
changes nothing in the cache), and there is no bias.

:class:`MultiHeadLatentAttention` implements
:class:`~attncourse.nn.protocol.DecoderAttention`, registered as ``"mla"`` with
its options in :class:`MLAOptions` (:mod:`attncourse.nn.spec`).

References
----------
DeepSeek-AI (2024), "DeepSeek-V2: A Strong, Economical, and Efficient
Mixture-of-Experts Language Model", section 2.1, equations (9)-(19).
Su et al. (2021), "RoFormer", section 3.4.2 (RoPE).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from attncourse.functional.torch_attention import masked_softmax
from attncourse.nn.attend import allowed_keys, validate_call
from attncourse.nn.attention import merge_heads, split_heads
from attncourse.nn.protocol import DecoderAttention
from attncourse.nn.rope import apply_rope
from attncourse.nn.spec import register_attention


@dataclass(frozen=True)
class MLAOptions:
    """The options of attention variant ``"mla"`` (:class:`MultiHeadLatentAttention`) in a model spec.

    Attributes
    ----------
    latent_dim : int, optional
        d_c; None for 4 d_h, DeepSeek-V2's ratio (section 3.1.2: d_c = 512 for d_h = 128).
    rope_dim : int, optional
        d_h^R; None for d_h / 2 rounded up to even with RoPE (DeepSeek-V2's ratio),
        0 without RoPE.
    """

    latent_dim: int | None = field(default=None, metadata={
        "help": "multi-head latent attention (chapter 10): cache a latent of D numbers per token "
                "(DeepSeek-V2); not with --num-kv-heads, --window or ALiBi",
        "check": "positive_int", "limit": (1, 4096, "memory grows with it"), "metavar": "D"})
    rope_dim: int | None = field(default=None, metadata={
        "help": "with --latent-dim and --positional rope: the rotary part of each query and key, even "
                "(default: half a head, rounded up to even)",
        "check": "int", "limit": (0, 4096, "memory grows with it"), "metavar": "R"})


@dataclass
class LatentCache:
    """What MLA keeps per token: the latent c^KV and the rotated decoupled key k^R.

    Attributes
    ----------
    c_kv : (batch, cache_len, latent_dim)
    k_rope : (batch, cache_len, rope_dim)
        Already rotated to each token's position (width 0 without RoPE).
    """

    kind = "latent"

    c_kv: torch.Tensor
    k_rope: torch.Tensor

    def __len__(self) -> int:
        return int(self.c_kv.shape[1])

    def append(self, c_kv: torch.Tensor, k_rope: torch.Tensor) -> None:
        """Extend along the sequence axis with ``c_kv (batch, new, d_c)``, ``k_rope (batch, new, d_h^R)``."""
        self.c_kv = torch.cat([self.c_kv, c_kv], dim=1)
        self.k_rope = torch.cat([self.k_rope, k_rope], dim=1)

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` positions (e.g. drop rejected draft tokens)."""
        self.c_kv, self.k_rope = self.c_kv[:, :length], self.k_rope[:, :length]


def mla_dims(options: MLAOptions, d_model: int, num_heads: int, positional: str | None) -> tuple[int, int]:
    """``(latent_dim, rope_dim)`` of ``options`` for a model of these sizes: the defaults filled in and
    every rule of MLA's options checked, here only (the spec, GPT's keywords and train-lm all come here).

    Parameters
    ----------
    options : MLAOptions
    d_model, num_heads : int
        d_h = d_model / num_heads (0 if it does not divide: the model's own check says so).
    positional : {None, "rope", "alibi"}
        The scheme acting inside attention (None for positions added to the embeddings, or none).

    Returns
    -------
    (int, int)
        d_c (default 4 d_h) and d_h^R (default d_h / 2 rounded up to even with RoPE, else 0).

    Raises
    ------
    ValueError
        With ALiBi (its bias is not part of MLA), a ``latent_dim`` that is not a positive int,
        a ``rope_dim`` that is not an even int >= 0, or one that does not match the scheme
        (RoPE needs ``rope_dim > 0``, the others 0).
    """
    if positional not in (None, "rope"):
        raise ValueError(f"MLA cannot be combined with ALiBi (positional={positional!r}): its positions are "
                         "a decoupled RoPE key, or none inside attention")
    d_h = d_model // num_heads if num_heads and d_model % num_heads == 0 else 0
    latent_dim = 4 * d_h if options.latent_dim is None else options.latent_dim
    if isinstance(latent_dim, bool) or int(latent_dim) != latent_dim or latent_dim < 1:
        raise ValueError(f"latent_dim must be a positive int, got {latent_dim!r}")
    rope_dim = options.rope_dim
    if rope_dim is None:
        half = d_h // 2
        rope_dim = half + half % 2 if positional == "rope" else 0
    if isinstance(rope_dim, bool) or int(rope_dim) != rope_dim or rope_dim < 0 or rope_dim % 2:
        raise ValueError(f"rope_dim must be an even number >= 0, got {rope_dim!r}")
    if (positional == "rope") != (rope_dim > 0):
        scheme = "with RoPE" if positional == "rope" else "without RoPE"
        raise ValueError(f"rope_dim={rope_dim} {scheme}: MLA's rotary part needs positional='rope' and "
                         "rope_dim > 0, or neither")
    return int(latent_dim), int(rope_dim)


class MultiHeadLatentAttention(nn.Module, DecoderAttention):
    """Causal self-attention whose keys and values are up-projected from a cached latent (MLA).

    Parameters
    ----------
    d_model : int
    num_heads : int
        h; each head's content query, key and value are d_h = d_model / h wide.
    latent_dim : int
        d_c, the width of the cached latent c^KV (DeepSeek-V2: 4 d_h).
    rope_dim : int
        d_h^R, the width of the decoupled rotary query (per head) and key (shared);
        0 for no rotary part (positions added to the embeddings). Even.
    causal : bool
    rope_base : float

    Attributes
    ----------
    w_dkv : nn.Linear(d_model, d_c)
        W^DKV, eq. (9).
    w_uk, w_uv : nn.Linear(d_c, h * d_h)
        W^UK, W^UV, eqs. (10)-(11).
    w_q : nn.Linear(d_model, h * d_h)
    w_qr : nn.Linear(d_model, h * d_h^R) or None
        W^QR, eq. (14).
    w_kr : nn.Linear(d_model, d_h^R) or None
        W^KR, eq. (15).
    w_o : nn.Linear(h * d_h, d_model)
    absorbed : bool
        With a cache, compute the absorbed form (default True); without a cache the
        plain form is used (training).

    Raises
    ------
    ValueError
        If a size is not a positive int (``rope_dim`` may be 0), ``d_model`` is not
        divisible by ``num_heads`` or ``rope_dim`` is odd.

    References
    ----------
    DeepSeek-AI (2024), section 2.1, eqs. (9)-(19).
    """

    def __init__(self, d_model: int, num_heads: int, latent_dim: int, rope_dim: int = 0,
                 causal: bool = True, rope_base: float = 10000.0) -> None:
        super().__init__()
        for name, value, low in (("d_model", d_model, 1), ("num_heads", num_heads, 1),
                                 ("latent_dim", latent_dim, 1), ("rope_dim", rope_dim, 0)):
            if isinstance(value, bool) or int(value) != value or value < low:
                kind = "a positive" if low else "a non-negative"
                raise ValueError(f"{name} must be {kind} int, got {value!r}")
        if d_model % num_heads:
            raise ValueError(f"d_model={d_model} must be divisible by num_heads={num_heads}")
        if rope_dim % 2:
            raise ValueError(f"rope_dim={rope_dim} must be even: RoPE rotates feature pairs")
        self.d_model, self.num_heads = int(d_model), int(num_heads)
        self.latent_dim, self.rope_dim = int(latent_dim), int(rope_dim)
        self.d_k = self.d_model // self.num_heads
        self.num_kv_heads = self.num_heads  # each head has its own keys, up-projected
        self.causal, self.window, self.rope_base = bool(causal), None, float(rope_base)
        self.absorbed = True
        h = self.num_heads
        self.w_dkv = nn.Linear(d_model, self.latent_dim, bias=False)
        self.w_uk = nn.Linear(self.latent_dim, h * self.d_k, bias=False)
        self.w_uv = nn.Linear(self.latent_dim, h * self.d_k, bias=False)
        self.w_q = nn.Linear(d_model, h * self.d_k, bias=False)
        self.w_qr = nn.Linear(d_model, h * self.rope_dim, bias=False) if self.rope_dim else None
        self.w_kr = nn.Linear(d_model, self.rope_dim, bias=False) if self.rope_dim else None
        self.w_o = nn.Linear(h * self.d_k, d_model, bias=False)

    @classmethod
    def from_options(cls, options: MLAOptions, *, d_model: int, num_heads: int, causal: bool,
                     positional: str | None, rope_base: float) -> MultiHeadLatentAttention:
        """Build the ``"mla"`` variant of a model spec (:mod:`attncourse.nn.spec`); its sizes are
        :func:`mla_dims`'s, which checks every rule of MLA's options.

        Raises
        ------
        ValueError
            As :func:`mla_dims`.
        """
        latent_dim, rope_dim = mla_dims(options, d_model, num_heads, positional)
        return cls(d_model, num_heads, latent_dim, rope_dim, causal, rope_base)

    def empty_cache(self, batch: int, dtype: torch.dtype | None = None, device=None) -> LatentCache:
        """A :class:`LatentCache` with no entries: ``c_kv (batch, 0, d_c)``, ``k_rope (batch, 0, d_h^R)``."""
        dtype = self.w_q.weight.dtype if dtype is None else dtype
        device = self.w_q.weight.device if device is None else device
        return LatentCache(torch.zeros(batch, 0, self.latent_dim, dtype=dtype, device=device),
                           torch.zeros(batch, 0, self.rope_dim, dtype=dtype, device=device))

    def cache_numbers_per_token(self) -> int:
        """Numbers cached per token: d_c + d_h^R."""
        return self.latent_dim + self.rope_dim

    def _queries(self, x: torch.Tensor, positions: torch.Tensor):
        q = split_heads(self.w_q(x), self.num_heads)  # (batch, h, seq_len, d_h)
        q_rope = None
        if self.rope_dim:
            q_rope = apply_rope(split_heads(self.w_qr(x), self.num_heads), positions, self.rope_base)
        return q, q_rope

    def _latents(self, x: torch.Tensor, positions: torch.Tensor):
        c_kv = self.w_dkv(x)  # (batch, seq_len, d_c), eq. (9)
        if self.rope_dim:
            k_rope = apply_rope(self.w_kr(x), positions, self.rope_base)  # eq. (15)
        else:
            k_rope = x.new_zeros(x.shape[0], x.shape[1], 0)
        return c_kv, k_rope

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None,
                kv_cache: LatentCache | None = None, need_weights: bool = False,
                fast: bool = True, positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """MLA from each new position to the cached and the allowed new ones.

        Parameters
        ----------
        x : (batch, seq_len, d_model)
        mask : bool tensor broadcastable to (batch, num_heads, seq_len, cache_len + seq_len), optional
            ``True`` = may attend; combined with the causal mask.
        kv_cache : LatentCache, optional
            Latents of earlier positions; this call's are appended in place.
        need_weights : bool
            Return the attention weights.
        fast : bool
            Use ``scaled_dot_product_attention`` in the plain form when no weights are asked for.
        positions : (seq_len,) int tensor, optional
            Positions of the new tokens for the rotary parts; default ``cache_len + arange(seq_len)``.

        Returns
        -------
        output : (batch, seq_len, d_model)
        weights : (batch, num_heads, seq_len, cache_len + seq_len) or None

        Raises
        ------
        ValueError
            If ``x`` is not ``(batch, seq_len, d_model)``, the cache's shapes do not fit, or
            ``positions`` is not a ``(seq_len,)`` integer tensor.
        """
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (batch, seq_len, d_model={self.d_model}), got {tuple(x.shape)}")
        batch, seq_len, _ = x.shape
        offset = 0 if kv_cache is None else len(kv_cache)
        if kv_cache is not None and (kv_cache.c_kv.shape[0] != batch
                                     or kv_cache.c_kv.shape[2] != self.latent_dim
                                     or kv_cache.k_rope.shape[2] != self.rope_dim):
            raise ValueError(f"kv_cache must hold (batch={batch}, cache_len, d_c={self.latent_dim}) latents "
                             f"and (batch, cache_len, d_h^R={self.rope_dim}) keys, got "
                             f"{tuple(kv_cache.c_kv.shape)} and {tuple(kv_cache.k_rope.shape)}")
        positions = validate_call(mask, positions, batch, self.num_heads, seq_len, offset, x.device)
        q, q_rope = self._queries(x, positions)
        c_kv, k_rope = self._latents(x, positions)
        if kv_cache is not None:
            kv_cache.append(c_kv, k_rope)
            c_kv, k_rope = kv_cache.c_kv, kv_cache.k_rope
        allowed = allowed_keys(seq_len, c_kv.shape[1], self.causal, None, device=x.device)
        if mask is not None:
            allowed = mask if allowed is None else mask & allowed
        if kv_cache is not None and self.absorbed:
            heads, weights = self.absorbed_heads(q, q_rope, c_kv, k_rope, allowed)
            return self.absorbed_output(heads), (weights if need_weights else None)
        sdpa = fast and not need_weights and (allowed is None or (self.causal and mask is None
                                                                  and offset == 0))
        return self.plain(q, q_rope, c_kv, k_rope, allowed, sdpa)

    def plain(self, q, q_rope, c_kv, k_rope, allowed, sdpa: bool = False):
        """Equations (10)-(19) as written: every head's keys and values up-projected from the latents.

        ``q (batch, h, n, d_h)``, ``q_rope (batch, h, n, d_h^R)`` or None, ``c_kv (batch, m, d_c)``,
        ``k_rope (batch, m, d_h^R)``, ``allowed (n, m)`` or broadcastable bool or None ->
        ``(output (batch, n, d_model), weights (batch, h, n, m) or None)``. ``sdpa``: the
        weights are not returned and ``allowed`` is None or the plain causal mask.
        """
        k = split_heads(self.w_uk(c_kv), self.num_heads)  # (batch, h, m, d_h), eq. (10)
        v = split_heads(self.w_uv(c_kv), self.num_heads)  # eq. (11)
        if self.rope_dim:  # eqs. (16)-(17): the shared rotary key joins every head
            q = torch.cat([q, q_rope], dim=-1)
            k = torch.cat([k, k_rope[:, None].expand(-1, self.num_heads, -1, -1)], dim=-1)
        if sdpa:  # its default scale is 1 / sqrt(d_h + d_h^R), the width of q
            out = F.scaled_dot_product_attention(q, k, v, is_causal=allowed is not None)
            return self.w_o(merge_heads(out)), None
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.d_k + self.rope_dim)  # eq. (18)
        weights = masked_softmax(scores, allowed)
        return self.w_o(merge_heads(weights @ v)), weights

    def absorbed_heads(self, q, q_rope, c_kv, k_rope, allowed):
        """Attention over the latents themselves: W^UK absorbed into the queries.

        Returns ``(sum_j a_ij c_j : (batch, h, n, d_c), weights (batch, h, n, m))``.
        """
        w_uk = self.w_uk.weight.view(self.num_heads, self.d_k, self.latent_dim)  # W_i^UK (d_h, d_c)
        q_latent = torch.einsum("bhnd,hdc->bhnc", q, w_uk)  # (W_i^UK)^T q_i^C
        scores = q_latent @ c_kv[:, None].transpose(-2, -1)  # (batch, h, n, m)
        if self.rope_dim:
            scores = scores + q_rope @ k_rope[:, None].transpose(-2, -1)
        weights = masked_softmax(scores / math.sqrt(self.d_k + self.rope_dim), allowed)
        return weights @ c_kv[:, None], weights

    def absorbed_output(self, heads: torch.Tensor) -> torch.Tensor:
        """u = sum_i (W^O_i W_i^UV) (sum_j a_ij c_j): ``(batch, h, n, d_c)`` -> ``(batch, n, d_model)``."""
        w_uv = self.w_uv.weight.view(self.num_heads, self.d_k, self.latent_dim)  # W_i^UV (d_h, d_c)
        w_o = self.w_o.weight.view(self.d_model, self.num_heads, self.d_k)  # W^O_i (d_model, d_h)
        w_ov = torch.einsum("mhd,hdc->hmc", w_o, w_uv)  # (h, d_model, d_c)
        return torch.einsum("bhnc,hmc->bnm", heads, w_ov)


register_attention("mla", MLAOptions, MultiHeadLatentAttention.from_options)

__all__ = ["LatentCache", "MLAOptions", "MultiHeadLatentAttention", "mla_dims"]
