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
