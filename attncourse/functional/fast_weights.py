"""Linear attention as a fast-weight memory, with and without a decay per step (Mamba-2's SSD).

Causal linear attention without its normaliser reads ``o_t = sum_{j <= t} (q_t . k_j) v_j``.
Grouping the sum the other way gives a recurrent network whose state is one matrix, the
*fast weights* (Schlag, Irie & Schmidhuber 2021, section 2; Katharopoulos et al. 2020,
eqs. 18-19). Vectors are rows, as everywhere in the course from chapter 4 on (the papers
write the transpose, ``S_t = S_{t-1} + v_t k_t^T``, ``o_t = S_t q_t``)::

    S_t = S_{t-1} + k_t^T v_t          (d_k, d_v): write value v_t at address k_t
    o_t = q_t S_t                       read the memory at address q_t

The same outputs, computed at once for a whole sequence, are masked attention without a
softmax, ``O = (Q K^T * M) V`` with M the causal mask. A decay ``a_t`` in (0, 1] per step
makes the memory forget geometrically (Dao & Gu 2024, "Transformers are SSMs", the scalar
structured state-space model of Mamba-2)::

    S_t = a_t S_{t-1} + k_t^T v_t       recurrent: the state shrinks by a_t, then is written
    O = (Q K^T * L) V                   parallel: L_ij = a_{j+1} ... a_i for j <= i, else 0

which is their state space duality (sections 3-4; L is the "1-semiseparable" mask of the
scalar SSM). With every ``a_t = 1``, L is the causal mask again. Both forms
here take the state before the sequence (``initial_state``) and return the state after it,
so that a long sequence can be processed in pieces, each a parallel pass (that is how a
decoder with a cache calls them).

Tensors follow the course's head layout: ``q, k (batch, heads, seq_len, d_k)``,
``v (batch, heads, seq_len, d_v)``, a per-step scalar ``(batch, heads, seq_len)``, a state
``(batch, heads, d_k, d_v)``. No feature map and no scaling is applied here: a model applies
its own (elu + 1 in Katharopoulos et al., L2-normalised keys in DeltaNet) before calling.

References
----------
Katharopoulos, Vyas, Pappas, Fleuret (2020), "Transformers are RNNs", ICML, eqs. (18)-(19).
Schlag, Irie, Schmidhuber (2021), "Linear Transformers Are Secretly Fast Weight Programmers",
ICML, section 2 (the equivalence) and section 4 (capacity and the delta rule).
Dao, Gu (2024), "Transformers are SSMs: Generalized Models and Efficient Algorithms Through
Structured State Space Duality", ICML, sections 3-4 (the scalar SSM and its masked-attention form).
"""

from __future__ import annotations

import torch


def validate_memory_inputs(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        initial_state: torch.Tensor | None = None,
                        **per_step: torch.Tensor | None) -> None:
    """Check the inputs of a fast-weight memory; raise ValueError naming the shapes.

    Parameters
    ----------
    q, k : (batch, heads, seq_len, d_k)
    v : (batch, heads, seq_len, d_v)
    initial_state : (batch, heads, d_k, d_v), optional
    **per_step : (batch, heads, seq_len) tensors or None
        Named scalars per step (``beta``, ``decay``); a ``decay`` must lie in (0, 1]
        and a ``beta`` in [0, 2] (the delta rule's state stays bounded there).
    """
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
    """``q S`` for each query: state ``(..., d_k, d_v)``, q ``(..., d_k)`` -> ``(..., d_v)``."""
    return (q[..., None, :] @ state)[..., 0, :]


def write(k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The outer product ``k^T v``: ``(..., d_k)`` and ``(..., d_v)`` -> ``(..., d_k, d_v)``."""
    return k[..., :, None] @ v[..., None, :]


def linear_attention_recurrent(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                               decay: torch.Tensor | None = None,
                               initial_state: torch.Tensor | None = None,
                               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Linear attention as a recurrent memory: ``S_t = a_t S_{t-1} + k_t^T v_t``, ``o_t = q_t S_t``.

    One step per position, in order: the teaching form, and the reference of
    :func:`linear_attention_parallel`.

    Parameters
    ----------
    q, k : (batch, heads, seq_len, d_k)
        Queries (read addresses) and keys (write addresses), feature map already applied.
    v : (batch, heads, seq_len, d_v)
    decay : (batch, heads, seq_len), optional
        a_t in (0, 1]; None: no decay (a_t = 1, Katharopoulos et al. 2020, eq. 18).
    initial_state : (batch, heads, d_k, d_v), optional
        S_0; default zeros.

    Returns
    -------
    out : (batch, heads, seq_len, d_v)
        o_t, unnormalised (divide by the same read of a memory of ones for eq. 19's normaliser).
    state : (batch, heads, d_k, d_v)
        S_n, the state after the last position.

    Raises
    ------
    ValueError
        If the shapes do not fit (named) or a decay lies outside (0, 1].

    References
    ----------
    Katharopoulos et al. (2020), eqs. (18)-(19); Dao & Gu (2024), section 3 (scalar A_t = a_t).
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
    """SSD's mask ``L``: ``L_ij = a_{j+1} a_{j+2} ... a_i`` for ``j <= i`` (1 on the diagonal), else 0.

    Parameters
    ----------
    decay : (..., seq_len)
        a_t in (0, 1].

    Returns
    -------
    (..., seq_len, seq_len)
        Lower triangular; computed as ``exp(c_i - c_j)`` from the cumulative sum c of log a,
        the upper triangle masked *before* the exponential, where ``c_i - c_j`` can be large
        and positive (an overflow there would turn gradients into NaN).

    References
    ----------
    Dao & Gu (2024), section 3 (the 1-semiseparable matrix of a scalar SSM).
    """
    cum = torch.cumsum(torch.log(decay), dim=-1)
    diff = cum[..., :, None] - cum[..., None, :]
    n = decay.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool, device=decay.device).tril()
    return torch.exp(diff.masked_fill(~causal, float("-inf")))


def linear_attention_parallel(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                              decay: torch.Tensor | None = None,
                              initial_state: torch.Tensor | None = None,
                              ) -> tuple[torch.Tensor, torch.Tensor]:
    """The same outputs as :func:`linear_attention_recurrent`, as masked attention without a softmax.

    ``O = (Q K^T * L) V + diag(g) Q S_0`` and ``S_n = g_n S_0 + K^T diag(L_n.) V``, with L
    :func:`decay_matrix` (the causal mask when ``decay`` is None) and ``g_t = a_1 ... a_t`` the
    decay of the initial state up to step t. O(n^2) in the sequence length, like softmax
    attention, but every product is a matrix product.

    Parameters and returns as :func:`linear_attention_recurrent`.

    References
    ----------
    Dao & Gu (2024), section 4 (state space duality).
    """
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
