"""Scores that say what an attention head does, from its weights or its circuit (chapter 7).

Source: Olsson et al. (2022), "In-context Learning and Induction Heads".
"""

from __future__ import annotations

import torch


def _square_weights(weights: torch.Tensor, name: str = "weights", needs_two: str = "") -> int:
    """seq_len of square ``(..., seq_len, seq_len)`` weights, else ValueError."""
    if weights.dim() < 2 or weights.shape[-1] != weights.shape[-2]:
        raise ValueError(f"{name} must be (..., seq_len, seq_len), got {tuple(weights.shape)}")
    if needs_two and weights.shape[-1] < 2:
        raise ValueError(f"{needs_two} needs at least two positions")
    return weights.shape[-1]


def prefix_match_mask(tokens: torch.Tensor) -> torch.Tensor:
    """Prefix matches ``(..., seq_len, seq_len)``: ``tokens[j - 1] == tokens[i]``, j >= 1."""
    n = tokens.shape[-1]
    same = tokens[..., :, None] == tokens[..., None, :]        # (.., i, j - 1)
    mask = torch.zeros(*tokens.shape, n, dtype=torch.bool, device=tokens.device)
    mask[..., :, 1:] = same[..., :, :-1]                       # key j = (j - 1) + 1
    return mask & torch.ones(n, n, dtype=torch.bool, device=tokens.device).tril()


def prefix_matching_score(weights: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Mean attention to the tokens after earlier copies of the query's token, in [0, 1].

    Shapes: weights (..., seq_len, seq_len); tokens (seq_len,) or (batch, seq_len). Returns
    (...,). Raises ValueError if the shapes do not match or no token occurs twice.
    """
    n = _square_weights(weights)
    if tokens.shape[-1] != n or tokens.dim() not in (1, 2):
        raise ValueError(f"tokens must be (seq_len,) or (batch, seq_len) with seq_len={n}, "
                         f"got {tuple(tokens.shape)}")
    mask = prefix_match_mask(tokens.to(weights.device))
    if tokens.dim() == 2:
        if weights.dim() != 4 or weights.shape[0] != tokens.shape[0]:
            raise ValueError(f"with tokens {tuple(tokens.shape)}, weights must be "
                             f"(batch, num_heads, seq_len, seq_len), got {tuple(weights.shape)}")
        mask = mask[:, None]
    has_match = mask.any(-1)                                   # (..., seq_len)
    if not has_match.any():
        raise ValueError("no token occurs twice in tokens: the prefix-matching score is undefined")
    per_query = (weights * mask).sum(-1)
    count = has_match.sum(-1).clamp(min=1)
    return (per_query * has_match).sum(-1) / count


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """Mean attention from query i >= 1 to key i - 1: weights (..., seq_len, seq_len) -> (...,).

    Raises ValueError if the weights are not square or seq_len < 2.
    """
    _square_weights(weights, needs_two="previous_token_score")
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(-1)


def first_position_attention(weights: torch.Tensor) -> torch.Tensor:
    """Mean attention of queries 1 .. n - 1 to key 0 (Xiao et al. 2023, sec. 3.1): -> (...,).

    Raises ValueError if the weights are not square or seq_len < 2.
    """
    _square_weights(weights, needs_two="first_position_attention")
    return weights[..., 1:, 0].mean(-1)


def uniform_first_position(seq_len: int) -> float:
    """Uniform causal attention's first-position score: mean 1 / (i + 1), i = 1 .. n - 1."""
    if seq_len < 2:
        raise ValueError(f"seq_len must be at least 2, got {seq_len}")
    return float(sum(1.0 / (i + 1) for i in range(1, seq_len)) / (seq_len - 1))


def copying_score(ov: torch.Tensor) -> torch.Tensor:
    """Eigenvalue copying score ``sum(lambda) / sum(|lambda|)`` of ov ``(..., vocab, vocab)``.

    Raises ValueError if ``ov`` is not square. Source: Elhage et al. (2021).
    """
    _square_weights(ov, "ov")
    eigenvalues = torch.linalg.eigvals(ov.double())
    total = eigenvalues.abs().sum(-1)
    return (eigenvalues.real.sum(-1) / total.clamp(min=torch.finfo(total.dtype).tiny)).to(ov.dtype)


def in_context_learning_score(losses: torch.Tensor, early: int, late: int) -> torch.Tensor:
    """Loss at position ``late`` minus loss at ``early``, averaged: losses (..., seq_len).

    Raises ValueError if a position is outside ``losses``. Source: Olsson et al. (2022).
    """
    n = losses.shape[-1]
    for name, value in (("early", early), ("late", late)):
        if not -n <= value < n:
            raise ValueError(f"{name}={value} is outside seq_len={n}")
    return (losses[..., late] - losses[..., early]).mean()
