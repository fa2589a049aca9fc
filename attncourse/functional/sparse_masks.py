"""Sparse attention patterns written as boolean masks (``True`` = may attend).

A pattern keeps only some of the n x n alignment scores. Writing it as a mask keeps the
maths of :func:`attncourse.functional.scaled_dot_product_attention` unchanged: masked
scores get zero weight, and the fraction of ``True`` entries is the fraction of scores a
sparse kernel would compute.

A *window* of w means one thing throughout the course: the w keys a query sees, itself
included. Causal, those are the w latest positions, ``0 <= i - j < w``; not causal, a
centred window, ``|i - j| <= (w - 1) / 2``, which needs an odd w. The same definition is
used by :func:`attncourse.nn.allowed_keys`, hence by ``CausalSelfAttention(window=w)`` and
``GPT(window=w)``.
"""

import numpy as np


def _validate_positive_int(name: str, value) -> int:
    # bool is an int subclass and 2.0 == 2, but a window of True or 2.5 keys is a mistake.
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def _positions(seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Query indices i as a column (n, 1) and key indices j as a row (1, n): a pattern is a rule on (i, j)."""
    positions = np.arange(_validate_positive_int("seq_len", seq_len))
    return positions[:, None], positions[None, :]


def validate_sliding_window(window, causal: bool = True) -> int:
    """Validate a window of ``window`` keys per query (the course's one definition).

    Parameters
    ----------
    window : int
        w >= 1; odd when ``causal`` is False (a centred window of (w - 1) / 2 keys on each
        side of the query).
    causal : bool

    Returns
    -------
    int
        ``window`` as a Python int.

    Raises
    ------
    ValueError
        If ``window`` is not a positive int (``2.5`` and ``True`` included), or is even
        while ``causal`` is False.
    """
    window = _validate_positive_int("window", window)
    if not causal and window % 2 == 0:
        raise ValueError(f"window must be odd when causal=False (a centred window of w keys "
                         f"has (w - 1) / 2 on each side), got {window}")
    return window


def sliding_window_mask(seq_len: int, window: int, causal: bool = True) -> np.ndarray:
    """Boolean sliding-window mask: each query sees the ``window`` keys nearest it.

    Causal: query i may attend to keys ``i - window + 1 <= j <= i``, the ``window`` latest
    tokens including itself. Mistral 7B (Jiang et al. 2023, section 2) counts its window
    W as the distance back instead, keys ``i - W .. i``: its W is ``window - 1`` here.
    Not causal (Longformer's local attention, Beltagy et al. 2020, section 3.1): keys
    ``|i - j| <= (window - 1) / 2``, a centred window of ``window`` tokens (odd); the
    cousin of Luong et al.'s (2015) local attention, eq. (9), with half-width
    D = (window - 1) / 2.

    Parameters
    ----------
    seq_len : int
        n, the number of queries and keys (>= 1).
    window : int
        w, keys seen by each query, itself included (>= 1; odd if not causal).
        ``window >= seq_len`` with ``causal=True`` gives the full causal mask.
    causal : bool
        Look back only (default) or both ways.

    Returns
    -------
    (seq_len, seq_len) bool
        ``mask[i, j]`` is ``True`` where query i may attend to key j.

    Raises
    ------
    ValueError
        If ``seq_len`` or ``window`` is not a positive int, or ``window`` is even with
        ``causal=False``.
    """
    query, key = _positions(seq_len)
    window = validate_sliding_window(window, causal)
    offset = query - key
    if causal:
        return (offset >= 0) & (offset < window)
    return np.abs(offset) <= (window - 1) // 2


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
        Keys j <= i only (default), or both ways: a band of 2l - 1 keys centred on the
        query, and summary keys on both sides.

    Returns
    -------
    (seq_len, seq_len) bool
        ``True`` where key j lies in query i's band or a multiple of l away from it.

    Raises
    ------
    ValueError
        If ``seq_len`` or ``stride`` is below 1.
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
    """Boolean *fixed* mask of the Sparse Transformer: a block, plus the last keys of every block.

    Positions are cut into blocks of ``stride`` (l). Query i may attend to key j when both
    lie in the same block, ``j // l == i // l`` (Child et al. 2019, section 4.2, A^(1)), or
    when j is one of the last ``summary`` (c) positions of its block,
    ``j mod l >= l - c`` (A^(2)); with ``causal``, only keys ``j <= i``. The summary
    positions carry what their block holds to every later query, so any key reaches any
    query in two steps, as in the strided pattern, without the strided pattern's
    dependence on the distance i - j.

    Parameters
    ----------
    seq_len : int
        n (>= 1).
    stride : int
        l, the block length (>= 1).
    summary : int
        c, summary positions per block, 1 <= c <= l (the paper uses c in {8, 16, 32} for
        l in {128, 256}).
    causal : bool
        Keys j <= i only (default), or both ways: the whole block, and the summary
        positions of later blocks too.

    Returns
    -------
    (seq_len, seq_len) bool
        ``True`` where key j lies in query i's block or is a summary position.

    Raises
    ------
    ValueError
        If a size is not a positive int, or ``summary > stride``.

    References
    ----------
    Child, Gray, Radford, Sutskever (2019), "Generating Long Sequences with Sparse
    Transformers", section 4.2, "fixed attention pattern".
    """
    query, key = _positions(seq_len)
    stride = _validate_positive_int("stride", stride)
    summary = _validate_positive_int("summary", summary)
    if summary > stride:
        raise ValueError(f"summary must be at most stride={stride}, got {summary}")
    mask = (query // stride == key // stride) | (key % stride >= stride - summary)
    return mask & (key <= query) if causal else mask


def global_tokens_mask(seq_len: int, window: int, global_tokens) -> np.ndarray:
    """Boolean Longformer mask: a centred sliding window plus a few global tokens.

    Every query sees the keys within ``(window - 1) / 2`` of it (as
    ``sliding_window_mask(seq_len, window, causal=False)``); a global token (for example
    the classification token at position 0) attends to every key, and every query
    attends to it. Beltagy et al. (2020), section 3.1, "Global Attention".

    Parameters
    ----------
    seq_len : int
        n (>= 1).
    window : int
        w, keys in the centred local window (odd, >= 1).
    global_tokens : iterable of int
        Positions with global attention, each in 0..seq_len-1.

    Returns
    -------
    (seq_len, seq_len) bool
        Symmetric; ``True`` where query i may attend to key j.

    Raises
    ------
    ValueError
        If a size is below 1, ``window`` is even, or a global position is out of range.

    Notes
    -----
    One global token adds one row and one column of scores. It connects any two tokens in
    two layers (A -> global token in one, global token -> B in the next), not in one. It
    sees every position, the future included, so it belongs in bidirectional encoders, as
    in Longformer, not in a causal model.
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
