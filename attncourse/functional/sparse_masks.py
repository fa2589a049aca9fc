"""Sparse attention patterns written as boolean masks (``True`` = may attend).

A pattern keeps only some of the n x n alignment scores. Writing it as a mask keeps the
maths of :func:`attncourse.functional.scaled_dot_product_attention` unchanged: masked
scores get zero weight, and the fraction of ``True`` entries is the fraction of scores a
sparse kernel would compute.
"""

import numpy as np


def sliding_window_mask(seq_len: int, window: int, causal: bool = True) -> np.ndarray:
    """Boolean sliding-window mask: each query sees at most ``window`` keys near it.

    Causal (decoder-only models, e.g. Mistral 7B, Jiang et al. 2023): query i may attend
    to keys ``i - window + 1 <= j <= i``, the ``window`` latest tokens including itself.
    Not causal (Longformer's local attention, Beltagy et al. 2020, section 3.1): keys
    ``|i - j| <= window // 2``, a centred window of ``2 * (window // 2) + 1`` tokens; the
    cousin of Luong et al.'s (2015) local attention, eq. (9), with half-width D.

    Parameters
    ----------
    seq_len : int
        n, the number of queries and keys (>= 1).
    window : int
        w, tokens seen by each query (>= 1). ``window >= seq_len`` with ``causal=True``
        gives the full causal mask.
    causal : bool
        Look back only (default) or both ways.

    Returns
    -------
    (seq_len, seq_len) bool
        ``mask[i, j]`` is ``True`` where query i may attend to key j.

    Raises
    ------
    ValueError
        If ``seq_len`` or ``window`` is below 1.
    """
    if seq_len < 1:
        raise ValueError(f"seq_len must be at least 1, got {seq_len}")
    if window < 1:
        raise ValueError(f"window must be at least 1, got {window}")
    offset = np.arange(seq_len)[:, None] - np.arange(seq_len)[None, :]  # i - j
    if causal:
        return (offset >= 0) & (offset < window)
    return np.abs(offset) <= window // 2


def strided_mask(seq_len: int, stride: int, causal: bool = True) -> np.ndarray:
    """Boolean strided mask of the Sparse Transformer: a local band plus every stride-th key.

    Query i may attend to key j when ``|i - j| < stride`` (the local band, looking back
    only if ``causal``) or ``(i - j) % stride == 0`` (the "summary" positions one stride
    apart), Child et al. (2019), section 4.2, the strided pattern: each query sees about
    ``stride + seq_len / stride`` keys, O(n sqrt(n)) in all when ``stride ~ sqrt(n)``.

    Parameters
    ----------
    seq_len : int
        n (>= 1).
    stride : int
        l, the band width and the step between summary keys (>= 1).
    causal : bool
        Keys j <= i only (default), or both ways.

    Returns
    -------
    (seq_len, seq_len) bool
        ``True`` where query i may attend to key j.

    Raises
    ------
    ValueError
        If ``seq_len`` or ``stride`` is below 1.
    """
    if stride < 1:
        raise ValueError(f"stride must be at least 1, got {stride}")
    local = sliding_window_mask(seq_len, stride, causal=causal) if causal else \
        sliding_window_mask(seq_len, 2 * stride - 1, causal=False)
    offset = np.arange(seq_len)[:, None] - np.arange(seq_len)[None, :]
    summary = offset % stride == 0
    if causal:
        summary &= offset >= 0
    return local | summary


def global_tokens_mask(seq_len: int, window: int, global_tokens) -> np.ndarray:
    """Boolean Longformer mask: a centred sliding window plus a few global tokens.

    Every query sees the keys within ``window // 2`` of it (as
    ``sliding_window_mask(seq_len, window, causal=False)``); a global token (for example
    the classification token at position 0) attends to every key, and every query
    attends to it. Beltagy et al. (2020), section 3.1, "Global Attention".

    Parameters
    ----------
    seq_len : int
        n (>= 1).
    window : int
        w, width of the local window (>= 1).
    global_tokens : iterable of int
        Positions with global attention, each in 0..seq_len-1.

    Returns
    -------
    (seq_len, seq_len) bool
        Symmetric; ``True`` where query i may attend to key j.

    Raises
    ------
    ValueError
        If a size is below 1 or a global position is out of range.
    """
    mask = sliding_window_mask(seq_len, window, causal=False)
    positions = np.asarray(list(global_tokens), dtype=int)
    if positions.size and (positions.min() < 0 or positions.max() >= seq_len):
        raise ValueError(f"global_tokens {positions.tolist()} must lie in 0..seq_len-1 = 0..{seq_len - 1}")
    mask[positions, :] = True
    mask[:, positions] = True
    return mask


def mask_density(mask: np.ndarray) -> float:
    """Fraction of the n x n scores a pattern keeps: what a sparse kernel would compute."""
    mask = np.asarray(mask, dtype=bool)
    return float(mask.mean()) if mask.size else 0.0
