"""One decoding step of Luong attention in NumPy: global, local-m and local-p.

This is the teaching path for the attention models of Luong, Pham and Manning
(2015). At target step t the decoder has *already* updated its state to h_t;
the encoder has left one state h̄_s per source position s. Attention then
runs in five moves:

1. **position** (local attention only): an aligned position p_t, either
   p_t = t (*local-m*, monotonic) or p_t = S * sigmoid(v_p^T tanh(W_p h_t))
   (*local-p*, predictive, eq. (10)), S being the source length;
2. **window**: the positions s with |s - p_t| <= D may be attended, the
   others may not (section 3.2; global attention keeps every position);
3. **score**: score(h_t, h̄_s) for every s (eq. (8): dot, general, concat; or
   the location-based W_a h_t of eq. (9));
4. **align**: a_t(s) = softmax of the scores over the allowed positions
   (eq. (7)); for local-p, times the Gaussian exp(-(s - p_t)^2 / (2 sigma^2))
   with sigma = D / 2 (eq. (11));
5. **context**: c_t = sum_s a_t(s) h̄_s, which the decoder combines with h_t
   into the attentional state h~_t = tanh(W_c [c_t; h_t]) (eq. (5),
   :func:`attentional_state`) and predicts from (eq. (6)).

:func:`luong_step` runs moves 1-5 (up to c_t) and keeps every intermediate in
a frozen :class:`LuongStepTrace`. In the language of queries, keys and values:
the query is the **current** decoder state h_t (Bahdanau et al. use the
previous one, s_{t-1}), the keys and the values are the encoder states h̄_s.
The batched module :class:`attncourse.nn.luong.LuongAttention` computes the
same numbers and is tested equal.

Conventions. Positions are numbered from 0: s = 0..S-1 and the first target
step is t = 0 (the paper counts from 1). p_t is real-valued; local-m uses
p_t = min(t, S - 1), so the window never slides past the sentence. Windows
that cross the sentence boundary keep only the positions inside it, as in the
paper (section 3.2). Matrices are stored as in the paper, acting on column
vectors; their names match the parameters of ``LuongAttention``.

Equation numbers follow the arXiv version (1508.04025v5) of the paper.

References
----------
Luong, Pham, Manning (2015), "Effective Approaches to Attention-based Neural
Machine Translation", EMNLP, section 3 (eqs. (5)-(6)), 3.1 (global attention,
eqs. (7)-(9)), 3.2 (local attention, eqs. (10)-(11)), 3.3 (input feeding).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from attncourse.functional.numpy_attention import softmax
from attncourse.functional.validation import _fmt

#: Score functions of Luong et al. (2015), eqs. (8)-(9).
LUONG_SCORES: tuple[str, ...] = ("dot", "general", "concat", "location")
#: Attention modes: global (section 3.1), local-m and local-p (section 3.2).
LUONG_MODES: tuple[str, ...] = ("global", "local-m", "local-p")
#: The moves of a Luong attention step, in order, as the course names them.
LUONG_MOVES: tuple[str, ...] = ("position", "window", "score", "align", "context")


# ----------------------------------------------------------------- checks


def validate_score_and_mode(score: str, mode: str) -> None:
    """Raise ``ValueError`` unless ``score`` is in :data:`LUONG_SCORES` and ``mode`` in :data:`LUONG_MODES`."""
    if score not in LUONG_SCORES:
        raise ValueError(f"score must be one of {LUONG_SCORES}, got {score!r}")
    if mode not in LUONG_MODES:
        raise ValueError(f"mode must be one of {LUONG_MODES}, got {mode!r}")


def validate_half_width(D: object, mode: str = "local-m") -> int:
    """Validate the half-width D of a local window and return it as an int.

    Raises
    ------
    ValueError
        If D is not an integer >= 0, or D = 0 for local-p (sigma = D / 2 must be > 0).
    """
    if isinstance(D, bool) or not isinstance(D, (int, np.integer)):
        raise ValueError(f"window D must be an integer >= 0 (the window is [p_t - D, p_t + D]), got {D!r}")
    if D < 0:
        raise ValueError(f"window D must be >= 0 (the window is [p_t - D, p_t + D]), got {D}")
    if mode == "local-p" and D == 0:
        raise ValueError("local-p needs window D >= 1: its Gaussian has sigma = D / 2, which must be > 0")
    return int(D)


def _vector(name: str, a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    if a.ndim != 1:
        raise ValueError(f"{name} must be one vector ({name}_dim,), got shape {_fmt(a.shape)}")
    return a


def _states(h_t: np.ndarray, h_s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    h_t = _vector("h_t", h_t)
    h_s = np.asarray(h_s)
    if h_s.ndim != 2:
        raise ValueError(f"h_s must be the source states (src_len, key_dim), got shape {_fmt(h_s.shape)}")
    return h_t, h_s


# ----------------------------------------------------------------- scores (eqs. (8)-(9))


def score_dot(h_t: np.ndarray, h_s: np.ndarray) -> np.ndarray:
    """Dot score, score(h_t, h̄_s) = h_t^T h̄_s (Luong et al. 2015, eq. (8)).

    No parameters: the query and the keys must have the same width.

    Parameters
    ----------
    h_t : (hidden_dim,)
        Current decoder state, the query.
    h_s : (src_len, hidden_dim)
        Encoder states h̄_s, the keys.

    Returns
    -------
    (src_len,)
        One score per source position.

    Raises
    ------
    ValueError
        If h_t and h_s differ in width; the message names both shapes.
    """
    h_t, h_s = _states(h_t, h_s)
    if h_s.shape[1] != h_t.shape[0]:
        raise ValueError(
            f"the dot score needs query and keys of one width: h_t {_fmt(h_t.shape)} vs h_s {_fmt(h_s.shape)}"
        )
    return h_s @ h_t


def score_general(h_t: np.ndarray, h_s: np.ndarray, w_a: np.ndarray) -> np.ndarray:
    """General (bilinear) score, score(h_t, h̄_s) = h_t^T W_a h̄_s (Luong et al. 2015, eq. (8)).

    W_a lets query and keys differ in width and learns which of their
    directions should match.

    Parameters
    ----------
    h_t : (hidden_dim,)
        Current decoder state, the query.
    h_s : (src_len, key_dim)
        Encoder states h̄_s.
    w_a : (hidden_dim, key_dim)
        W_a. ``W_a h̄_s`` does not depend on t, so a decoder computes it once
        per sentence (``LuongAttention.project_keys``).

    Returns
    -------
    (src_len,)

    Raises
    ------
    ValueError
        If w_a does not fit h_t and h_s; the message names the shapes.
    """
    h_t, h_s = _states(h_t, h_s)
    w_a = np.asarray(w_a)
    if w_a.shape != (h_t.shape[0], h_s.shape[1]):
        raise ValueError(
            f"w_a must be (hidden_dim, key_dim) = {_fmt((h_t.shape[0], h_s.shape[1]))} to fit "
            f"h_t {_fmt(h_t.shape)} and h_s {_fmt(h_s.shape)}, got {_fmt(w_a.shape)}"
        )
    return (h_s @ w_a.T) @ h_t


def score_concat(h_t: np.ndarray, h_s: np.ndarray, w_a: np.ndarray, v_a: np.ndarray) -> np.ndarray:
    """Concat score, score(h_t, h̄_s) = v_a^T tanh(W_a [h_t; h̄_s]) (Luong et al. 2015, eq. (8)).

    This is Bahdanau's additive MLP, queried by h_t instead of s_{t-1}:
    W_a [h_t; h̄_s] = W_a[:, :hidden_dim] h_t + W_a[:, hidden_dim:] h̄_s.

    Parameters
    ----------
    h_t : (hidden_dim,)
    h_s : (src_len, key_dim)
    w_a : (attn_dim, hidden_dim + key_dim)
        W_a; its first ``hidden_dim`` columns act on h_t.
    v_a : (attn_dim,)

    Returns
    -------
    (src_len,)

    Raises
    ------
    ValueError
        If w_a or v_a do not fit h_t and h_s; the message names the shapes.
    """
    h_t, h_s = _states(h_t, h_s)
    w_a, v_a = np.asarray(w_a), _vector("v_a", v_a)
    width = h_t.shape[0] + h_s.shape[1]
    if w_a.shape != (v_a.shape[0], width):
        raise ValueError(
            f"w_a must be (attn_dim, hidden_dim + key_dim) = {_fmt((v_a.shape[0], width))} to fit "
            f"h_t {_fmt(h_t.shape)}, h_s {_fmt(h_s.shape)} and v_a {_fmt(v_a.shape)}, got {_fmt(w_a.shape)}"
        )
    pairs = np.concatenate([np.broadcast_to(h_t, (h_s.shape[0], h_t.shape[0])), h_s], axis=1)  # [h_t; h̄_s]
    return np.tanh(pairs @ w_a.T) @ v_a


def score_location(h_t: np.ndarray, w_a: np.ndarray, src_len: int | None = None) -> np.ndarray:
    """Location-based scores W_a h_t, whose softmax is a_t (Luong et al. 2015, eq. (9)).

    The scores depend on the decoder state only, not on any source word: the
    model learns *where* to look (row s of W_a scores position s), never
    compares query and keys. There are no keys; the values are still h̄_s.

    Parameters
    ----------
    h_t : (hidden_dim,)
    w_a : (max_src_len, hidden_dim)
        W_a, one row per source position it can score.
    src_len : int, optional
        Keep the scores of the first ``src_len`` positions (default: all).

    Returns
    -------
    (src_len,) or (max_src_len,)

    Raises
    ------
    ValueError
        If w_a does not fit h_t, or ``src_len`` exceeds ``max_src_len``.
    """
    h_t, w_a = _vector("h_t", h_t), np.asarray(w_a)
    if w_a.ndim != 2 or w_a.shape[1] != h_t.shape[0]:
        raise ValueError(
            f"w_a must be (max_src_len, hidden_dim={h_t.shape[0]}) to fit h_t {_fmt(h_t.shape)}, got {_fmt(w_a.shape)}"
        )
    scores = w_a @ h_t
    if src_len is None:
        return scores
    if src_len > w_a.shape[0]:
        raise ValueError(
            f"the location score covers max_src_len={w_a.shape[0]} positions (w_a {_fmt(w_a.shape)}), "
            f"but the source has src_len={src_len}"
        )
    return scores[:src_len]


# ----------------------------------------------------------------- local attention (section 3.2)


def predict_position(h_t: np.ndarray, w_p: np.ndarray, v_p: np.ndarray, S: int | float) -> float:
    """Predicted aligned position of local-p, p_t = S * sigmoid(v_p^T tanh(W_p h_t)) (eq. (10)).

    Parameters
    ----------
    h_t : (hidden_dim,)
        Current decoder state.
    w_p : (pos_dim, hidden_dim)
        W_p.
    v_p : (pos_dim,)
        v_p.
    S : int or float
        Length of the source sentence (its real tokens); p_t lies in (0, S).

    Returns
    -------
    float
        p_t, a real number.

    Raises
    ------
    ValueError
        If w_p or v_p do not fit h_t.
    """
    h_t, v_p, w_p = _vector("h_t", h_t), _vector("v_p", v_p), np.asarray(w_p)
    if w_p.shape != (v_p.shape[0], h_t.shape[0]):
        raise ValueError(
            f"w_p must be (pos_dim, hidden_dim) = {_fmt((v_p.shape[0], h_t.shape[0]))} to fit "
            f"h_t {_fmt(h_t.shape)} and v_p {_fmt(v_p.shape)}, got {_fmt(w_p.shape)}"
        )
    z = float(v_p @ np.tanh(w_p @ h_t))
    return float(S) / (1.0 + np.exp(-z))


def local_window(p_t: float, D: int, src_len: int) -> np.ndarray:
    """Which source positions lie in the window [p_t - D, p_t + D] (section 3.2).

    Parameters
    ----------
    p_t : float
        Aligned position (0-based; real-valued for local-p).
    D : int
        Half-width of the window, >= 0 (the paper uses D = 10).
    src_len : int
        Number of source positions s = 0..src_len-1.

    Returns
    -------
    (src_len,) bool
        ``True`` where |s - p_t| <= D. A window that crosses the sentence
        boundary simply keeps the positions inside it.

    Raises
    ------
    ValueError
        If D is not an integer >= 0.
    """
    D = validate_half_width(D)
    return np.abs(np.arange(src_len) - float(p_t)) <= D


def gaussian_weights(positions: np.ndarray, p_t: float, D: int) -> np.ndarray:
    """Gaussian factor of local-p, exp(-(s - p_t)^2 / (2 sigma^2)) with sigma = D / 2 (eq. (11)).

    It favours positions near p_t; it is *not* a probability distribution (its
    peak is 1 and it is not normalised), and Luong et al. multiply the
    alignment weights by it without renormalising. It is differentiable in
    p_t, which is how W_p and v_p learn.

    Parameters
    ----------
    positions : (n,) array of int or float
        Source positions s.
    p_t : float
        Centre.
    D : int
        Window half-width, >= 1, so that sigma = D / 2 > 0.

    Returns
    -------
    (n,)
        The factor for each position, in (0, 1].

    Raises
    ------
    ValueError
        If D is not an integer >= 1.
    """
    D = validate_half_width(D, mode="local-p")
    sigma = D / 2.0
    s = np.asarray(positions, dtype=np.float64)
    return np.exp(-((s - float(p_t)) ** 2) / (2.0 * sigma**2))


def attentional_state(context: np.ndarray, h_t: np.ndarray, w_c: np.ndarray) -> np.ndarray:
    """Attentional hidden state h~_t = tanh(W_c [c_t; h_t]) (Luong et al. 2015, eq. (5)).

    The decoder predicts y_t from it, p(y_t | y_<t, x) = softmax(W_s h~_t)
    (eq. (6)), and with input feeding also reads it at step t + 1 (section 3.3).

    Parameters
    ----------
    context : (key_dim,)
        c_t.
    h_t : (hidden_dim,)
    w_c : (hidden_dim, key_dim + hidden_dim)
        W_c; its first ``key_dim`` columns act on c_t.

    Returns
    -------
    (hidden_dim,)

    Raises
    ------
    ValueError
        If w_c does not fit c_t and h_t.
    """
    context, h_t, w_c = _vector("context", context), _vector("h_t", h_t), np.asarray(w_c)
    if w_c.ndim != 2 or w_c.shape[1] != context.shape[0] + h_t.shape[0]:
        raise ValueError(
            f"w_c must be (hidden_dim, key_dim + hidden_dim) with key_dim + hidden_dim = "
            f"{context.shape[0] + h_t.shape[0]} to fit context {_fmt(context.shape)} and h_t {_fmt(h_t.shape)}, "
            f"got {_fmt(w_c.shape)}"
        )
    return np.tanh(w_c @ np.concatenate([context, h_t]))


# ----------------------------------------------------------------- one step


@dataclass(frozen=True)
class LuongStepTrace:
    """Every intermediate of one Luong attention step, in the order computed.

    Attributes
    ----------
    h_t : (hidden_dim,)
        Input: the current decoder state h_t (the query).
    h_s : (src_len, key_dim)
        Input: encoder states h̄_s (the keys and the values).
    score : str
        Input: one of :data:`LUONG_SCORES`.
    mode : str
        Input: one of :data:`LUONG_MODES`.
    mask : (src_len,) bool
        Input (or all ``True``): real source tokens.
    D : int or None
        Input: window half-width (``None`` for global attention).
    p_t : float or None
        Move 1: aligned position (``None`` for global attention).
    window : (src_len,) bool
        Move 2: positions that may be attended, |s - p_t| <= D and a real
        token (all real tokens for global attention).
    scores : (src_len,)
        Move 3: score(h_t, h̄_s) for every position, inside the window or not.
    align : (src_len,)
        Move 4: softmax of the scores over the window (eq. (7)); exactly 0
        outside it; sums to 1.
    gaussian : (src_len,) or None
        Move 4, local-p: exp(-(s - p_t)^2 / (2 sigma^2)), sigma = D / 2 (eq. (11));
        ``None`` when no Gaussian is applied.
    weights : (src_len,)
        Move 4: the weights a_t(s) used for the context: ``align * gaussian``
        for local-p, ``align`` otherwise. Exactly 0 outside the window; not
        renormalised after the Gaussian, so they may sum to less than 1.
    context : (key_dim,)
        Move 5: c_t = sum_s a_t(s) h̄_s.
    """

    h_t: np.ndarray
    h_s: np.ndarray
    score: str
    mode: str
    mask: np.ndarray
    D: int | None
    p_t: float | None
    window: np.ndarray
    scores: np.ndarray
    align: np.ndarray
    gaussian: np.ndarray | None
    weights: np.ndarray
    context: np.ndarray


def _param(params: Mapping[str, np.ndarray], name: str, why: str) -> np.ndarray:
    if name not in params:
        raise ValueError(f"{why} needs params[{name!r}]; got params with keys {sorted(params)}")
    return np.asarray(params[name])


def luong_step(
    h_t: np.ndarray,
    h_s: np.ndarray,
    score: str,
    params: Mapping[str, np.ndarray] | None = None,
    mode: str = "global",
    t: int | None = None,
    D: int | None = None,
    p_t: float | None = None,
    mask: np.ndarray | None = None,
    gaussian: bool | None = None,
) -> LuongStepTrace:
    """Luong attention for one decoding step, keeping every intermediate.

    Runs the moves of :data:`LUONG_MOVES`: aligned position, window, scores,
    alignment weights (with the Gaussian for local-p) and context c_t.

    Parameters
    ----------
    h_t : (hidden_dim,)
        Current decoder state h_t, the query.
    h_s : (src_len, key_dim)
        Encoder states h̄_s, the keys and the values.
    score : {"dot", "general", "concat", "location"}
        Score function, eqs. (8)-(9).
    params : mapping of str to ndarray, optional
        The parameters the choice needs, named as in ``LuongAttention``:
        ``w_a`` (general: (hidden_dim, key_dim); concat: (attn_dim,
        hidden_dim + key_dim); location: (max_src_len, hidden_dim)), ``v_a``
        (concat: (attn_dim,)), and for local-p without ``p_t``: ``w_p``
        (pos_dim, hidden_dim) and ``v_p`` (pos_dim,). Dot needs none.
    mode : {"global", "local-m", "local-p"}
        Attend to every position (section 3.1) or to a window (section 3.2).
    t : int, optional
        Target step (0-based); required for local-m, where p_t = min(t, S - 1).
    D : int, optional
        Window half-width; required for the local modes (>= 1 for local-p).
    p_t : float, optional
        local-p only: use this aligned position instead of predicting it with
        ``w_p``, ``v_p`` (eq. (10)) - handy for exploring the window by hand.
    mask : (src_len,) bool, optional
        ``True`` at real source tokens; padded positions get weight exactly 0
        and S counts the ``True`` entries (default: all real).
    gaussian : bool, optional
        Multiply the weights by the Gaussian of eq. (11). Default: the paper's
        choice, ``True`` for local-p and ``False`` otherwise. ``False`` with
        local-p (and a window covering the sentence) recovers global attention.

    Returns
    -------
    LuongStepTrace
        Inputs, then ``p_t``, ``window``, ``scores``, ``align``, ``gaussian``,
        ``weights`` and ``context``.

    Raises
    ------
    ValueError
        For an unknown score or mode, a missing parameter, t or D, a bad window,
        a Gaussian with global attention, or shapes that do not fit (the
        message names them).

    References
    ----------
    Luong et al. (2015), sections 3.1-3.2, eqs. (7)-(11).
    """
    validate_score_and_mode(score, mode)
    h_t, h_s = _states(h_t, h_s)
    params = {} if params is None else params
    src_len = h_s.shape[0]
    if mask is None:
        mask = np.ones(src_len, dtype=bool)
    else:
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != (src_len,):
            raise ValueError(
                f"mask must be (src_len,) = {_fmt((src_len,))} to fit h_s {_fmt(h_s.shape)}, got {_fmt(mask.shape)}"
            )
    if gaussian is None:
        gaussian = mode == "local-p"
    if gaussian and mode == "global":
        raise ValueError("global attention has no aligned position p_t, so no Gaussian; use gaussian=None or False")
    S = int(mask.sum())

    # move 1: aligned position
    if mode == "global":
        position, D = None, None
    else:
        if D is None:
            raise ValueError(f"mode={mode!r} needs the window half-width D")
        D = validate_half_width(D, "local-p" if gaussian else "local-m")
        if mode == "local-m":
            if p_t is not None:
                raise ValueError("local-m sets p_t = t; pass t, not p_t (or use mode='local-p')")
            if t is None or isinstance(t, bool) or int(t) != t or t < 0:
                raise ValueError(f"local-m needs the target step t, an integer >= 0, got {t!r}")
            position = float(max(min(int(t), S - 1), 0))
        elif p_t is not None:
            position = float(p_t)
        else:
            why = "local-p without an explicit p_t"
            position = predict_position(h_t, _param(params, "w_p", why), _param(params, "v_p", why), S)

    # move 2: window (and padding)
    window = mask.copy() if position is None else mask & local_window(position, D, src_len)

    # move 3: scores
    if score == "dot":
        scores = score_dot(h_t, h_s)
    elif score == "general":
        scores = score_general(h_t, h_s, _param(params, "w_a", "the general score"))
    elif score == "concat":
        why = "the concat score"
        scores = score_concat(h_t, h_s, _param(params, "w_a", why), _param(params, "v_a", why))
    else:
        scores = score_location(h_t, _param(params, "w_a", "the location score"), src_len)

    # move 4: align, then the Gaussian
    align = softmax(scores, mask=window)
    bump = gaussian_weights(np.arange(src_len), position, D) if gaussian else None
    weights = align * bump if gaussian else align

    # move 5: context
    context = weights @ h_s
    return LuongStepTrace(
        h_t=h_t, h_s=h_s, score=score, mode=mode, mask=mask, D=D, p_t=position, window=window,
        scores=scores, align=align, gaussian=bump, weights=weights, context=context,
    )
