"""Symmetric int8 quantisation of keys and values, per token or per channel.

Source: Liu et al. (2024), "KIVI", sections 3.1-3.2.
"""

from __future__ import annotations

import torch

#: Largest magnitude of a symmetric int8 code.
INT8_MAX = 127


def quantize_int8(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(int8 values, scales)`` of float ``x``, one scale per slice along ``dim`` (KIVI 3.1).

    Raises ValueError if ``x`` is not floating point.
    """
    if not x.is_floating_point():
        raise ValueError(f"quantize_int8 needs a floating-point tensor, got {x.dtype}")
    scale = x.abs().amax(dim=dim, keepdim=True) / INT8_MAX
    scale = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.round(x / scale).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    return q, scale


def dequantize_int8(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``scale * q``: the values :func:`quantize_int8` stored (``scale``'s dtype)."""
    return q.to(scale.dtype) * scale


__all__ = ["INT8_MAX", "dequantize_int8", "quantize_int8"]
