"""A KV cache stored in int8: quantised when written, dequantised when read.

Source: Liu et al. (2024), "KIVI", sections 3.2 and 4.
"""

from __future__ import annotations

import torch

from attncourse.functional.quantize import dequantize_int8, quantize_int8

#: What ``QuantizedKVCache(keys=...)`` accepts.
KEY_MODES = ("token", "channel")


class QuantizedKVCache:
    """One layer's keys and values in int8 with float scales.

    Keys are scaled per token, or per channel over groups of ``group`` tokens (KIVI).
    Raises ``ValueError`` if ``keys`` is unknown or ``group < 1``.
    """

    kind = "keys and values"

    def __init__(self, batch: int, num_kv_heads: int, d_k: int, keys: str = "channel", group: int = 16,
                 dtype: torch.dtype = torch.float32, device=None) -> None:
        if keys not in KEY_MODES:
            raise ValueError(f"keys must be one of {KEY_MODES}, got {keys!r}")
        if isinstance(group, bool) or int(group) != group or group < 1:
            raise ValueError(f"group must be a positive int, got {group!r}")
        self.keys, self.group, self.dtype = keys, int(group), dtype

        def empty(d, kind=torch.int8):
            return torch.zeros(batch, num_kv_heads, 0, d, dtype=kind, device=device)

        self.k_q, self.v_q = empty(d_k), empty(d_k)
        self.v_scale = empty(1, dtype)
        self.k_scale = empty(1, dtype) if keys == "token" else empty(d_k, dtype)  # per group in "channel"
        self.residual = empty(d_k, dtype)  # keys not yet in a full group ("channel")

    def __len__(self) -> int:
        return int(self.v_q.shape[2])

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        """Quantise and store ``k, v`` (batch, num_kv_heads, new_len, d_k)."""
        q, s = quantize_int8(v.to(self.dtype), dim=-1)
        self.v_q, self.v_scale = torch.cat([self.v_q, q], 2), torch.cat([self.v_scale, s], 2)
        if self.keys == "token":
            q, s = quantize_int8(k.to(self.dtype), dim=-1)
            self.k_q, self.k_scale = torch.cat([self.k_q, q], 2), torch.cat([self.k_scale, s], 2)
            return
        pending = torch.cat([self.residual, k.to(self.dtype)], 2)
        full = pending.shape[2] // self.group * self.group
        if full:
            groups = pending[:, :, :full].unflatten(2, (full // self.group, self.group))
            q, s = quantize_int8(groups, dim=-2)  # (b, g, n_groups, group, d_k), one scale per channel
            self.k_q = torch.cat([self.k_q, q.flatten(2, 3)], 2)
            self.k_scale = torch.cat([self.k_scale, s.flatten(2, 3)], 2)
        self.residual = pending[:, :, full:]

    @property
    def k(self) -> torch.Tensor:
        """The keys (batch, num_kv_heads, len, d_k), dequantised, plus the residual."""
        if self.keys == "token":
            return dequantize_int8(self.k_q, self.k_scale)
        scale = self.k_scale.repeat_interleave(self.group, dim=2)
        return torch.cat([dequantize_int8(self.k_q, scale), self.residual], 2)

    @property
    def v(self) -> torch.Tensor:
        """The values (batch, num_kv_heads, len, d_k), dequantised."""
        return dequantize_int8(self.v_q, self.v_scale)

    def nbytes(self) -> int:
        """Bytes held: int8 codes, scales and the full-precision residual."""
        return sum(t.numel() * t.element_size()
                   for t in (self.k_q, self.v_q, self.k_scale, self.v_scale, self.residual))


def quantized_caches(model, batch: int, keys: str = "channel", group: int = 16) -> list[QuantizedKVCache]:
    """One empty :class:`QuantizedKVCache` per layer of a (non-MLA) GPT."""
    attn = model.blocks[0].attn
    weight = model.embedding.weight
    return [QuantizedKVCache(batch, attn.num_kv_heads, attn.d_k, keys, group, weight.dtype, weight.device)
            for _ in model.blocks]


__all__ = ["KEY_MODES", "QuantizedKVCache", "quantized_caches"]
