"""HBM bytes of the Triton FlashAttention-2 forward kernel, counted from its loads."""

from __future__ import annotations

import math

#: Bytes of one entry of L: the kernel stores the log-sum-exp in float32 whatever the inputs.
LSE_BYTES = 4


def keys_visited(query_block: int, n_k: int, block_q: int, block_k: int, causal: bool) -> int:
    """Rows of K (and of V) that the program of query block ``query_block`` loads."""
    if not causal:
        return n_k
    # whole key tiles up to the block's diagonal; lanes past n_k are masked, not loaded
    stop = min(n_k, (query_block + 1) * block_q)
    return min(n_k, math.ceil(stop / block_k) * block_k)


def forward_hbm_bytes(n_q: int, n_k: int, d: int, block_q: int, block_k: int,
                      causal: bool = False, bytes_per_element: int = 4) -> int:
    """HBM bytes the forward kernel reads and writes for one (batch, head).

    Raises ValueError if a size is below 1. Source: Dao et al. (2022), theorem 2.
    """
    if min(n_q, n_k, d, block_q, block_k, bytes_per_element) < 1:
        raise ValueError(f"sizes must be at least 1, got n_q={n_q}, n_k={n_k}, d={d}, block_q={block_q}, "
                         f"block_k={block_k}, bytes_per_element={bytes_per_element}")
    blocks = math.ceil(n_q / block_q)
    kv_rows = sum(keys_visited(i, n_k, block_q, block_k, causal) for i in range(blocks))
    # Q read and O written once, K and V once per query block, L once in float32
    return (2 * n_q * d + 2 * kv_rows * d) * bytes_per_element + LSE_BYTES * n_q


__all__ = ["LSE_BYTES", "forward_hbm_bytes", "keys_visited"]
