"""What a memory returns for a stored key: closed-form memories written with (key, value) pairs.

Source: Schlag et al. (2021), "Linear Transformers Are Secretly Fast Weight Programmers",
section 4.
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
    """Unit keys ``(n_keys, d_k)``: random directions, or orthonormal ones.

    Raises ValueError if ``orthogonal`` and ``n_keys > d_k``.
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

    Shapes: keys (batch, n_pairs, d_k); values (batch, n_pairs, d_v); queries (batch,
    n_queries, d_k) -> (batch, n_queries, d_v). Raises ValueError for an unknown rule,
    shapes that do not fit, or an option the rule does not take.
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
    """Largest absolute difference between reads and stored values (0: exact)."""
    return float((reads - values).abs().max()) if reads.numel() else math.nan


__all__ = ["MEMORY_RULES", "key_codebook", "memory_reads", "read_error", "recall_accuracy"]
