"""Sinusoidal positional encodings in NumPy, and the rotation that shifts them (chapter 5).

Source: Vaswani et al. (2017), "Attention Is All You Need", section 3.5.
"""

from __future__ import annotations

import numpy as np


def _validate_d_model(d_model: int) -> None:
    if int(d_model) < 2 or int(d_model) % 2 != 0:
        raise ValueError(
            f"d_model must be a positive even number (one sine and one cosine per frequency), got {d_model}"
        )


def positional_frequencies(d_model: int, base: float = 10000.0) -> np.ndarray:
    """omega_i = 1 / base^(2i / d_model), ``(d_model // 2,)``.

    Raises ValueError if ``d_model`` is not a positive even number or ``base <= 1``.
    """
    _validate_d_model(d_model)
    if base <= 1:
        raise ValueError(f"base must be greater than 1, got {base}")
    two_i = np.arange(0, d_model, 2, dtype=np.float64)
    return base ** (-two_i / d_model)


def sinusoidal_encoding(max_len: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """PE(pos, i) of positions 0 .. max_len - 1, ``(max_len, d_model)`` (Vaswani et al. 2017).

    Raises ValueError if ``max_len < 1`` or ``d_model`` is not a positive even number.
    """
    if int(max_len) < 1:
        raise ValueError(f"max_len must be at least 1, got {max_len}")
    omega = positional_frequencies(d_model, base)
    angles = np.arange(max_len, dtype=np.float64)[:, None] * omega[None, :]  # (max_len, d_model / 2)
    pe = np.empty((int(max_len), int(d_model)), dtype=np.float64)
    pe[:, 0::2] = np.sin(angles)
    pe[:, 1::2] = np.cos(angles)
    return pe


def relative_shift_matrix(k: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """M_k ``(d_model, d_model)`` with PE(pos + k) = PE(pos) @ M_k.

    Raises ValueError if ``d_model`` is not a positive even number.
    """
    theta = k * positional_frequencies(d_model, base)  # (d_model / 2,)
    cos, sin = np.cos(theta), np.sin(theta)
    m = np.zeros((int(d_model), int(d_model)), dtype=np.float64)
    even, odd = np.arange(0, d_model, 2), np.arange(1, d_model, 2)
    m[even, even] = cos
    m[even, odd] = -sin
    m[odd, even] = sin
    m[odd, odd] = cos
    return m
