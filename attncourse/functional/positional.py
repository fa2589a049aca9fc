"""Sinusoidal positional encodings in NumPy, and the rotation that shifts them.

Self-attention treats its input as a set: permute the tokens and the outputs
are permuted the same way. To let the model use word order, Vaswani et al.
(2017, section 3.5) add to each token embedding a vector that depends only on
its position pos. Dimension pair i (columns 2i and 2i+1) is a sine and a cosine
of the same angle,

    PE(pos, 2i)     = sin(pos * omega_i)
    PE(pos, 2i + 1) = cos(pos * omega_i),      omega_i = 1 / 10000^(2i / d_model),

so the wavelengths 2 pi / omega_i grow geometrically from 2 pi to 10000 * 2 pi.

The paper chose sinusoids because "for any fixed offset k, PE_{pos+k} can be
represented as a linear function of PE_pos". :func:`relative_shift_matrix`
builds that linear function: each pair (sin, cos) is turned by the angle
k * omega_i, a 2 x 2 rotation, and the rotation does not depend on pos.

This module is the one place where the formula lives; the torch module
:class:`attncourse.nn.positional.SinusoidalPositionalEncoding` reuses it.

References
----------
Vaswani et al. (2017), "Attention Is All You Need", section 3.5.
"""

from __future__ import annotations

import numpy as np


def _validate_d_model(d_model: int) -> None:
    if int(d_model) < 2 or int(d_model) % 2 != 0:
        raise ValueError(
            f"d_model must be a positive even number (one sine and one cosine per frequency), got {d_model}"
        )


def positional_frequencies(d_model: int, base: float = 10000.0) -> np.ndarray:
    """The angular frequencies omega_i = 1 / base^(2i / d_model), one per dimension pair.

    Parameters
    ----------
    d_model : int
        Model width; must be even.
    base : float
        10000 in the paper; the longest wavelength is ``2 * pi * base``.

    Returns
    -------
    (d_model // 2,) float64
        omega_0 = 1 down to omega_{d_model/2 - 1} = base^(-(d_model - 2) / d_model), in
        radians per position.

    Raises
    ------
    ValueError
        If ``d_model`` is not a positive even number or ``base <= 1``.

    References
    ----------
    Vaswani et al. (2017), section 3.5.
    """
    _validate_d_model(d_model)
    if base <= 1:
        raise ValueError(f"base must be greater than 1, got {base}")
    two_i = np.arange(0, d_model, 2, dtype=np.float64)
    return base ** (-two_i / d_model)


def sinusoidal_encoding(max_len: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """The sinusoidal positional encodings PE(pos, i) of positions 0..max_len-1.

    Parameters
    ----------
    max_len : int
        Number of positions.
    d_model : int
        Model width; must be even.
    base : float
        10000 in the paper.

    Returns
    -------
    (max_len, d_model) float64
        Row pos is PE(pos): column 2i holds sin(pos * omega_i), column 2i + 1
        holds cos(pos * omega_i) (see :func:`positional_frequencies`). Every
        entry lies in [-1, 1]; row 0 is (0, 1, 0, 1, ...).

    Raises
    ------
    ValueError
        If ``max_len < 1`` or ``d_model`` is not a positive even number.

    References
    ----------
    Vaswani et al. (2017), section 3.5.
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
    """The matrix M_k with PE(pos + k) = PE(pos) @ M_k for every position pos.

    PE(pos) is a row vector, as the rows of :func:`sinusoidal_encoding` and the
    token embeddings X elsewhere in the course, so M_k multiplies from the
    right. M_k is block diagonal; block i acts on the pair (sin a, cos a),
    a = pos * omega_i, and is the rotation by k * omega_i:

        [sin a, cos a] @ [[ cos(k omega_i), -sin(k omega_i)],
                          [ sin(k omega_i),  cos(k omega_i)]]
            = [sin(a + k omega_i), cos(a + k omega_i)].

    It depends on k but not on pos: shifting by k is the same linear map at
    every position. M_k is orthogonal, M_{-k} = M_k^T, and M_j @ M_k = M_{j+k}.

    Parameters
    ----------
    k : int
        The offset; may be negative (or fractional: the identity holds for any real k).
    d_model : int
        Model width; must be even.
    base : float
        10000 in the paper.

    Returns
    -------
    (d_model, d_model) float64
        M_k.

    Raises
    ------
    ValueError
        If ``d_model`` is not a positive even number.

    References
    ----------
    Vaswani et al. (2017), section 3.5 ("PE_{pos+k} can be represented as a
    linear function of PE_pos").
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
