"""Linear attention: a kernel feature map in place of the softmax (chapter 8).

Source: Katharopoulos et al. (2020), "Transformers are RNNs", eqs. (4)-(7).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from attncourse.functional.validation import validate_attention_shapes


def elu_feature_map(x: np.ndarray) -> np.ndarray:
    """``phi(x) = elu(x) + 1``: x + 1 for x > 0, exp(x) otherwise; always positive."""
    x = np.asarray(x)
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def linear_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False) -> np.ndarray:
    """``phi(Q) (phi(K)^T V)``, normalised, without an n x n matrix (eqs. (5)-(6), (18)-(19)).

    Shapes: q (tgt_len, d_k); k (src_len, d_k); v (src_len, d_v) -> (tgt_len, d_v).
    Raises ValueError on shapes that do not fit, or ``causal`` with tgt_len != src_len.
    """
    q, k, v = (np.asarray(a) for a in (q, k, v))
    if q.ndim != 2 or k.ndim != 2 or v.ndim != 2:
        raise ValueError(f"expected queries (tgt_len, d_k), keys (src_len, d_k), values (src_len, d_v); "
                         f"got queries {q.shape}, keys {k.shape}, values {v.shape}")
    validate_attention_shapes(q.shape, k.shape, v.shape)
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
    if not causal:
        state = phi_k.T @ v  # (d_k, d_v): sum_j phi(k_j) v_j^T, computed once for every query
        normaliser = phi_k.sum(axis=0)  # (d_k,)
        return (phi_q @ state) / (phi_q @ normaliser)[:, None]
    if q.shape[0] != k.shape[0]:
        raise ValueError(f"causal linear attention needs as many queries as keys: queries {q.shape} "
                         f"vs keys {k.shape}")
    # S_i = sum_{j <= i} phi(k_j) v_j^T as a running sum: (n, d_k, d_v), one state per position.
    states = np.cumsum(phi_k[:, :, None] * v[:, None, :], axis=0)
    normalisers = np.cumsum(phi_k, axis=0)  # z_i, (n, d_k)
    numerator = np.einsum("nk,nkv->nv", phi_q, states)
    return numerator / np.einsum("nk,nk->n", phi_q, normalisers)[:, None]


def linear_attention_weights(q: np.ndarray, k: np.ndarray, causal: bool = False) -> np.ndarray:
    """The (tgt_len, src_len) weights linear attention implicitly uses, built the quadratic
    way.
    """
    sim = elu_feature_map(np.asarray(q)) @ elu_feature_map(np.asarray(k)).T
    if causal:
        sim = np.tril(sim)
    return sim / sim.sum(axis=-1, keepdims=True)


def batched_linear_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """Non-causal linear attention, batched: ``(..., tgt_len, d_k)`` -> ``(..., tgt_len, d_v)``.

    Raises ValueError on shapes that do not fit.
    """
    validate_attention_shapes(query.shape, key.shape, value.shape)
    phi_q, phi_k = F.elu(query) + 1, F.elu(key) + 1
    state = phi_k.transpose(-2, -1) @ value  # (..., d_k, d_v), once for all queries
    normaliser = phi_q @ phi_k.sum(dim=-2).unsqueeze(-1)  # (..., tgt_len, 1)
    return (phi_q @ state) / normaliser


__all__ = ["batched_linear_attention", "elu_feature_map", "linear_attention", "linear_attention_weights"]
