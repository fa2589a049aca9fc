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

import math
from dataclasses import dataclass

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


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0,
               scaling: RopeScaling | None = None) -> torch.Tensor:
    """Rotate each feature pair (x_{2i}, x_{2i+1}) by the angle position * theta_i (eq. (34), section 3.4.2).

    Parameters
    ----------
    x : (..., seq_len, d_k)
        Queries or keys of one or more heads, e.g. ``(batch, num_heads, seq_len, d_k)``.
    positions : (seq_len,) int tensor
        Position m of each row (e.g. ``offset + arange(seq_len)`` while decoding with a cache).
    base : float
        See :func:`rope_frequencies`.
    scaling : RopeScaling, optional
        Rotate by its frequencies theta'_i instead, and multiply by its
        :attr:`~RopeScaling.attention_factor` (YaRN's temperature; 1 for the others).

    Returns
    -------
    Tensor, same shape and dtype as ``x``
        The rotated vectors; norms are unchanged (times YaRN's factor), and position 0 is
        left as it is.

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
    if scaling is None:
        theta, factor = rope_frequencies(x.shape[-1], base), 1.0
    else:
        theta, factor = scaling.frequencies(x.shape[-1], base), scaling.attention_factor
    angles = positions.to(device=x.device, dtype=torch.float64)[:, None] * theta.to(x.device)  # (seq_len, d_k/2)
    cos, sin = (factor * angles.cos()).to(x.dtype), (factor * angles.sin()).to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return rotated.flatten(-2)


# ---- stretching RoPE past the training length (chapter 12) ----------------------------------

#: The values of :class:`RopeScaling`'s ``method``.
ROPE_SCALINGS: tuple[str, ...] = ("pi", "ntk", "yarn")


@dataclass(frozen=True)
class RopeScaling:
    """A change of RoPE's frequencies that stretches a model trained on ``original_len`` positions.

    Each method replaces theta_i = base^(-2i / d) (``d = d_k``) by theta'_i, for a scale
    factor s = ``factor`` (the new length over the training length):

    - ``"pi"``, position interpolation (Chen et al. 2023, section 2.2):
      theta'_i = theta_i / s, every position m is read as m / s;
    - ``"ntk"``, "NTK-aware" scaling (bloc97 2023; Peng et al. 2023, section 3.1): a larger
      base, b' = b s^(d / (d - 2)), so that the fastest pair keeps its frequency and the
      slowest is divided by s exactly;
    - ``"yarn"`` (Peng et al. 2023, sections 3.2 and 3.4): "NTK-by-parts" by frequency band,
      with the ratio r_i = L / lambda_i of the training length L = ``original_len`` to the
      wavelength lambda_i = 2 pi / theta_i, the ramp gamma(r) = clip((r - alpha) /
      (beta - alpha), 0, 1) and theta'_i = (1 - gamma(r_i)) theta_i / s + gamma(r_i) theta_i:
      pairs that turn many times within L keep their frequency, pairs that turn less than
      once are interpolated; plus the attention temperature sqrt(1 / t) = 0.1 ln s + 1 by
      which queries and keys are both multiplied (:attr:`attention_factor`).

    Attributes
    ----------
    method : {"pi", "ntk", "yarn"}
    factor : float
        s >= 1; 1 leaves theta unchanged (and YaRN's temperature at 1).
    original_len : int, optional
        L, the training length; YaRN needs it, the others ignore it.
    alpha, beta : float
        YaRN's ramp bounds (1 and 32 for Llama in the paper), 0 <= alpha < beta.

    Raises
    ------
    ValueError
        If ``method`` is unknown, ``factor < 1``, YaRN lacks ``original_len``, or the ramp
        bounds are out of order.

    References
    ----------
    Chen, Wong, Chen, Tian (2023), "Extending Context Window of Large Language Models via
    Positional Interpolation", section 2.2.
    Peng, Quesnelle, Fan, Shippole (2023), "YaRN: Efficient Context Window Extension of Large
    Language Models", sections 3.1 (NTK-aware), 3.2 (NTK-by-parts) and 3.4 (temperature).
    """

    method: str
    factor: float
    original_len: int | None = None
    alpha: float = 1.0
    beta: float = 32.0

    def __post_init__(self) -> None:
        if self.method not in ROPE_SCALINGS:
            raise ValueError(f"rope_scaling must be one of {ROPE_SCALINGS}, got {self.method!r}")
        if isinstance(self.factor, bool) or not float(self.factor) >= 1:
            raise ValueError(f"rope_factor must be a number >= 1 (new length / training length), "
                             f"got {self.factor!r}")
        object.__setattr__(self, "factor", float(self.factor))
        if self.method == "yarn" and (self.original_len is None or isinstance(self.original_len, bool)
                                      or int(self.original_len) != self.original_len
                                      or self.original_len < 1):
            raise ValueError(f"rope_scaling='yarn' needs the training length original_len as a "
                             f"positive int, got {self.original_len!r}")
        if not 0 <= self.alpha < self.beta:
            raise ValueError(f"YaRN's ramp needs 0 <= alpha < beta, got alpha={self.alpha}, beta={self.beta}")

    def frequencies(self, d_k: int, base: float = 10000.0) -> torch.Tensor:
        """theta'_i for i = 0 .. d_k/2 - 1: ``(d_k // 2,)`` float64, radians per position.

        Raises
        ------
        ValueError
            As :func:`rope_frequencies`.
        """
        s = self.factor
        if self.method == "ntk":
            # one pair (d_k = 2) turns at theta_0 = 1 whatever the base: nothing to change
            return rope_frequencies(d_k, base * s ** (d_k / (d_k - 2)) if d_k > 2 else base)
        theta = rope_frequencies(d_k, base)
        if self.method == "pi":
            return theta / s
        gamma = yarn_ramp(self.original_len * theta / (2 * math.pi), self.alpha, self.beta)
        return (1 - gamma) * theta / s + gamma * theta

    @property
    def attention_factor(self) -> float:
        """sqrt(1 / t): what queries and keys are multiplied by (YaRN's 0.1 ln s + 1; else 1)."""
        return 0.1 * math.log(self.factor) + 1.0 if self.method == "yarn" else 1.0


def yarn_ramp(r: torch.Tensor, alpha: float = 1.0, beta: float = 32.0) -> torch.Tensor:
    """YaRN's ramp gamma(r): 0 for r < alpha, 1 for r > beta, linear between (Peng et al. 2023, section 3.2).

    Parameters
    ----------
    r : tensor
        Rotations of each pair within the training length, L / lambda_i.
    """
    return ((r - alpha) / (beta - alpha)).clamp(0.0, 1.0)
