"""Position-wise feed-forward sublayers of a decoder block, chosen by name.

``"relu"`` is the Transformer's FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (Vaswani et
al. 2017, eq. (2); :class:`PositionwiseFeedForward`),
``"gelu"`` the same with GELU (Hendrycks and Gimpel 2016), as in GPT-2.
``"swiglu"`` is the gated unit of Shazeer (2020), used by Llama-style models:

    FFN_SwiGLU(x) = (Swish_1(x W) * x V) W_2                       (section 2, eq. (6))

with Swish_1 = SiLU, x -> x sigmoid(x), and * the element-wise product: one
projection ("gate", W) decides how much of the other ("up", V) passes, and W_2
("down") brings it back to d_model. It has three matrices where the plain FFN has
two, so for the same parameter count d_ff is about 2/3 as large (SmolLM2-135M:
d_model 576, d_ff 1536). ``"none"`` drops the sublayer (the attention-only
models of chapter 9).

References
----------
Shazeer (2020), "GLU Variants Improve Transformer", section 2, eq. (6).
Vaswani et al. (2017), section 3.3, eq. (2).
Hendrycks and Gimpel (2016), "Gaussian Error Linear Units (GELUs)".
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
    """FFN(x) = max(0, x W_1 + b_1) W_2 + b_2, the same two-layer MLP at every position.

    Parameters
    ----------
    d_model : int
        Input and output width.
    d_ff : int
        Inner width (2048 for d_model = 512 in the paper).
    activation : {"relu", "gelu"}
        max(0, .) as in the paper, or GELU (Hendrycks and Gimpel 2016) as in GPT-2.
    bias : bool
        Biases b_1, b_2.

    Attributes
    ----------
    w_1 : nn.Linear(d_model, d_ff)
    w_2 : nn.Linear(d_ff, d_model)

    Raises
    ------
    ValueError
        If ``activation`` is unknown.

    References
    ----------
    Vaswani et al. (2017), section 3.3, equation (2).
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", bias: bool = True) -> None:
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"activation must be one of {tuple(_ACTIVATIONS)}, got {activation!r}")
        self.activation = _ACTIVATIONS[activation]
        self.w_1 = nn.Linear(d_model, d_ff, bias=bias)
        self.w_2 = nn.Linear(d_ff, d_model, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x: (batch, seq_len, d_model) -> (batch, seq_len, d_model)``."""
        return self.w_2(self.activation(self.w_1(x)))


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)), the SwiGLU FFN (Shazeer 2020, eq. (6)).

    Parameters
    ----------
    d_model : int
        Input and output width.
    d_ff : int
        Inner width (1536 for d_model = 576 in SmolLM2-135M).
    bias : bool
        Biases on the three projections (Shazeer 2020 and Llama have none).

    Attributes
    ----------
    w_gate : nn.Linear(d_model, d_ff)
        W, whose SiLU gates.
    w_up : nn.Linear(d_model, d_ff)
        V, what is gated.
    w_down : nn.Linear(d_ff, d_model)
        W_2.

    Raises
    ------
    ValueError
        If a width is not a positive int.
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
        """``x: (batch, seq_len, d_model) -> (batch, seq_len, d_model)``."""
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
