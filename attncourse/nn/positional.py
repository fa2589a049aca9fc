"""Positional encodings: sinusoids or a learned table (Vaswani et al. 2017)."""

from __future__ import annotations

import torch
from torch import nn

from attncourse.functional.positional import sinusoidal_encoding


def _validate_input(x: torch.Tensor, offset: int, max_len: int, d_model: int) -> None:
    if x.dim() != 3 or x.shape[-1] != d_model:
        raise ValueError(f"x must be (batch, seq_len, d_model={d_model}), got {tuple(x.shape)}")
    if offset < 0 or offset + x.shape[1] > max_len:
        raise ValueError(
            f"positions {offset}..{offset + x.shape[1] - 1} do not fit max_len={max_len}; "
            f"build the model with a larger max_len (x has shape {tuple(x.shape)})"
        )


class SinusoidalPositionalEncoding(nn.Module):
    """Add the sinusoids PE(pos) of Vaswani et al. (2017), section 3.5.

    Raises ``ValueError`` if ``max_len < 1`` or ``d_model`` is not a positive even
    number.
    """

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        self.max_len, self.d_model = int(max_len), int(d_model)
        table = torch.from_numpy(sinusoidal_encoding(max_len, d_model)).to(torch.get_default_dtype())
        self.register_buffer("pe", table, persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x + PE for positions ``offset ..``: (batch, seq_len, d_model) -> same shape.

        Raises ``ValueError`` if ``x`` is not 3-D with ``d_model`` or a position is
        outside ``[0, max_len)``.
        """
        _validate_input(x, offset, self.max_len, self.d_model)
        return x + self.pe[offset : offset + x.shape[1]]


class LearnedPositionalEncoding(nn.Module):
    """Add a learned row P[pos] per position (Vaswani et al. 2017, Table 3 (E)).

    Raises ``ValueError`` if ``max_len`` or ``d_model`` is not positive.
    """

    def __init__(self, max_len: int, d_model: int) -> None:
        super().__init__()
        if int(max_len) < 1 or int(d_model) < 1:
            raise ValueError(f"max_len and d_model must be positive, got max_len={max_len}, d_model={d_model}")
        self.max_len, self.d_model = int(max_len), int(d_model)
        self.embedding = nn.Embedding(self.max_len, self.d_model)

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        """x + P[pos] for positions ``offset ..``, (batch, seq_len, d_model)."""
        _validate_input(x, offset, self.max_len, self.d_model)
        return x + self.embedding.weight[offset : offset + x.shape[1]]
