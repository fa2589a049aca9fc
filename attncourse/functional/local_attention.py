"""Local attention that reads only its window of 2D + 1 keys per query.

Source: Luong et al. (2015), section 3.2, eqs. (10)-(11).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attncourse.functional.torch_attention import masked_softmax


@dataclass(frozen=True)
class WindowedAttention:
    """What :func:`windowed_attention` returns.

    Fields: context (batch, d_v); weights, positions (batch, 2D + 1).
    """

    context: torch.Tensor
    weights: torch.Tensor
    positions: torch.Tensor

    def full_weights(self, src_len: int) -> torch.Tensor:
        """The weights over every source position, (batch, src_len), 0 outside the window."""
        full = self.weights.new_zeros(self.weights.shape[0], src_len)
        return full.scatter_add(1, self.positions, self.weights)


def windowed_attention(
    query: torch.Tensor,
    keys: torch.Tensor,
    values: torch.Tensor,
    p_t: torch.Tensor,
    D: int,
    src_lengths: torch.Tensor | None = None,
    gaussian: bool = True,
) -> WindowedAttention:
    """Dot-product attention over the window around p_t only (Luong et al. 2015, sec. 3.2).

    Shapes: query (batch, d_k); keys (batch, src_len, d_k); values (batch, src_len, d_v);
    p_t (batch,); src_lengths (batch,). Raises ValueError if ``D`` is not a positive int
    or the shapes do not fit.
    """
    if isinstance(D, bool) or not isinstance(D, int) or D < 1:
        raise ValueError(f"D must be a positive int, got {D!r}")
    if query.dim() != 2 or keys.dim() != 3 or values.dim() != 3:
        raise ValueError(f"query must be (batch, d_k), keys (batch, src_len, d_k) and values (batch, src_len, d_v); "
                         f"got query {tuple(query.shape)}, keys {tuple(keys.shape)}, values {tuple(values.shape)}")
    batch, src_len, d_k = keys.shape
    if query.shape != (batch, d_k) or values.shape[:2] != (batch, src_len) or p_t.shape != (batch,):
        raise ValueError(f"shapes do not fit: query {tuple(query.shape)}, keys {tuple(keys.shape)}, "
                         f"values {tuple(values.shape)}, p_t {tuple(p_t.shape)}")
    if src_lengths is None:
        src_lengths = torch.full((batch,), src_len, device=keys.device)
    offsets = torch.arange(2 * D + 1, device=keys.device)
    # Slot 0 is the first integer position inside the window; the window's edge is a hard cut, so no gradient.
    positions = torch.ceil(p_t.detach() - D).long()[:, None] + offsets
    inside = ((positions - p_t.detach()[:, None]).abs() <= D) & (positions >= 0) & (positions < src_lengths[:, None])
    positions = positions.clamp(0, src_len - 1)
    # Rows of the flattened (batch * src_len, d) states: index_select's backward is an index_add,
    # several times faster than the backward of a gather with an expanded index.
    rows = (positions + src_len * torch.arange(batch, device=keys.device)[:, None]).reshape(-1)
    k = keys.reshape(batch * src_len, d_k).index_select(0, rows).view(batch, -1, d_k)      # (batch, 2D+1, d_k)
    v = values.reshape(batch * src_len, -1).index_select(0, rows).view(batch, 2 * D + 1, -1)  # (batch, 2D+1, d_v)
    weights = masked_softmax((k @ query[..., None]).squeeze(-1), inside)
    if gaussian:
        sigma = D / 2
        weights = weights * torch.exp(-((positions.to(p_t.dtype) - p_t[:, None]) ** 2) / (2 * sigma**2))
    context = (weights[..., None] * v).sum(dim=1)
    return WindowedAttention(context=context, weights=weights, positions=positions)


__all__ = ["WindowedAttention", "windowed_attention"]
