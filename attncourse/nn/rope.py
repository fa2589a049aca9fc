"""Rotary position embedding, RoPE (Su et al. 2021): positions as rotations of queries and keys.

Sinusoidal and learned encodings *add* a vector to each token embedding
(chapter 5). RoPE instead *rotates* each query and key, after the projections,
by an angle proportional to its position. The d_k features are taken in pairs
(x_{2i}, x_{2i+1}), i = 0 .. d_k/2 - 1, and pair i of the vector at position m
is turned by the angle m * theta_i (Su et al. 2021, section 3.4.2, equation (34)):

    theta_i = base^(-2i / d_k),  base = 10000                     (equation (15))

    [y_{2i}  ]   [cos(m theta_i)  -sin(m theta_i)] [x_{2i}  ]
    [y_{2i+1}] = [sin(m theta_i)   cos(m theta_i)] [x_{2i+1}]

Written with complex numbers z_i = x_{2i} + j x_{2i+1}, the rotation is
z_i * exp(j m theta_i). A dot product of a rotated query at position m and a
rotated key at position n is Re(sum_i q_i conj(k_i) exp(j (m - n) theta_i))
(section 3.4.3, equation (35)): it depends on the positions only through the
offset m - n (equation (16) writes the same with the rotation matrices), which
is what makes RoPE a *relative* encoding although it is applied to each vector
alone, and what lets a KV cache store keys already rotated.

References
----------
Su, Lu, Pan, Murtadha, Wen, Liu (2021), "RoFormer: Enhanced Transformer with
Rotary Position Embedding", section 3.2, equations (14)-(16); section 3.4.2,
equation (34); section 3.4.3, equation (35).
"""

from __future__ import annotations

import torch


def rope_frequencies(d_k: int, base: float = 10000.0) -> torch.Tensor:
    """theta_i = base^(-2i / d_k) for i = 0 .. d_k/2 - 1 (Su et al. 2021, equation (15)).

    Parameters
    ----------
    d_k : int
        Width of one head's queries and keys; must be even.
    base : float
        10000 in the paper.

    Returns
    -------
    (d_k // 2,) float64 tensor
        Angles in radians per position, from 1 down to base^(-(d_k - 2) / d_k).

    Raises
    ------
    ValueError
        If ``d_k`` is not a positive even number or ``base <= 1``.
    """
    if int(d_k) != d_k or d_k < 2 or d_k % 2:
        raise ValueError(f"RoPE needs an even d_k >= 2 (features are rotated in pairs), got d_k={d_k}")
    if not base > 1:
        raise ValueError(f"RoPE's base must be > 1, got {base}")
    return base ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """Rotate each feature pair (x_{2i}, x_{2i+1}) by the angle position * theta_i (eq. (34), section 3.4.2).

    Parameters
    ----------
    x : (..., seq_len, d_k)
        Queries or keys of one or more heads, e.g. ``(batch, num_heads, seq_len, d_k)``.
    positions : (seq_len,) int tensor
        Position m of each row (e.g. ``offset + arange(seq_len)`` while decoding with a cache).
    base : float
        See :func:`rope_frequencies`.

    Returns
    -------
    Tensor, same shape and dtype as ``x``
        The rotated vectors; norms are unchanged, and position 0 is left as it is.

    Raises
    ------
    ValueError
        If ``d_k`` is odd or ``positions`` does not have ``seq_len`` entries.
    """
    if x.dim() < 2 or positions.dim() != 1 or positions.shape[0] != x.shape[-2]:
        raise ValueError(
            f"apply_rope needs x (..., seq_len, d_k) and positions (seq_len,), got x {tuple(x.shape)} "
            f"and positions {tuple(positions.shape)}"
        )
    theta = rope_frequencies(x.shape[-1], base).to(x.device)
    angles = positions.to(device=x.device, dtype=torch.float64)[:, None] * theta  # (seq_len, d_k / 2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2)
