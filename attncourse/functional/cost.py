"""What attention costs: FLOPs, bytes moved between HBM and SRAM, and measured peak memory.

Source: Dao et al. (2022), "FlashAttention", section 3.2 and appendix C.
"""

from __future__ import annotations

import math
import tracemalloc
from collections.abc import Callable
from typing import Any

#: NVIDIA H100 SXM5, dense BF16 Tensor Core peak, FLOP/s (NVIDIA H100 Tensor Core GPU
#: datasheet: 989 TFLOP/s dense, 1,979 with sparsity).
H100_BF16_FLOPS = 989e12
#: NVIDIA H100 SXM5 HBM3 memory bandwidth, bytes/s (same datasheet: 3.35 TB/s).
H100_HBM_BANDWIDTH = 3.35e12


def attention_flops(n: int, d: int) -> int:
    """FLOPs of the two matrix products of attention, ``2 n^2 d`` each: ``4 n^2 d``."""
    return 4 * n * n * d


def attention_bytes(n: int, d: int, block_q: int | None = None, bytes_per_element: int = 2) -> int:
    """Bytes one head's forward pass moves between HBM and the chip (Dao et al. 2022, thm. 2).

    ``block_q`` None: the textbook computation; an int: tiled with query blocks of that
    many rows. Raises ValueError if a size is below 1.
    """
    if min(n, d, bytes_per_element, 1 if block_q is None else block_q) < 1:
        raise ValueError(f"n, d, block_q and bytes_per_element must be at least 1, got {n}, {d}, {block_q}, "
                         f"{bytes_per_element}")
    if block_q is None:
        elements = 4 * n * d + 4 * n * n
    else:
        elements = 2 * n * d + 2 * n * d * math.ceil(n / block_q)
    return elements * bytes_per_element


def peak_traced_bytes(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, int]:
    """``fn(*args, **kwargs)`` and its peak bytes per :mod:`tracemalloc` (NumPy, not torch)."""
    already = tracemalloc.is_tracing()
    if not already:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        result = fn(*args, **kwargs)
        peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        if not already:
            tracemalloc.stop()
    return result, peak


def saved_tensor_bytes(fn: Callable[..., Any], *inputs: Any) -> int:
    """Bytes of the tensors autograd saves for the backward pass while ``fn(*inputs)`` runs."""
    import torch  # here, so that the NumPy counts above need no torch

    total = 0

    def pack(tensor):
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn(*inputs)
    return total


__all__ = ["H100_BF16_FLOPS", "H100_HBM_BANDWIDTH", "attention_bytes", "attention_flops", "peak_traced_bytes",
           "saved_tensor_bytes"]
