"""Sparse attention patterns as boolean masks ``(seq_len, seq_len)``, True = may attend.

Source: Child et al. (2019), "Generating Long Sequences with Sparse Transformers", sec. 4.2.
"""

import numpy as np


def _validate_positive_int(name: str, value) -> int:
    # bool is an int subclass and 2.0 == 2, but a window of True or 2.5 keys is a mistake.
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def _positions(seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Query indices ``(n, 1)`` and key indices ``(1, n)``."""
    positions = np.arange(_validate_positive_int("seq_len", seq_len))
    return positions[:, None], positions[None, :]


def validate_sliding_window(window, causal: bool = True) -> int:
    """``window`` as an int; ValueError unless it is a positive int, odd when not ``causal``."""
    window = _validate_positive_int("window", window)
    if not causal and window % 2 == 0:
        raise ValueError(f"window must be odd when causal=False (a centred window of w keys "
                         f"has (w - 1) / 2 on each side), got {window}")
    return window


def sliding_window_mask(seq_len: int, window: int, causal: bool = True) -> np.ndarray:
    """Each query sees the ``window`` keys nearest it (Beltagy et al. 2020, sec. 3.1).

    Raises ValueError if a size is not a positive int, or ``window`` is even without ``causal``.
    """
    query, key = _positions(seq_len)
    window = validate_sliding_window(window, causal)
    offset = query - key
    if causal:
        return (offset >= 0) & (offset < window)
    return np.abs(offset) <= (window - 1) // 2


def strided_mask(seq_len: int, stride: int, causal: bool = True) -> np.ndarray:
    """The Sparse Transformer's strided pattern: a local band plus every stride-th key.

    Raises ValueError if a size is below 1. Source: Child et al. (2019), section 4.2.
    """
    stride = _validate_positive_int("stride", stride)
    # |i - j| < stride: the stride latest keys, or 2 * stride - 1 centred ones.
    local = sliding_window_mask(seq_len, stride if causal else 2 * stride - 1, causal=causal)
    query, key = _positions(seq_len)
    offset = query - key
    summary = offset % stride == 0
    if causal:
        summary &= offset >= 0
    return local | summary


def fixed_mask(seq_len: int, stride: int, summary: int = 1, causal: bool = True) -> np.ndarray:
    """The Sparse Transformer's fixed pattern: a block plus the last ``summary`` keys of each.

    Raises ValueError if a size is not a positive int or ``summary > stride``.
    Source: Child et al. (2019), section 4.2.
    """
    query, key = _positions(seq_len)
    stride = _validate_positive_int("stride", stride)
    summary = _validate_positive_int("summary", summary)
    if summary > stride:
        raise ValueError(f"summary must be at most stride={stride}, got {summary}")
    mask = (query // stride == key // stride) | (key % stride >= stride - summary)
    return mask & (key <= query) if causal else mask


def global_tokens_mask(seq_len: int, window: int, global_tokens) -> np.ndarray:
    """Longformer's pattern: a centred sliding window plus global tokens (Beltagy et al. 2020).

    Raises ValueError if a size is below 1, ``window`` is even or a global token out of range.
    """
    mask = sliding_window_mask(seq_len, window, causal=False)
    positions = np.asarray(list(global_tokens), dtype=int)
    if positions.size and (positions.min() < 0 or positions.max() >= seq_len):
        raise ValueError(f"global_tokens {positions.tolist()} must lie in 0..seq_len-1 = 0..{seq_len - 1}")
    mask[positions, :] = True
    mask[:, positions] = True
    return mask


def tile_fraction(mask: np.ndarray, block: int = 64) -> float:
    """Fraction of the ``block x block`` tiles of ``mask (n, n)`` holding at least one True.

    What a block-sparse kernel computes: a tile with no allowed score is skipped. ``n``
    need not be a multiple of ``block`` (the last tiles are partial). Raises
    ``ValueError`` for a non-square mask or a block below 1. Source: Child et al. (2019),
    section 4.3 (block-sparse kernels); FlexAttention's ``BlockMask`` counts the same tiles.
    """
    mask = np.asarray(mask, dtype=bool)
    block = _validate_positive_int("block", block)
    if mask.ndim != 2 or mask.shape[0] != mask.shape[1]:
        raise ValueError(f"mask must be square (n, n), got {mask.shape}")
    tiles = -(-mask.shape[0] // block)
    padded = np.zeros((tiles * block, tiles * block), dtype=bool)
    padded[:mask.shape[0], :mask.shape[1]] = mask
    return float(padded.reshape(tiles, block, tiles, block).any(axis=(1, 3)).mean())


def mask_density(mask: np.ndarray) -> float:
    """Fraction of the n x n scores a pattern keeps."""
    mask = np.asarray(mask, dtype=bool)
    return float(mask.mean()) if mask.size else 0.0
