"""Local attention that reads only its window: 2D + 1 keys per query instead of S.

:class:`attncourse.nn.LuongAttention` computes local attention the way the
paper describes it, and the way that is easiest to check: it scores all S
source positions and then gives those outside the window [p_t - D, p_t + D]
zero weight. That costs O(S) per target step, the same as global attention.
:func:`windowed_attention` first *gathers* the at most 2D + 1 encoder states
inside the window and scores only those, which is where local attention's
saving, O(T (2D + 1)) instead of O(T S) for a whole translation, comes from.
The two give the same context vectors and weights (tested), and
``benchmarks/local_attention.py`` times them side by side.

References
----------
Luong, Pham, Manning (2015), "Effective Approaches to Attention-based Neural
Machine Translation", EMNLP, section 3.2, equations (10)-(11).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attncourse.functional.torch_attention import masked_softmax


@dataclass(frozen=True)
class WindowedAttention:
    """What :func:`windowed_attention` returns.

    Attributes
    ----------
    context : (batch, d_v)
        c_t = sum over the window of a_t(s) v_s.
    weights : (batch, 2D + 1)
        a_t(s) for the positions in ``positions``; 0 where a slot falls outside
        the window or the sentence.
    positions : (batch, 2D + 1) long
        The source position of each slot, ceil(p_t - D) + 0..2D; slots outside
        the sentence are clamped into it and carry weight 0.
    """

    context: torch.Tensor
    weights: torch.Tensor
    positions: torch.Tensor

    def full_weights(self, src_len: int) -> torch.Tensor:
        """The weights spread back over every source position: (batch, src_len), 0 outside the window."""
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
    """Local attention with dot-product scores that reads only the window around p_t.

    For each query, the positions s with |s - p_t| <= D inside the sentence
    (at most 2D + 1 of them) are gathered from ``keys`` and ``values``; the
    weights are the softmax of q . k_s over them (eq. (7) with the dot score,
    eq. (8)), times exp(-(s - p_t)^2 / (2 sigma^2)) with sigma = D / 2 when
    ``gaussian`` (local-p, eq. (11)). For Luong's *general* score pass the
    projected keys W_a h_s as ``keys``.

    Parameters
    ----------
    query : (batch, d_k)
        The decoder states h_t.
    keys : (batch, src_len, d_k)
        The encoder states h_s (or W_a h_s).
    values : (batch, src_len, d_v)
        The encoder states h_s.
    p_t : (batch,) float
        Aligned positions, 0-based and real-valued (eq. (10) for local-p, t for
        local-m). The Gaussian passes gradients to p_t; the window's edges do not.
    D : int >= 1
        Half-width of the window.
    src_lengths : (batch,) long, optional
        Real length S of each source (padding follows); default ``src_len``.
    gaussian : bool
        Multiply by the Gaussian centred on p_t (local-p) or not (local-m).

    Returns
    -------
    WindowedAttention
        ``context (batch, d_v)``, ``weights (batch, 2D + 1)`` and
        ``positions (batch, 2D + 1)``. A window with no real position gives
        zero weights and a zero context.

    Raises
    ------
    ValueError
        If ``D`` is not a positive int or the shapes do not fit each other (the
        message names them).

    References
    ----------
    Luong et al. (2015), section 3.2, equations (7), (8), (10), (11).
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
