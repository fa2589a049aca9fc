"""Bytes the FlashAttention forward kernel moves between HBM and the chip, counted from its loops.

The count follows :func:`attncourse.kernels.flash_attention.triton_flash_attention`'s forward
kernel load by load: each query-block program reads its block of Q once, reads the blocks
of K and V its two stages visit, and writes its block of O and of L once. Masked lanes of a
short last block are not loaded (a masked ``tl.load`` does not touch memory), so the count
is in real rows, not padded ones.

References
----------
Dao (2023), "FlashAttention-2", algorithm 1; Dao et al. (2022), section 3.2 and theorem 2
(HBM accesses of the tiled forward pass).
"""

from __future__ import annotations

import math

#: Bytes of one entry of L: the kernel stores the log-sum-exp in float32 whatever the inputs.
LSE_BYTES = 4


def keys_visited(query_block: int, n_k: int, block_q: int, block_k: int, causal: bool) -> int:
    """Rows of K (and of V) the program of query block ``query_block`` loads.

    Parameters
    ----------
    query_block : int
        Index i of the program's query block (rows ``i * block_q`` onwards).
    n_k : int
        Rows of keys.
    block_q, block_k : int
        B_r and B_c, rows per tile.
    causal : bool
        With the causal mask (top-left aligned).

    Returns
    -------
    int
        Without a causal mask, ``n_k``. With it, the rows of the key tiles before
        ``min(n_k, (query_block + 1) * block_q)``, whole tiles, at most ``n_k``: the
        kernel's two stages stop at the diagonal (masked lanes past ``n_k`` are not loaded).

    References
    ----------
    Dao (2023), "FlashAttention-2", section 3.1 (causal masking skips the blocks above the
    diagonal).
    """
    if not causal:
        return n_k
    stop = min(n_k, (query_block + 1) * block_q)
    return min(n_k, math.ceil(stop / block_k) * block_k)


def forward_hbm_bytes(n_q: int, n_k: int, d: int, block_q: int, block_k: int,
                      causal: bool = False, bytes_per_element: int = 4) -> int:
    """HBM bytes read and written by the forward kernel for one (batch, head).

    Parameters
    ----------
    n_q, n_k : int
        Rows of queries and of keys (and values).
    d : int
        Head width.
    block_q, block_k : int
        B_r and B_c, rows per tile.
    causal : bool
        With the causal mask: key tiles after the diagonal are not loaded.
    bytes_per_element : int
        Size of one entry of Q, K, V and O: 4 for float32, 2 for float16/bfloat16.

    Returns
    -------
    int
        ``(n_q d + 2 d sum_i keys_i + n_q d) * bytes_per_element + 4 n_q``: Q read, K and V
        read by every query block, O written, L written (float32). Without a causal mask
        ``sum_i keys_i = ceil(n_q / B_r) n_k``: B_r sets the traffic, B_c does not.

    Raises
    ------
    ValueError
        If a size is below 1.
    """
    if min(n_q, n_k, d, block_q, block_k, bytes_per_element) < 1:
        raise ValueError(f"sizes must be at least 1, got n_q={n_q}, n_k={n_k}, d={d}, block_q={block_q}, "
                         f"block_k={block_k}, bytes_per_element={bytes_per_element}")
    blocks = math.ceil(n_q / block_q)
    kv_rows = sum(keys_visited(i, n_k, block_q, block_k, causal) for i in range(blocks))
    return (2 * n_q * d + 2 * kv_rows * d) * bytes_per_element + LSE_BYTES * n_q


__all__ = ["LSE_BYTES", "forward_hbm_bytes", "keys_visited"]
