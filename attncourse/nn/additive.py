"""Bahdanau's additive attention as a batched ``torch.nn.Module`` (chapter 2).

Source: Bahdanau, Cho, Bengio (2015), "Neural Machine Translation by Jointly Learning to
Align and Translate", section 3.1, eqs. (5)-(6), appendices A.1.2 and B.1.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attncourse.functional.torch_attention import masked_softmax


def validate_key_mask(mask: torch.Tensor, name: str, keys: torch.Tensor, keys_name: str) -> None:
    """Refuse a mask of the source positions that does not fit ``keys``.

    ``mask`` is (batch, src_len) bool, True at real tokens. Raises ``TypeError`` if
    ``mask`` is not boolean, ``ValueError`` if its shape is not ``(batch, src_len)`` of
    ``keys`` (batch, src_len, ...).
    """
    batch, src_len = keys.shape[0], keys.shape[1]
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be boolean (True = real token), got dtype {mask.dtype}")
    if tuple(mask.shape) != (batch, src_len):
        raise ValueError(
            f"{name} must be (batch, src_len) = {(batch, src_len)} to fit {keys_name} {tuple(keys.shape)}, "
            f"got {tuple(mask.shape)}"
        )


class AdditiveAttention(nn.Module):
    """Additive attention e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j), one query per row.

    ``query_dim`` n, ``key_dim`` 2n (bidirectional encoder), ``attn_dim`` n'; v_a starts
    at zero, so attention starts uniform (appendix B.1). Raises ``ValueError`` for a
    non-positive size. Source: Bahdanau et al. (2015), section 3.1, eqs. (5)-(6).
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int, bias: bool = False) -> None:
        super().__init__()
        for name, value in (("query_dim", query_dim), ("key_dim", key_dim), ("attn_dim", attn_dim)):
            if int(value) < 1:
                raise ValueError(f"{name} must be a positive int, got {value}")
        self.query_dim, self.key_dim, self.attn_dim = int(query_dim), int(key_dim), int(attn_dim)
        self.w_a = nn.Parameter(torch.empty(attn_dim, query_dim))
        self.u_a = nn.Parameter(torch.empty(attn_dim, key_dim))
        self.v_a = nn.Parameter(torch.zeros(attn_dim))
        self.b_a = nn.Parameter(torch.zeros(attn_dim)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """W_a, U_a ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)); v_a = b_a = 0."""
        for w in (self.w_a, self.u_a):
            bound = 1.0 / math.sqrt(w.shape[1])
            nn.init.uniform_(w, -bound, bound)
        nn.init.zeros_(self.v_a)
        if self.b_a is not None:
            nn.init.zeros_(self.b_a)

    def extra_repr(self) -> str:
        return (f"query_dim={self.query_dim}, key_dim={self.key_dim}, attn_dim={self.attn_dim}, "
                f"bias={self.b_a is not None}")

    def project_keys(self, keys: torch.Tensor) -> torch.Tensor:
        """U_a h_j (+ b_a): (batch, src_len, key_dim) -> (batch, src_len, attn_dim).

        Computed once per sentence, passed back as ``projected_keys``. Raises
        ``ValueError`` if ``keys`` does not have this module's ``key_dim``.
        """
        if keys.dim() != 3 or keys.shape[-1] != self.key_dim:
            raise ValueError(
                f"keys must be (batch, src_len, key_dim={self.key_dim}), got {tuple(keys.shape)}"
            )
        projected = keys @ self.u_a.T
        return projected if self.b_a is None else projected + self.b_a

    def forward(
        self,
        query: torch.Tensor,
        keys: torch.Tensor,
        mask: torch.Tensor | None,
        projected_keys: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Context c_i (eq. 5) and weights alpha_ij (eq. 6) for one decoding step.

        Shapes: ``query`` (batch, query_dim), ``keys`` (batch, src_len, key_dim),
        ``mask`` (batch, src_len) bool (True = real token), ``projected_keys`` (batch,
        src_len, attn_dim) -> context (batch, key_dim), weights (batch, src_len). A
        fully masked row gets zero weights. Raises ``ValueError`` if the shapes do not
        fit, ``TypeError`` if ``mask`` is not boolean.
        """
        if query.dim() != 2 or query.shape[-1] != self.query_dim:
            raise ValueError(f"query must be (batch, query_dim={self.query_dim}), got {tuple(query.shape)}")
        if projected_keys is None:
            projected_keys = self.project_keys(keys)
        elif keys.dim() != 3 or keys.shape[-1] != self.key_dim:
            raise ValueError(f"keys must be (batch, src_len, key_dim={self.key_dim}), got {tuple(keys.shape)}")
        batch, src_len = keys.shape[0], keys.shape[1]
        if query.shape[0] != batch:
            raise ValueError(
                f"query {tuple(query.shape)} and keys {tuple(keys.shape)} have different batch sizes"
            )
        if tuple(projected_keys.shape) != (batch, src_len, self.attn_dim):
            raise ValueError(
                f"projected_keys must be (batch, src_len, attn_dim) = {(batch, src_len, self.attn_dim)} "
                f"to fit keys {tuple(keys.shape)}, got {tuple(projected_keys.shape)}"
            )
        if mask is not None:
            validate_key_mask(mask, "mask", keys, "keys")
        hidden = torch.tanh((query @ self.w_a.T).unsqueeze(1) + projected_keys)  # (batch, src_len, attn_dim)
        scores = hidden @ self.v_a  # e_ij: (batch, src_len)
        weights = masked_softmax(scores, mask, dim=-1)  # alpha_ij
        context = (weights.unsqueeze(1) @ keys).squeeze(1)  # c_i = sum_j alpha_ij h_j
        return context, weights
