"""Symmetric int8 quantisation of keys and values, per token or per channel.

A value x is stored as the integer round(x / s) in -127 .. 127 with a scale
s = max|x| / 127 shared by a group of values, and read back as s * q; the error
of each value is at most s / 2. Which values share a scale matters: one large
entry (an outlier) in a group makes s large and the other entries coarse. In
large trained language models, keys have a few *channels* with large magnitudes
in every token, while values have no such structure (KIVI, Liu et al. 2024,
section 3; chapter 10's small model has no such channels); KIVI therefore
quantises keys per channel (one scale per channel over a group of tokens) and
values per token (one scale per token over its channels), down to 2 bits.

An int8 code takes a quarter of a float32's bytes, but each group also stores its
scale: the cache shrinks by less than 4 (chapter 10 measures 384 and 352 bytes per
token against 1,024 with float32 scales, per-token and per-channel keys).

References
----------
Liu et al. (2024), "KIVI: A Tuning-Free Asymmetric 2bit Quantization for KV
Cache", sections 3.1-3.2 (per-channel keys, per-token values).
"""

from __future__ import annotations

import torch

#: Largest magnitude of a symmetric int8 code.
INT8_MAX = 127


def quantize_int8(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise ``x`` to int8 with one scale per slice along ``dim`` reduced.

    Parameters
    ----------
    x : float tensor, e.g. keys ``(..., seq_len, d_k)``
    dim : int
        The axis the scale is shared along: ``-1`` gives one scale per token
        (over its channels), ``-2`` one per channel (over the tokens).

    Returns
    -------
    q : int8 tensor, shape of ``x``
        round(x / s), in -127 .. 127.
    scale : float tensor, shape of ``x`` with ``dim`` of size 1
        s = max|x| / 127 over ``dim`` (1 where the slice is all zeros).

    Raises
    ------
    ValueError
        If ``x`` is not floating point.
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
