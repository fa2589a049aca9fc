"""Rotary position embedding, RoPE: positions as rotations of queries and keys.

Source: Su et al. (2021), "RoFormer", section 3.2, eqs. (14)-(16), section 3.4.2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch


def rope_frequencies(d_k: int, base: float = 10000.0) -> torch.Tensor:
    """theta_i = base^(-2i / d_k): (d_k // 2,) float64, radians per position.

    Raises ``ValueError`` if ``d_k`` is not a positive even number or ``base <= 1``.
    """
    if int(d_k) != d_k or d_k < 2 or d_k % 2:
        raise ValueError(f"RoPE needs an even d_k >= 2 (features are rotated in pairs), got d_k={d_k}")
    if not base > 1:
        raise ValueError(f"RoPE's base must be > 1, got {base}")
    return base ** (-torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0,
               scaling: RopeScaling | None = None) -> torch.Tensor:
    """Rotate each pair (x_{2i}, x_{2i+1}) by positions * theta_i.

    ``x`` is (..., seq_len, d_k). Source: Su et al. (2021), eq. (34). Raises
    ``ValueError`` if ``d_k`` is odd or ``positions`` does not have ``seq_len`` entries.
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
    """RoPE frequencies stretched for a model trained on ``original_len`` positions.

    Raises ``ValueError`` for an unknown method, ``factor < 1``, YaRN without
    ``original_len`` or ramp bounds out of order. Source: Peng et al. (2023), "YaRN",
    section 3.2.
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
        """theta'_i for i < d_k / 2: (d_k // 2,) float64, radians per position."""
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
        """sqrt(1 / t), applied to queries and keys (YaRN: 0.1 ln s + 1; else 1)."""
        return 0.1 * math.log(self.factor) + 1.0 if self.method == "yarn" else 1.0


def yarn_ramp(r: torch.Tensor, alpha: float = 1.0, beta: float = 32.0) -> torch.Tensor:
    """YaRN's ramp: 0 below alpha, 1 above beta, linear between (section 3.2)."""
    return ((r - alpha) / (beta - alpha)).clamp(0.0, 1.0)
