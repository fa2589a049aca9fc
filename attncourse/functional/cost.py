"""What attention costs: FLOPs, bytes moved to and from memory, and measured peak memory.

Counts for one head of ``n`` queries and ``n`` keys of width ``d`` (d_k = d_v = d), forward
pass. Both the textbook computation and FlashAttention do the same ``4 n^2 d`` FLOPs of
matrix products (``Q K^T`` and ``P V``; the softmax's O(n^2) operations are left out).
They differ in the bytes they move between the GPU's large, slow memory (HBM) and its
small, fast on-chip memory (SRAM), counted as in Dao et al. (2022), section 3.2 and
appendix C:

- textbook (their algorithm 0): read Q and K, write S = Q K^T, read S, write P =
  softmax(S), read P and V, write O: ``4 n d + 4 n^2`` elements;
- tiled (their algorithm 1, FlashAttention-2's loop order): read each query block once,
  read all of K and V once per query block, write O once:
  ``2 n d + 2 n d ceil(n / block_q)`` elements.

The arithmetic intensity (FLOPs per byte) against the device's ridge point,
peak FLOP/s / bandwidth, says whether a kernel is limited by arithmetic or by memory
traffic (the roofline model, Williams, Waterman & Patterson 2009).
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
    """FLOPs of the two matrix products of attention, ``2 n^2 d`` each: ``4 n^2 d``.

    Parameters
    ----------
    n : int
        Queries and keys (sequence length).
    d : int
        d_k = d_v.
    """
    return 4 * n * n * d


def attention_bytes(n: int, d: int, block_q: int | None = None, bytes_per_element: int = 2) -> int:
    """Bytes moved between HBM and the chip by one head's forward pass.

    Parameters
    ----------
    n, d : int
        Sequence length and head width.
    block_q : int, optional
        None: the textbook computation (``4 n d + 4 n^2`` elements). An int: tiled with
        query blocks of this many rows (``2 n d + 2 n d ceil(n / block_q)`` elements).
    bytes_per_element : int
        2 for float16/bfloat16, 4 for float32.

    Raises
    ------
    ValueError
        If a size is below 1.

    References
    ----------
    Dao et al. (2022), section 3.2, theorem 2 and appendix C (HBM accesses).
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
    """Call ``fn(*args, **kwargs)`` and measure the peak of the memory Python allocates meanwhile.

    Uses :mod:`tracemalloc`, which counts every allocation made through Python's and
    NumPy's allocators (NumPy reports its array buffers to it) but **not** torch's:
    use it on NumPy code. The count is of bytes requested, so it is the same from run to
    run, unlike the process's resident memory.

    Returns
    -------
    result, peak_bytes
        What ``fn`` returned, and the largest number of bytes allocated at once during
        the call beyond what was allocated before it.
    """
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
    """Bytes of the tensors autograd saves for the backward pass while ``fn(*inputs)`` runs.

    Counted tensor by tensor with ``torch.autograd.graph.saved_tensors_hooks``, which sees
    everything the forward pass keeps for the backward one (a custom
    ``torch.autograd.Function``'s ``save_for_backward`` included): exact, and the same on
    every run and device. A tensor saved twice counts twice.
    """
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
