"""Multi-head latent attention (MLA): a KV cache of one small latent per token.

Source: DeepSeek-AI (2024), "DeepSeek-V2", section 2.1, eqs. (9)-(19).
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
from attncourse.nn.registry import register_attention
from attncourse.nn.rope import apply_rope


@dataclass(frozen=True)
class MLAOptions:
    """Options of variant ``"mla"`` in a model spec."""

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
    """Per token: latent ``c_kv`` (.., d_c) and rotated key ``k_rope`` (.., d_h^R)."""

    kind = "latent"

    c_kv: torch.Tensor
    k_rope: torch.Tensor

    def __len__(self) -> int:
        return int(self.c_kv.shape[1])

    def append(self, c_kv: torch.Tensor, k_rope: torch.Tensor) -> None:
        """Extend with ``c_kv`` (batch, new, d_c), ``k_rope`` (batch, new, d_h^R)."""
        self.c_kv = torch.cat([self.c_kv, c_kv], dim=1)
        self.k_rope = torch.cat([self.k_rope, k_rope], dim=1)

    def truncate(self, length: int) -> None:
        """Keep the first ``length`` positions (e.g. drop rejected draft tokens)."""
        self.c_kv, self.k_rope = self.c_kv[:, :length], self.k_rope[:, :length]


def mla_dims(options: MLAOptions, d_model: int, num_heads: int, positional: str | None) -> tuple[int, int]:
    """``(latent_dim, rope_dim)`` of ``options``, defaults filled in, checked.

    Raises ``ValueError`` with ALiBi, a ``latent_dim`` that is not a positive int, a
    ``rope_dim`` that is not an even int >= 0, or one that does not fit the scheme.
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
    """Causal self-attention with keys and values up-projected from a latent.

    Raises ``ValueError`` for a bad size, ``num_heads`` not dividing ``d_model`` or an
    odd ``rope_dim``. Source: DeepSeek-AI (2024), section 2.1, eqs. (9)-(19).
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
        """Build variant ``"mla"``, sized and checked by :func:`mla_dims`.

        Raises ``ValueError`` as :func:`mla_dims`.
        """
        latent_dim, rope_dim = mla_dims(options, d_model, num_heads, positional)
        return cls(d_model, num_heads, latent_dim, rope_dim, causal, rope_base)

    def empty_cache(self, batch: int, dtype: torch.dtype | None = None, device=None) -> LatentCache:
        """A :class:`LatentCache` with no positions."""
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
        """As :meth:`DecoderAttention.forward`, from the cached latents.

        Raises ``ValueError`` if ``x`` is not (batch, seq_len, d_model), the cache does
        not fit, or ``positions`` is not a (seq_len,) integer tensor.
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
        """Eqs. (10)-(19) as written: keys and values up-projected."""
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
        """Attention over the latents themselves: W^UK absorbed into the queries."""
        w_uk = self.w_uk.weight.view(self.num_heads, self.d_k, self.latent_dim)  # W_i^UK (d_h, d_c)
        q_latent = torch.einsum("bhnd,hdc->bhnc", q, w_uk)  # (W_i^UK)^T q_i^C
        scores = q_latent @ c_kv[:, None].transpose(-2, -1)  # (batch, h, n, m)
        if self.rope_dim:
            scores = scores + q_rope @ k_rope[:, None].transpose(-2, -1)
        weights = masked_softmax(scores / math.sqrt(self.d_k + self.rope_dim), allowed)
        return weights @ c_kv[:, None], weights

    def absorbed_output(self, heads: torch.Tensor) -> torch.Tensor:
        """sum_i W^O_i W_i^UV sum_j a_ij c_j: (batch, h, n, d_c) -> (batch, n, d)."""
        w_uv = self.w_uv.weight.view(self.num_heads, self.d_k, self.latent_dim)  # W_i^UV (d_h, d_c)
        w_o = self.w_o.weight.view(self.d_model, self.num_heads, self.d_k)  # W^O_i (d_model, d_h)
        w_ov = torch.einsum("mhd,hdc->hmc", w_o, w_uv)  # (h, d_model, d_c)
        return torch.einsum("bhnc,hmc->bnm", heads, w_ov)


register_attention("mla", MLAOptions, MultiHeadLatentAttention.from_options)

__all__ = ["LatentCache", "MLAOptions", "MultiHeadLatentAttention", "mla_dims"]
