"""The delta rule: a fast-weight memory that corrects what it stores, recurrent and chunkwise-parallel.

Linear attention adds ``v_t k_t^T`` to its state whatever the state already holds at
address k_t, so a key written twice returns the sum of its values, and keys that are not
orthogonal read each other's values (crosstalk). The delta rule first reads what is stored
at k_t, then writes only the difference, with a step size beta_t in [0, 1] (Widrow & Hoff's
rule, used as a fast-weight update by Schlag et al. 2021, section 4; rows here, the transpose
of the papers' columns, as in :mod:`attncourse.functional.fast_weights`)::

    S_t = S_{t-1} + beta_t k_t^T (v_t - k_t S_{t-1}) = (I - beta_t k_t^T k_t) S_{t-1} + beta_t k_t^T v_t

With ``beta_t = 1`` and a unit key, ``k_t S_t = v_t`` exactly: the newest pair is stored
exactly, and an older pair survives exactly when its key is orthogonal to the later ones.
The gated delta rule (Yang, Kautz & Hatamizadeh 2025) lets the whole state decay first,
``S_t = a_t (I - beta_t k_t^T k_t) S_{t-1} + beta_t k_t^T v_t``: a_t forgets everything
a little, beta_t replaces one pair.

The loop is sequential; Yang et al. (2024) make it parallel over chunks of C positions.
Inside a chunk the C corrections ``u_i = beta_i (v_i - a_i k_i S_{i-1})`` depend on each
other only through a unit lower-triangular C x C system, solved once (the UT transform),
which gives the chunk's updates in the WY form ``S_C = S_0 + K^T (U - W S_0)``; the
chunk's outputs are then masked attention within the chunk plus a read of S_0. Between
chunks the state is passed on, so the cost is linear in the sequence length, with matrix
products of size C inside. With every a_t = 1 the gated forms are the plain delta rule.

Shapes as :mod:`attncourse.functional.fast_weights`: ``q, k (batch, heads, seq_len, d_k)``,
``v (batch, heads, seq_len, d_v)``, ``beta, decay (batch, heads, seq_len)``, a state
``(batch, heads, d_k, d_v)``. Keys are used as given: DeltaNet L2-normalises them
(with beta in [0, 1] the state then stays bounded), which a model does before calling.

References
----------
Schlag, Irie, Schmidhuber (2021), "Linear Transformers Are Secretly Fast Weight Programmers",
ICML, section 4 (the delta rule as a fast-weight update).
Yang, Wang, Zhang, Shen, Kim (2024), "Parallelizing Linear Transformers with the Delta Rule
over Sequence Length", NeurIPS, section 3 (the WY representation of products of Householder
matrices, the chunkwise form and the UT transform) and appendix B (the chunkwise derivation).
Yang, Kautz, Hatamizadeh (2025), "Gated Delta Networks: Improving Mamba2 with Delta Rule",
ICLR, section 3 (the gated delta rule and its chunkwise form; the decays within a chunk,
Gamma, multiply the chunk's Q K^T, as the derivation gives).
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
    """The (gated) delta rule one step at a time: the teaching form and the reference.

    ``S_t = a_t S_{t-1} + beta_t k_t^T (v_t - a_t k_t S_{t-1})``, ``o_t = q_t S_t``.

    Parameters
    ----------
    q, k : (batch, heads, seq_len, d_k)
        Read and write addresses (DeltaNet: L2-normalised).
    v : (batch, heads, seq_len, d_v)
    beta : (batch, heads, seq_len)
        Writing strength in [0, 2] (a model uses a sigmoid: [0, 1]); 0 skips the step's write.
    decay : (batch, heads, seq_len), optional
        a_t in (0, 1], the gate of Gated DeltaNet; None: the plain delta rule.
    initial_state : (batch, heads, d_k, d_v), optional
        S_0; default zeros.

    Returns
    -------
    out : (batch, heads, seq_len, d_v)
    state : (batch, heads, d_k, d_v)
        S_n.

    Raises
    ------
    ValueError
        If the shapes do not fit (named), or beta or decay leave their ranges.

    References
    ----------
    Schlag et al. (2021), section 4; Yang et al. (2024), section 2; Yang et al. (2025), section 3.
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
    """Gamma ``(..., C, C)``, ``Gamma_ri = a_{i+1} ... a_r`` (i <= r), and g ``(..., C)``, ``g_r = a_1 ... a_r``."""
    c = k.shape[-2]
    if decay is None:
        return k.new_ones(c, c).tril(), k.new_ones(k.shape[:-1])
    return decay_matrix(decay), torch.cumprod(decay, dim=-1)


