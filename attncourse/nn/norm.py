"""Normalisation layers of a block: LayerNorm, RMSNorm, or none, chosen by name; the residual connection.

LayerNorm (Ba et al. 2016) centres each position's features and divides by their
standard deviation, then applies a gain and a bias. RMSNorm (Zhang and Sennrich
2019) drops the centring and the bias: it only rescales, by the root mean square,

    RMSNorm(x) = x / sqrt(mean_i x_i^2 + eps) * g                  (their eq. (4))

which is cheaper and, in their experiments, as good. Llama-style models use it
before every sublayer and at the end (SmolLM2: eps = 1e-5). ``"none"`` is the
identity, as in the attention-only models of chapter 9. :func:`residual` wraps a sublayer
in its normalisation and residual connection, before (pre-norm) or after (post-norm).

References
----------
Ba, Kiros, Hinton (2016), "Layer Normalization", section 3, eq. (4).
Zhang and Sennrich (2019), "Root Mean Square Layer Normalization", section 4, eq. (4).
Vaswani et al. (2017), sections 3.1 and 5.4; Xiong et al. (2020) (pre-norm): :func:`residual`.
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
    """One sublayer with its residual connection and layer normalisation.

    Post-norm (``norm_first=False``, section 3.1 of the paper):
    ``LayerNorm(x + Dropout(Sublayer(x)))``. Pre-norm (``norm_first=True``):
    ``x + Dropout(Sublayer(LayerNorm(x)))``.

    Parameters
    ----------
    x : (batch, seq_len, d_model)
    sublayer : callable
        Maps (batch, seq_len, d_model) to ``(output (batch, seq_len, d_model), weights or None)``.
    norm : nn.LayerNorm
    dropout : nn.Dropout
        Residual dropout (section 5.4).
    norm_first : bool

    Returns
    -------
    x : (batch, seq_len, d_model)
    weights : whatever ``sublayer`` returned as weights

    References
    ----------
    Vaswani et al. (2017), sections 3.1 and 5.4; Xiong et al. (2020) for pre-norm.
    """
    if norm_first:
        out, weights = sublayer(norm(x))
        return x + dropout(out), weights
    out, weights = sublayer(x)
    return norm(x + dropout(out)), weights


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * g over the last axis (Zhang and Sennrich 2019, eq. (4)).

    Parameters
    ----------
    d_model : int
        Width of the last axis.
    eps : float
        Added to the mean square, > 0 (1e-5 in Llama-style models).

    Attributes
    ----------
    weight : nn.Parameter (d_model,)
        The gain g, initialised to ones.

    Raises
    ------
    ValueError
        If ``d_model`` is not a positive int or ``eps`` is not > 0.

    Notes
    -----
    Half-precision inputs are normalised in float32 and rounded back once, so
    that the mean of squares does not overflow or lose its small terms.
    Equals ``torch.nn.RMSNorm(d_model, eps)`` (tested).
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
        """``x (..., d_model)`` -> same shape and dtype."""
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
