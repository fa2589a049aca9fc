"""Normalisation layers (LayerNorm, RMSNorm or none) and the residual connection.

Source: Zhang and Sennrich (2019), "Root Mean Square Layer Normalization", eq. (4).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

Weights = torch.Tensor | None
SublayerFn = Callable[[torch.Tensor], tuple[torch.Tensor, Weights]]


def residual(
    x: torch.Tensor, sublayer: SublayerFn, norm: nn.LayerNorm, dropout: nn.Dropout, norm_first: bool
) -> tuple[torch.Tensor, Weights]:
    """One sublayer with its residual connection and normalisation.

    Pre-norm x + dropout(sublayer(norm(x))), post-norm norm(x + dropout(sublayer(x))).
    Source: Vaswani et al. (2017), sections 3.1 and 5.4.
    """
    if norm_first:
        out, weights = sublayer(norm(x))
        return x + dropout(out), weights
    out, weights = sublayer(x)
    return norm(x + dropout(out)), weights


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * g over the last axis (Zhang, Sennrich 2019).

    Half-precision inputs are normalised in float32. Raises ``ValueError`` if
    ``d_model`` is not a positive int or ``eps <= 0``.
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        if isinstance(d_model, bool) or int(d_model) != d_model or d_model < 1:
            raise ValueError(f"d_model must be a positive int, got {d_model!r}")
        if not eps > 0:
            raise ValueError(f"eps must be > 0, got {eps!r}")
        self.d_model, self.eps = int(d_model), float(eps)
        self.weight = nn.Parameter(torch.ones(self.d_model))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., d_model) -> same shape and dtype."""
        if x.shape[-1:] != (self.d_model,):
            raise ValueError(f"x must end with d_model={self.d_model} features, got {tuple(x.shape)}")
        wide = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        normed = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.to(x.dtype) * self.weight

    def extra_repr(self) -> str:
        """Width and eps, as ``nn.LayerNorm`` prints them."""
        return f"{self.d_model}, eps={self.eps}"


#: Builders by name: ``(d_model, eps) -> module`` (:class:`~attncourse.nn.spec.NormSpec` picks one).
NORMS: dict[str, Callable[[int, float], nn.Module]] = {
    "layernorm": lambda d_model, eps: nn.LayerNorm(d_model, eps=eps),
    "rmsnorm": RMSNorm,
    "none": lambda d_model, eps: nn.Identity(),
}


__all__ = ["NORMS", "RMSNorm", "SublayerFn", "Weights", "residual"]
