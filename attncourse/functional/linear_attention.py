"""Linear attention (Katharopoulos et al. 2020): a kernel feature map in place of the softmax.

Softmax attention weighs value j for query i by ``exp(q_i . k_j / sqrt(d_k))``, normalised
over j. Linear attention replaces that similarity by a dot product of feature maps,
``phi(q_i) . phi(k_j)`` with ``phi(x) = elu(x) + 1`` (positive, so the weights are
positive), paper eq. (4):

    V'_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j)).

The sums over j do not depend on i, so they are computed once: ``(phi(Q) phi(K)^T) V``
becomes ``phi(Q) (phi(K)^T V)``, O(n d^2) instead of O(n^2 d) (eq. 5). With a causal mask
the sums run over j <= i and become running sums, ``S_i = S_{i-1} + phi(k_i) v_i^T`` and
``z_i = z_{i-1} + phi(k_i)`` (eqs. 18-19, section 3.4): the model is a recurrent network
whose state is the d_k x d_v matrix S, whatever the sequence length. The price is that this fixed-size
state must hold everything the model can later retrieve.

References
----------
Katharopoulos, Vyas, Pappas, Fleuret (2020), "Transformers are RNNs: Fast Autoregressive
Transformers with Linear Attention", ICML, eqs. (4)-(7); causal, eqs. (18)-(19) (section 3.4).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from attncourse.functional.validation import validate_attention_shapes


def elu_feature_map(x: np.ndarray) -> np.ndarray:
    """``phi(x) = elu(x) + 1``: x + 1 for x > 0, exp(x) otherwise; always positive.

    Katharopoulos et al. (2020), section 3.2.1, eq. (7). Any shape; elementwise.
    """
    x = np.asarray(x)
    return np.where(x > 0, x + 1.0, np.exp(np.minimum(x, 0.0)))


def linear_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, causal: bool = False) -> np.ndarray:
    """Linear attention, computed as ``phi(Q) (phi(K)^T V)`` without any n x n matrix.

    Parameters
    ----------
    q : (tgt_len, d_k)
        Queries.
    k : (src_len, d_k)
        Keys.
    v : (src_len, d_v)
        Values.
    causal : bool
        Query i uses keys j <= i only (needs ``tgt_len == src_len``); computed as the
        running sums ``S_i``, ``z_i`` of eqs. (18)-(19), a cumulative sum over positions.

    Returns
    -------
    (tgt_len, d_v)
        ``sum_j phi(q_i).phi(k_j) v_j / sum_j phi(q_i).phi(k_j)``. No scaling by
        sqrt(d_k): the normalisation divides it out.

    Raises
    ------
    ValueError
        If the shapes do not fit (the message names both), or ``causal`` with
        ``tgt_len != src_len``.

    References
    ----------
    Katharopoulos et al. (2020), eqs. (5)-(6) (non-causal) and (18)-(19) (causal, section 3.4).
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
    """The (tgt_len, src_len) weights linear attention implicitly uses, built the quadratic way.

    ``A_ij = phi(q_i).phi(k_j) / sum_j' phi(q_i).phi(k_j')`` (over j, j' <= i if causal),
    Katharopoulos et al. (2020) eq. (4): for plotting, and to check :func:`linear_attention`
    (``A @ v``), on small inputs only.
    """
    sim = elu_feature_map(np.asarray(q)) @ elu_feature_map(np.asarray(k)).T
    if causal:
        sim = np.tril(sim)
    return sim / sim.sum(axis=-1, keepdims=True)


def batched_linear_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """Non-causal linear attention on tensors, batched and differentiable.

    The same maths as :func:`linear_attention`, ``phi(Q) (phi(K)^T V) / (phi(Q) sum_j phi(k_j))``
    with ``phi = elu + 1`` (Katharopoulos et al. 2020, eqs. 5-7), for models.

    Parameters
    ----------
    query : (..., tgt_len, d_k)
    key : (..., src_len, d_k)
    value : (..., src_len, d_v)

    Returns
    -------
    (..., tgt_len, d_v)

    Raises
    ------
    ValueError
        If the shapes do not fit; the message names both.
    """
    validate_attention_shapes(query.shape, key.shape, value.shape)
    phi_q, phi_k = F.elu(query) + 1, F.elu(key) + 1
    state = phi_k.transpose(-2, -1) @ value  # (..., d_k, d_v), once for all queries
    normaliser = phi_q @ phi_k.sum(dim=-2).unsqueeze(-1)  # (..., tgt_len, 1)
    return (phi_q @ state) / normaliser


__all__ = ["batched_linear_attention", "elu_feature_map", "linear_attention", "linear_attention_weights"]
