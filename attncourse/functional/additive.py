"""One decoding step of Bahdanau attention in NumPy, one named move at a time.

This is the teaching path for additive attention. At target step i the decoder
has its previous state s_{i-1}; the encoder has left one annotation h_j per
source position j. Bahdanau et al. (2015) turn them into a context vector c_i
in five moves:

1. **score**: an alignment score for every source position,
   e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j)             (eq. (6), appendix A.1.2);
2. **softmax**: attention weights alpha_ij = exp(e_ij) / sum_k exp(e_ik)   (eq. (6));
3. **context**: their weighted sum c_i = sum_j alpha_ij h_j                (eq. (5));
4. **output**: the decoder reads c_i, s_{i-1} and y_{i-1} to get s_i and
   p(y_i | y_<i, x) = g(y_{i-1}, s_i, c_i)                                  (eq. (4));
5. **repeat** with s_i for the next target word.

:func:`additive_attention_step` computes moves 1-3 for one step and keeps every
intermediate in a frozen :class:`AdditiveStepTrace`; moves 4-5 belong to the
decoder (:class:`attncourse.nn.rnn.Seq2Seq`). In the general language of
attention, s_{i-1} is the *query* and the annotations h_j are both the *keys*
and the *values*. The batched torch module
:class:`attncourse.nn.additive.AdditiveAttention` computes the same numbers and
is tested equal.

Matrices are stored as in the paper, acting on column vectors:
``w_a`` is W_a with shape ``(attn_dim, query_dim)``, ``u_a`` is U_a with shape
``(attn_dim, key_dim)`` and ``v_a`` is ``(attn_dim,)``; the paper's sizes are
n' = n = 1000 and key_dim = 2n (a bidirectional encoder).

References
----------
Bahdanau, Cho, Bengio (2015), "Neural Machine Translation by Jointly Learning to
Align and Translate", ICLR, section 3.1, equations (4)-(6), appendix A.1.2.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from attncourse.functional.numpy_attention import softmax
from attncourse.functional.validation import _fmt

#: The five moves of a Bahdanau decoding step, in order, as the course names them.
BAHDANAU_MOVES: tuple[str, ...] = ("score", "softmax", "context", "output", "repeat")


@dataclass(frozen=True)
class AdditiveStepTrace:
    """Every intermediate of one Bahdanau attention step, in the order computed.

    Attributes
    ----------
    s_prev : (query_dim,)
        Input: previous decoder state s_{i-1} (the query).
    h : (src_len, key_dim)
        Input: encoder annotations h_j (the keys, and also the values).
    w_a : (attn_dim, query_dim)
        Input: W_a, applied to the decoder state.
    u_a : (attn_dim, key_dim)
        Input: U_a, applied to each annotation.
    v_a : (attn_dim,)
        Input: v_a, which reduces each hidden vector to one score.
    b : (attn_dim,) or None
        Input: optional bias inside the tanh (the paper has none).
    mask : (src_len,) bool or None
        Input: ``True`` at source positions that may be attended (real tokens).
    query_term : (attn_dim,)
        Move 1: W_a s_{i-1}, computed once per step.
    key_terms : (src_len, attn_dim)
        Move 1: U_a h_j for every j; it does not depend on i, so a decoder
        computes it once per sentence.
    hidden : (src_len, attn_dim)
        Move 1: tanh(W_a s_{i-1} + U_a h_j (+ b)), one hidden vector per j.
    scores : (src_len,)
        Move 1: alignment scores e_ij = v_a^T hidden_j.
    weights : (src_len,)
        Move 2: attention weights alpha_ij, softmax of the scores over j; masked
        positions get exactly 0 and the rest sum to 1.
    context : (key_dim,)
        Move 3: context vector c_i = sum_j alpha_ij h_j.
    """

    s_prev: np.ndarray
    h: np.ndarray
    w_a: np.ndarray
    u_a: np.ndarray
    v_a: np.ndarray
    b: np.ndarray | None
    mask: np.ndarray | None
    query_term: np.ndarray
    key_terms: np.ndarray
    hidden: np.ndarray
    scores: np.ndarray
    weights: np.ndarray
    context: np.ndarray

    @property
    def attn_dim(self) -> int:
        """Width n' of the alignment model's hidden layer."""
        return self.v_a.shape[0]


def _validate_step_shapes(s_prev, h, w_a, u_a, v_a, b, mask) -> None:
    if s_prev.ndim != 1:
        raise ValueError(f"s_prev must be one decoder state (query_dim,), got shape {_fmt(s_prev.shape)}")
    if h.ndim != 2:
        raise ValueError(f"h must be the annotations (src_len, key_dim), got shape {_fmt(h.shape)}")
    if v_a.ndim != 1:
        raise ValueError(f"v_a must be a vector (attn_dim,), got shape {_fmt(v_a.shape)}")
    attn_dim = v_a.shape[0]
    if w_a.shape != (attn_dim, s_prev.shape[0]):
        raise ValueError(
            f"w_a must be (attn_dim, query_dim) = {_fmt((attn_dim, s_prev.shape[0]))} to fit "
            f"s_prev {_fmt(s_prev.shape)} and v_a {_fmt(v_a.shape)}, got {_fmt(w_a.shape)}"
        )
    if u_a.shape != (attn_dim, h.shape[1]):
        raise ValueError(
            f"u_a must be (attn_dim, key_dim) = {_fmt((attn_dim, h.shape[1]))} to fit "
            f"h {_fmt(h.shape)} and v_a {_fmt(v_a.shape)}, got {_fmt(u_a.shape)}"
        )
    if b is not None and b.shape != (attn_dim,):
        raise ValueError(f"b must be (attn_dim,) = {_fmt((attn_dim,))} like v_a, got {_fmt(b.shape)}")
    if mask is not None and mask.shape != (h.shape[0],):
        raise ValueError(
            f"mask must be (src_len,) = {_fmt((h.shape[0],))} to fit h {_fmt(h.shape)}, got {_fmt(mask.shape)}"
        )


def additive_attention_step(
    s_prev: np.ndarray,
    h: np.ndarray,
    w_a: np.ndarray,
    u_a: np.ndarray,
    v_a: np.ndarray,
    b: np.ndarray | None = None,
    mask: np.ndarray | None = None,
) -> AdditiveStepTrace:
    """Attention for one Bahdanau decoding step, keeping every intermediate.

    Computes the first three of the five moves (:data:`BAHDANAU_MOVES`):
    scores e_ij = v_a^T tanh(W_a s_{i-1} + U_a h_j), weights
    alpha_ij = softmax_j(e_ij), context c_i = sum_j alpha_ij h_j.

    Parameters
    ----------
    s_prev : (query_dim,)
        Previous decoder state s_{i-1}, the query.
    h : (src_len, key_dim)
        Encoder annotations h_j, one row per source position (keys = values).
    w_a : (attn_dim, query_dim)
        W_a in the paper's layout (it multiplies a column vector).
    u_a : (attn_dim, key_dim)
        U_a in the paper's layout.
    v_a : (attn_dim,)
        v_a. With ``v_a = 0`` (the paper's initialisation) every score is 0 and
        the weights are uniform over the unmasked positions.
    b : (attn_dim,), optional
        Bias added inside the tanh; the paper has none.
    mask : (src_len,) bool, optional
        ``True`` where position j may be attended (a real token); masked
        positions get weight exactly 0. If all are masked the weights and
        context are 0.

    Returns
    -------
    AdditiveStepTrace
        Inputs, then ``query_term``, ``key_terms``, ``hidden``, ``scores``,
        ``weights`` and ``context``; see its attributes for their shapes.

    Raises
    ------
    ValueError
        If a matrix does not fit the state, the annotations or v_a; the
        message names both shapes.

    References
    ----------
    Bahdanau et al. (2015), section 3.1, equations (5) and (6); appendix A.1.2.
    """
    s_prev, h, w_a, u_a, v_a = (np.asarray(a) for a in (s_prev, h, w_a, u_a, v_a))
    b = None if b is None else np.asarray(b)
    mask = None if mask is None else np.asarray(mask, dtype=bool)
    _validate_step_shapes(s_prev, h, w_a, u_a, v_a, b, mask)

    query_term = w_a @ s_prev  # move 1: score ...
    key_terms = h @ u_a.T
    pre = query_term + key_terms if b is None else query_term + key_terms + b
    hidden = np.tanh(pre)
    scores = hidden @ v_a
    weights = softmax(scores, mask=mask)  # move 2: normalise over source positions
    context = weights @ h  # move 3: weighted sum of the annotations
    return AdditiveStepTrace(
        s_prev=s_prev, h=h, w_a=w_a, u_a=u_a, v_a=v_a, b=b, mask=mask,
        query_term=query_term, key_terms=key_terms, hidden=hidden,
        scores=scores, weights=weights, context=context,
    )
