"""One Luong attention step in NumPy: global, local-m and local-p (chapter 3).

Source: Luong et al. (2015), "Effective Approaches to Attention-based Neural Machine
Translation", sections 3.1-3.2, eqs. (5)-(11).
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
    """Raise ValueError unless ``score`` and ``mode`` are in LUONG_SCORES and LUONG_MODES."""
    if score not in LUONG_SCORES:
        raise ValueError(f"score must be one of {LUONG_SCORES}, got {score!r}")
    if mode not in LUONG_MODES:
        raise ValueError(f"mode must be one of {LUONG_MODES}, got {mode!r}")


def validate_half_width(D: object, mode: str = "local-m") -> int:
    """The half-width D as an int; ValueError unless D >= 0 (D >= 1 for local-p)."""
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
    """Dot score h_t^T h̄_s (eq. (8)): h_t (hidden_dim,), h_s (src_len, hidden_dim).

    Raises ValueError if the widths differ.
    """
    h_t, h_s = _states(h_t, h_s)
    if h_s.shape[1] != h_t.shape[0]:
        raise ValueError(
            f"the dot score needs query and keys of one width: h_t {_fmt(h_t.shape)} vs h_s {_fmt(h_s.shape)}"
        )
    return h_s @ h_t


def score_general(h_t: np.ndarray, h_s: np.ndarray, w_a: np.ndarray) -> np.ndarray:
    """General score h_t^T W_a h̄_s (eq. (8)): w_a (hidden_dim, key_dim) -> (src_len,).

    Raises ValueError if w_a does not fit h_t and h_s.
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
    """Concat score v_a^T tanh(W_a [h_t; h̄_s]) (eq. (8)): w_a (attn_dim, hidden_dim + key_dim).

    Raises ValueError if w_a or v_a (attn_dim,) do not fit h_t and h_s.
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
    """Location scores W_a h_t (eq. (9)): w_a (max_src_len, hidden_dim) -> (src_len,).

    Raises ValueError if w_a does not fit h_t or ``src_len`` exceeds ``max_src_len``.
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
    """Local-p's aligned position p_t = S sigmoid(v_p^T tanh(W_p h_t)) (eq. (10)).

    Shapes: w_p (pos_dim, hidden_dim); v_p (pos_dim,). Raises ValueError if they do not fit h_t.
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
    """``(src_len,)`` bool: the positions in [p_t - D, p_t + D]; ValueError if D < 0."""
    D = validate_half_width(D)
    return np.abs(np.arange(src_len) - float(p_t)) <= D


def gaussian_weights(positions: np.ndarray, p_t: float, D: int) -> np.ndarray:
    """Local-p's factor exp(-(s - p_t)^2 / (2 sigma^2)), sigma = D / 2 (eq. (11)): (n,) -> (n,).

    Raises ValueError if D is not an integer >= 1.
    """
    D = validate_half_width(D, mode="local-p")
    sigma = D / 2.0
    s = np.asarray(positions, dtype=np.float64)
    return np.exp(-((s - float(p_t)) ** 2) / (2.0 * sigma**2))


def attentional_state(context: np.ndarray, h_t: np.ndarray, w_c: np.ndarray) -> np.ndarray:
    """h~_t = tanh(W_c [c_t; h_t]) (eq. (5)): w_c (hidden_dim, key_dim + hidden_dim).

    Raises ValueError if w_c does not fit c_t and h_t.
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
    """Every intermediate of one Luong step; vectors over source positions are (src_len,)."""

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
    """One Luong attention step, every intermediate kept (Luong et al. 2015, eqs. (7)-(11)).

    Shapes: h_t (hidden_dim,); h_s (src_len, key_dim); mask (src_len,) bool. Raises
    ValueError for an unknown score or mode, a missing parameter, a bad window or shapes
    that do not fit.
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
