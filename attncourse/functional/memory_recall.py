"""What a memory returns for a stored key: closed-form memories written with (key, value) pairs.

No training: the keys are given unit vectors of width d_k, the values one-hot vectors over the
value symbols, and each memory is written with the pairs in order, then read at the queried
keys. The read is a score per value symbol; recall is its argmax. The rules, by what the
memory keeps:

- ``"softmax"``: every pair (a KV cache, growing with N), read by softmax attention with a
  sharp scale: the reference, whose recall does not depend on a state size;
- ``"linear"``: ``S = sum_j k_j^T v_j`` (Katharopoulos et al. 2020 without feature map or
  normaliser), read ``q S``: exact for orthonormal keys, ``sum_j (k_j . q) v_j`` otherwise,
  each other pair adding crosstalk (Schlag et al. 2021, section 4);
- ``"linear-elu"``: chapter 8's form, ``phi = elu + 1`` on keys and queries and the
  normaliser: positive features are never orthogonal, so even orthonormal keys cross-talk;
- ``"delta"``: the delta rule with beta = 1, ``S += k_t^T (v_t - k_t S)``: the newest pair is
  stored exactly. Written ``passes`` times over, cyclically (Kaczmarz's method), the state
  converges to one with ``K S = V`` where such a state exists (up to d_k linearly
  independent keys); with more pairs than that the writes settle on a fixed cycle of
  states, which is not the least-squares fit (at d_k = 16 and 32 random keys, 4 and 64
  passes both recall about 0.63, the least-squares state about 0.99);
- ``"gated-delta"``: the same with a decay ``a`` per step (Yang et al. 2025): older pairs fade.

Shapes: keys ``(batch, n_pairs, d_k)``, values ``(batch, n_pairs, d_v)``, queries
``(batch, n_queries, d_k)``, reads ``(batch, n_queries, d_v)``.

References
----------
Schlag, Irie, Schmidhuber (2021), "Linear Transformers Are Secretly Fast Weight Programmers",
section 4 (capacity: at most d_k orthogonal keys; the delta rule).
Arora et al. (2023), "Zoology", section 3 (recall against the state size).
Kaczmarz (1937) (the cyclic projections that repeated delta-rule writes with beta = 1 perform;
with an inconsistent system they converge to a limit cycle, not to the least-squares solution).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from attncourse.functional.delta_rule import delta_rule_chunkwise
from attncourse.functional.fast_weights import linear_attention_parallel

#: The closed-form memories :func:`memory_reads` knows.
MEMORY_RULES: tuple[str, ...] = ("softmax", "linear", "linear-elu", "delta", "gated-delta")


def key_codebook(n_keys: int, d_k: int, orthogonal: bool = False,
                 generator: torch.Generator | None = None, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Unit vectors for ``n_keys`` key symbols: random directions, or orthonormal ones.

    Parameters
    ----------
    n_keys, d_k : int
    orthogonal : bool
        Orthonormal rows (of a random orthogonal matrix, by QR); needs ``n_keys <= d_k``.
    generator : torch.Generator, optional
    dtype : torch.dtype

    Returns
    -------
    (n_keys, d_k)
        Rows of norm 1.

    Raises
    ------
    ValueError
        If ``orthogonal`` and ``n_keys > d_k`` (d_k dimensions hold at most d_k orthogonal keys).
    """
    if orthogonal and n_keys > d_k:
        raise ValueError(f"at most d_k={d_k} orthogonal keys exist, asked for n_keys={n_keys}")
    gaussian = torch.randn(max(n_keys, d_k), d_k, generator=generator, dtype=dtype)
    if orthogonal:
        basis, _ = torch.linalg.qr(gaussian[:d_k])
        return basis[:n_keys]
    return F.normalize(gaussian[:n_keys], dim=-1)


def memory_reads(rule: str, keys: torch.Tensor, values: torch.Tensor, queries: torch.Tensor, *,
                 passes: int = 1, decay: float | None = None, scale: float | None = None) -> torch.Tensor:
    """Write the pairs into memory ``rule`` in order, then read it at ``queries``.

    Parameters
    ----------
    rule : one of :data:`MEMORY_RULES`
    keys : (batch, n_pairs, d_k)
    values : (batch, n_pairs, d_v)
    queries : (batch, n_queries, d_k)
    passes : int
        Times the pairs are written, in the same order (the delta rules; the others are
        unchanged by repetition, up to a factor, and refuse it).
    decay : float, optional
        ``"gated-delta"``'s a in (0, 1], the same at every step (required there, refused elsewhere).
    scale : float, optional
        ``"softmax"``'s inverse temperature; default ``4 d_k``, sharp for unit keys.

    Returns
    -------
    (batch, n_queries, d_v)

    Raises
    ------
    ValueError
        For an unknown rule, shapes that do not fit (named), or an option the rule does not take.
    """
    if rule not in MEMORY_RULES:
        raise ValueError(f"rule must be one of {MEMORY_RULES}, got {rule!r}")
    if keys.dim() != 3 or values.shape[:2] != keys.shape[:2] or queries.shape[::2] != keys.shape[::2]:
        raise ValueError(f"expected keys (batch, n_pairs, d_k), values (batch, n_pairs, d_v), queries "
                         f"(batch, n_queries, d_k); got keys {tuple(keys.shape)}, values {tuple(values.shape)}, "
                         f"queries {tuple(queries.shape)}")
    delta = rule in ("delta", "gated-delta")
    if passes != 1 and not delta:
        raise ValueError(f"passes={passes} is for the delta rules; {rule!r} only scales with repetition")
    if (decay is None) == (rule == "gated-delta"):
        raise ValueError(f"decay is {'required' if decay is None else 'refused'} by rule {rule!r}")
    if rule == "softmax":
        scores = queries @ keys.transpose(-2, -1) * (4 * keys.shape[-1] if scale is None else scale)
        return torch.softmax(scores, dim=-1) @ values
    k, v = keys[:, None], values[:, None]  # one head
    if rule == "linear-elu":
        phi_k, phi_q = F.elu(k) + 1, F.elu(queries[:, None]) + 1
        ones = torch.ones_like(v[..., :1])
        _, state = linear_attention_parallel(phi_k, phi_k, torch.cat([v, ones], dim=-1))
        read = (phi_q @ state)[:, 0]
        return read[..., :-1] / read[..., -1:]
    if rule == "linear":
        _, state = linear_attention_parallel(k, k, v)
    else:
        k, v = k.repeat(1, 1, passes, 1), v.repeat(1, 1, passes, 1)
        beta = torch.ones(k.shape[:3], dtype=k.dtype)
        gate = None if decay is None else torch.full_like(beta, decay)
        _, state = delta_rule_chunkwise(k, k, v, beta, gate, chunk_size=64)  # equal to the loop, faster
    return (queries[:, None] @ state)[:, 0]


def recall_accuracy(reads: torch.Tensor, answers: torch.Tensor) -> float:
    """Share of reads ``(..., d_v)`` whose largest score is at the answer ``(...)`` long."""
    return float((reads.argmax(dim=-1) == answers).double().mean())


def read_error(reads: torch.Tensor, values: torch.Tensor) -> float:
    """Largest absolute difference between the reads and the stored values: 0 for an exact memory."""
    return float((reads - values).abs().max()) if reads.numel() else math.nan


__all__ = ["MEMORY_RULES", "key_codebook", "memory_reads", "read_error", "recall_accuracy"]
