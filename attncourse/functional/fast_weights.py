"""Linear attention as a fast-weight memory, with an optional decay per step (Mamba-2's SSD).

Source: Katharopoulos et al. (2020), "Transformers are RNNs", eqs. (18)-(19).
"""

from __future__ import annotations

import torch


def validate_memory_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        initial_state: torch.Tensor | None = None,
                        **per_step: torch.Tensor | None) -> None:
    """Raise ValueError unless q, k, v, initial_state and ``per_step`` fit (shapes as below)."""
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        raise ValueError(f"expected q, k (batch, heads, seq_len, d_k) and v (batch, heads, seq_len, d_v); "
                         f"got q {tuple(q.shape)}, k {tuple(k.shape)}, v {tuple(v.shape)}")
    for name, value in per_step.items():
        if value is None:
            continue
        if value.shape != q.shape[:3]:
            raise ValueError(f"{name} must be (batch, heads, seq_len) = {tuple(q.shape[:3])}, "
                             f"got {tuple(value.shape)}")
        low, high, closed_low = {"decay": (0.0, 1.0, False), "beta": (0.0, 2.0, True)}.get(name, (None,) * 3)
        if low is not None and value.numel():
            below = value.min() < low if closed_low else value.min() <= low
            if below or value.max() > high:
                bounds = f"[{low}, {high}]" if closed_low else f"({low}, {high}]"
                raise ValueError(f"{name} must lie in {bounds}, got values in [{float(value.min()):.3g}, "
                                 f"{float(value.max()):.3g}]")
    expected = (*q.shape[:2], q.shape[-1], v.shape[-1])
    if initial_state is not None and tuple(initial_state.shape) != expected:
        raise ValueError(f"initial_state must be (batch, heads, d_k, d_v) = {expected}, "
                         f"got {tuple(initial_state.shape)}")


def empty_state(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The zero state ``(batch, heads, d_k, d_v)`` for queries ``q`` and values ``v``."""
    return q.new_zeros(*q.shape[:2], q.shape[-1], v.shape[-1])


def read(state: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """``q S``: state ``(..., d_k, d_v)`` and q ``(..., d_k)`` -> ``(..., d_v)``."""
    return (q[..., None, :] @ state)[..., 0, :]


def write(k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The outer product ``k^T v``: ``(..., d_k)``, ``(..., d_v)`` -> ``(..., d_k, d_v)``."""
    return k[..., :, None] @ v[..., None, :]


def linear_attention_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               decay: torch.Tensor | None = None,
                               initial_state: torch.Tensor | None = None,
                               ) -> tuple[torch.Tensor, torch.Tensor]:
    """``S_t = a_t S_{t-1} + k_t^T v_t``, ``o_t = q_t S_t`` (Katharopoulos et al. 2020, eq. 18).

    Shapes: q, k (batch, heads, seq_len, d_k); v (batch, heads, seq_len, d_v); decay
    (batch, heads, seq_len); initial_state (batch, heads, d_k, d_v). Returns out (batch,
    heads, seq_len, d_v) and the final state. Raises ValueError if the shapes do not fit
    or a decay lies outside (0, 1].
    """
    validate_memory_inputs(q, k, v, initial_state, decay=decay)
    state = empty_state(q, v) if initial_state is None else initial_state
    outs = []
    for t in range(q.shape[2]):
        if decay is not None:
            state = decay[:, :, t, None, None] * state
        state = state + write(k[:, :, t], v[:, :, t])
        outs.append(read(state, q[:, :, t]))
    out = torch.stack(outs, dim=2) if outs else v.new_zeros(v.shape)
    return out, state


def decay_matrix(decay: torch.Tensor) -> torch.Tensor:
    """SSD's mask ``(..., seq_len, seq_len)`` of decays ``(..., seq_len)`` (Dao & Gu 2024)."""
    cum = torch.cumsum(torch.log(decay), dim=-1)
    diff = cum[..., :, None] - cum[..., None, :]
    n = decay.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool, device=decay.device).tril()
    return torch.exp(diff.masked_fill(~causal, float("-inf")))


def linear_attention_parallel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                              decay: torch.Tensor | None = None,
                              initial_state: torch.Tensor | None = None,
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`linear_attention_recurrent` as masked attention (Dao & Gu 2024, sec. 4)."""
    validate_memory_inputs(q, k, v, initial_state, decay=decay)
    n = q.shape[2]
    if decay is None:
        mask = torch.ones(n, n, dtype=q.dtype, device=q.device).tril()
        from_start = q.new_ones(q.shape[:3])
    else:
        mask = decay_matrix(decay)
        from_start = torch.cumprod(decay, dim=-1)  # g_t: what is left of S_0 after step t
    scores = (q @ k.transpose(-2, -1)) * mask  # (batch, heads, n, n)
    out = scores @ v
    last = mask[..., -1, :] if n else q.new_zeros(q.shape[:3])  # L_nj: what is left of write j at the end
    state = k.transpose(-2, -1) @ (v * last[..., None])  # (batch, heads, d_k, d_v)
    if initial_state is not None:
        out = out + from_start[..., None] * (q @ initial_state)
        end = from_start[..., -1] if n else q.new_ones(q.shape[:2])
        state = state + end[..., None, None] * initial_state
    return out, state


__all__ = ["validate_memory_inputs", "decay_matrix", "empty_state", "linear_attention_parallel",
           "linear_attention_recurrent", "read", "write"]