def wy_representation(k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                      decay: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The WY factors of one chunk of (gated) delta-rule updates, by the UT transform.

    Writing the chunk's C positions from a state S_0 adds ``K^T U'`` (decayed) to it, where the
    corrections ``U' = U - W S_0`` solve a unit lower-triangular system:

        T = (I + diag(beta) strictly_lower(Gamma * K K^T))^{-1} diag(beta)
        W = T diag(g) K,   U = T V

    (Gamma, g: the decays between positions and from the chunk's start; 1 without a gate).
    T is never inverted: ``U`` and ``W`` are one triangular solve with two right-hand sides.

    Parameters
    ----------
    k : (batch, heads, C, d_k)
    v : (batch, heads, C, d_v)
    beta : (batch, heads, C)
    decay : (batch, heads, C), optional

    Returns
    -------
    w : (batch, heads, C, d_k)
    u : (batch, heads, C, d_v)

    References
    ----------
    Yang et al. (2024), section 3 (WY form, UT transform); Yang et al. (2025), section 3 (with
    the gate).
    """
    return _wy(k, v, beta, *_within_chunk_decay(decay, k))


def _wy(k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor, gamma: torch.Tensor,
        from_start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`wy_representation` from the chunk's decays, computed once by the caller.

    The system's unit diagonal and its upper triangle are not formed: a unit-triangular solve
    reads only the strictly lower triangle (nor does its gradient reach the rest).
    """
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
    """The (gated) delta rule, parallel within chunks of ``chunk_size`` positions, recurrent across them.

    Equal to :func:`delta_rule_recurrent` (up to rounding); parameters and returns as there.
    ``chunk_size`` >= seq_len is one chunk: the fully parallel form, O(n^2).

    Raises
    ------
    ValueError
        As :func:`delta_rule_recurrent`, and if ``chunk_size`` is not a positive int.

    References
    ----------
    Yang et al. (2024), section 3 (the chunkwise form); Yang et al. (2025), section 3.
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
    """The attention matrix the (gated) delta rule applies to the values, from an empty state.

    With S_0 = 0 the whole sequence as one chunk gives ``O = A V`` with
    ``A = (Q K^T * Gamma) T``: lower triangular (causal), but its rows need not sum to 1 and
    may be negative (a later write subtracts what an earlier one stored).

    Parameters
    ----------
    q, k : (batch, heads, seq_len, d_k)
    beta, decay : (batch, heads, seq_len)
        As :func:`delta_rule_recurrent`.

    Returns
    -------
    (batch, heads, seq_len, seq_len)

    References
    ----------
    Yang et al. (2024), section 3 (the chunkwise form as one chunk, S_0 = 0).
    """
    validate_memory_inputs(q, k, k, beta=beta, decay=decay)
    gamma, _ = _within_chunk_decay(decay, k)
    n = k.shape[-2]
    strictly_lower = (gamma * (k @ k.transpose(-2, -1))).tril(-1)
    system = torch.eye(n, dtype=k.dtype, device=k.device) + beta[..., None] * strictly_lower
    t_matrix = torch.linalg.solve_triangular(system, torch.diag_embed(beta), upper=False, unitriangular=True)
    return ((q @ k.transpose(-2, -1)) * gamma) @ t_matrix


def delta_rule_flops(seq_len: int, d_k: int, d_v: int, chunk_size: int | None = None) -> int:
    """FLOPs of the matrix products of one head's (gated) delta rule, as this module computes it.

    Elementwise work (beta, the decays, subtractions) is left out, as
    :func:`~attncourse.functional.cost.attention_flops` leaves out the softmax.

    - recurrent (``chunk_size`` None): per step a read ``k S``, a write ``k^T u`` and a read
      ``q S``, ``2 d_k d_v`` each: ``6 n d_k d_v``;
    - chunkwise, per chunk of c positions: ``K K^T`` and ``Q K^T`` (``2 c^2 d_k`` each),
      the triangular solve for W and U (forward substitution, ``c (c - 1) (d_k + d_v)``),
      ``W S_0``, ``Q S_0`` and the state update (``2 c d_k d_v`` each), and the chunk's
      attention ``scores @ U'`` (``2 c^2 d_v``).

    Parameters
    ----------
    seq_len, d_k, d_v : int
    chunk_size : int, optional

    Returns
    -------
    int

    Raises
    ------
    ValueError
        If a size is not a positive int (seq_len may be 0).

    References
    ----------
    Yang et al. (2024), section 3 (the chunkwise form's cost, O(n C d + n d^2)).
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
