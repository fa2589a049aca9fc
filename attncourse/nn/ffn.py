"""Position-wise feed-forward sublayers of a decoder block, chosen by name.

Source: Vaswani et al. (2017), section 3.3, eq. (2); Shazeer (2020), "GLU Variants
Improve Transformer", section 2, eq. (6).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

#: The FFN's activations by name.
_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {"relu": torch.relu,
                                                                    "gelu": torch.nn.functional.gelu}


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = act(x W_1 + b_1) W_2 + b_2 at every position.

    Source: Vaswani et al. (2017), section 3.3, eq. (2). Raises ``ValueError`` if
    ``activation`` is unknown.
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", bias: bool = True) -> None:
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {tuple(_ACTIVATIONS)}, got {activation!r}")
        self.activation = _ACTIVATIONS[activation]
        self.w_1 = nn.Linear(d_model, d_ff, bias=bias)
        self.w_2 = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, seq_len, d_model) -> (batch, seq_len, d_model)."""
        return self.w_2(self.activation(self.w_1(x)))


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)), the SwiGLU FFN (Shazeer 2020, eq. (6)).

    Raises ``ValueError`` if a width is not a positive int.
    """

    def __init__(self, d_model: int, d_ff: int, bias: bool = False) -> None:
        super().__init__()
        for name, value in (("d_model", d_model), ("d_ff", d_ff)):
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.w_gate = nn.Linear(d_model, d_ff, bias=bias)
        self.w_up = nn.Linear(d_model, d_ff, bias=bias)
        self.w_down = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(batch, seq_len, d_model) -> (batch, seq_len, d_model)."""
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


#: Builders by name: ``(d_model, d_ff, bias) -> module``, or None for no FFN sublayer
#: (:class:`~attncourse.nn.spec.FFNSpec` picks one).
FFNS: dict[str, Callable[[int, int, bool], nn.Module] | None] = {
    "relu": lambda d_model, d_ff, bias: PositionwiseFeedForward(d_model, d_ff, bias=bias),
    "gelu": lambda d_model, d_ff, bias: PositionwiseFeedForward(d_model, d_ff, "gelu", bias),
    "swiglu": SwiGLU,
    "none": None,
}


__all__ = ["FFNS", "PositionwiseFeedForward", "SwiGLU"]
