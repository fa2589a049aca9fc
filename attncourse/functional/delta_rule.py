"""The (gated) delta rule: a fast-weight memory that corrects what it stores (chapter 8).

Source: Yang et al. (2024), "Parallelizing Linear Transformers with the Delta Rule over
Sequence Length", section 3.
"""

from __future__ import annotations

import torch

from attncourse.functional.fast_weights import (
    decay_matrix,
    empty_state,
    read,
    validate_memory_inputs,
    write,
)


def delta_rule_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                         decay: torch.Tensor | None = None, initial_state: torch.Tensor | None = None,
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """The (gated) delta rule one step at a time (Schlag et al. 2021, section 4).

    Shapes: q, k (batch, heads, seq_len, d_k); v (batch, heads, seq_len, d_v); beta, decay
    (batch, heads, seq_len); initial_state (batch, heads, d_k, d_v). Returns out (batch,
    heads, seq_len, d_v) and the final state. Raises ValueError if the shapes do not fit or
    beta (in [0, 2]) or decay (in (0, 1]) leave their ranges.
    """
    validate_memory_inputs(q, k, v, initial_state, beta=beta, decay=decay)
    state = empty_state(q, v) if initial_state is None else initial_state
    outs = []
    for t in range(q.shape[2]):
        if decay is not None:
            state = decay[:, :, t, None, None] * state
        stored = read(state, k[:, :, t])  # what the memory returns for k_t now
        correction = beta[:, :, t, None] * (v[:, :, t] - stored)
        state = state + write(k[:, :, t], correction)
        outs.append(read(state, q[:, :, t]))
    out = torch.stack(outs, dim=2) if outs else v.new_zeros(v.shape)
    return out, state


def _within_chunk_decay(decay: torch.Tensor | None, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The decays within a chunk, Gamma ``(..., C, C)``, and from its start, g ``(..., C)``."""
    c = k.shape[-2]
    if decay is None:
        return k.new_ones(c, c).tril(), k.new_ones(k.shape[:-1])
    return decay_matrix(decay), torch.cumprod(decay, dim=-1)


def wy_representation(k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                      decay: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The WY factors w (batch, heads, C, d_k) and u (batch, heads, C, d_v) of one chunk.

    Shapes: k, v, beta, decay as :func:`delta_rule_recurrent`, with C positions.
    Source: Yang et al. (2024), section 3 (the UT transform).
    """
    return _wy(k, v, beta, *_within_chunk_decay(decay, k))


def _wy(k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, gamma: torch.Tensor,
        from_start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`wy_representation` from the chunk's decays, computed once by the caller."""
    system = beta[..., None] * (gamma * (k @ k.transpose(-2, -1)))
    rhs = beta[..., None] * torch.cat([from_start[..., None] * k, v], dim=-1)
    solved = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)
    return solved[..., :k.shape[-1]], solved[..., k.shape[-1]:]


def _chunk(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
           decay: torch.Tensor | None, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One chunk from state S_0: its outputs and S_C (Yang et al. 2024, section 3)."""
    gamma, from_start = _within_chunk_decay(decay, k)
    w, u = _wy(k, v, beta, gamma, from_start)
    corrections = u - w @ state  # U' = U - W S_0, (C, d_v)
    scores = (q @ k.transpose(-2, -1)) * gamma  # causal within the chunk, decayed
    out = from_start[..., None] * (q @ state) + scores @ corrections
    last = gamma[..., -1, :]  # what is left of each correction at the chunk's end
    new_state = from_start[..., -1, None, None] * state + k.transpose(-2, -1) @ (corrections * last[..., None])
    return out, new_state


def delta_rule_chunkwise(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                         decay: torch.Tensor | None = None, chunk_size: int = 64,
                         initial_state: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`delta_rule_recurrent`, parallel within chunks, recurrent across them.

    Raises ValueError as there, or if ``chunk_size`` is not a positive int.
    Source: Yang et al. (2024), section 3.
    """
    if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    validate_memory_inputs(q, k, v, initial_state, beta=beta, decay=decay)
    state = empty_state(q, v) if initial_state is None else initial_state
    outs = []
    for start in range(0, q.shape[2], chunk_size):
        part = slice(start, start + chunk_size)
        out, state = _chunk(q[:, :, part], k[:, :, part], v[:, :, part], beta[:, :, part],
                            None if decay is None else decay[:, :, part], state)
        outs.append(out)
    out = torch.cat(outs, dim=2) if outs else v.new_zeros(v.shape)
    return out, state


def delta_rule_weights(q: torch.Tensor, k: torch.Tensor, beta: torch.Tensor,
                       decay: torch.Tensor | None = None) -> torch.Tensor:
    """The (batch, heads, seq_len, seq_len) matrix applied to the values, from S_0 = 0.

    Source: Yang et al. (2024), section 3.
    """
    validate_memory_inputs(q, k, k, beta=beta, decay=decay)
    gamma, _ = _within_chunk_decay(decay, k)
    n = k.shape[-2]
    strictly_lower = (gamma * (k @ k.transpose(-2, -1))).tril(-1)
    system = torch.eye(n, dtype=k.dtype, device=k.device) + beta[..., None] * strictly_lower
    t_matrix = torch.linalg.solve_triangular(system, torch.diag_embed(beta), upper=False, unitriangular=True)
    return ((q @ k.transpose(-2, -1)) * gamma) @ t_matrix


def delta_rule_flops(seq_len: int, d_k: int, d_v: int, chunk_size: int | None = None) -> int:
    """FLOPs of one head's (gated) delta rule: recurrent, or chunkwise with ``chunk_size``.

    Raises ValueError if a size is not a positive int. Source: Yang et al. (2024), section 3.
    """
    for name, value in (("d_k", d_k), ("d_v", d_v), ("chunk_size", 1 if chunk_size is None else chunk_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 0:
        raise ValueError(f"seq_len must be a non-negative int, got {seq_len!r}")
    if chunk_size is None:
        return 6 * seq_len * d_k * d_v
    total = 0
    for start in range(0, seq_len, chunk_size):
        c = min(chunk_size, seq_len - start)
        total += 4 * c * c * d_k + c * (c - 1) * (d_k + d_v) + 6 * c * d_k * d_v + 2 * c * c * d_v
    return total


__all__ = ["delta_rule_chunkwise", "delta_rule_flops", "delta_rule_recurrent", "delta_rule_weights",
           "wy_representation"]
