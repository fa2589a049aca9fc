"""One Bahdanau attention step in NumPy, every intermediate kept (chapter 2 teaches it).

Source: Bahdanau et al. (2015), "Neural Machine Translation by Jointly Learning to Align
and Translate", section 3.1, eqs. (4)-(6).
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
    """Every intermediate of one Bahdanau step: the inputs, then query_term (attn_dim,),
    key_terms and hidden (src_len, attn_dim), scores and weights (src_len,), context (key_dim,).
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
    """Scores, weights and context of one Bahdanau step (Bahdanau et al. 2015, eqs. (5)-(6)).

    Shapes: s_prev (query_dim,); h (src_len, key_dim); w_a (attn_dim, query_dim); u_a
    (attn_dim, key_dim); v_a and b (attn_dim,); mask (src_len,) bool, True = attend.
    Raises ValueError if a matrix does not fit the state, the annotations or v_a.
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
