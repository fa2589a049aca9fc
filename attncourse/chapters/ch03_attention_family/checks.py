"""Checks for the exercises of the chapter "A family of attentions".

Three exercises: Luong's *general* score h_t^T W_a h̄_s, the weights of
*local-p* attention (a softmax over the window [p_t - D, p_t + D] times a
Gaussian), and the softmax with a temperature. Each check runs the learner's
function on hidden cases and returns a
:class:`~attncourse.checks.core.CheckResult`; on a failure the output is
compared with typical buggy versions (W_a transposed, the Gaussian left out,
sigma = D instead of D / 2, tau multiplied instead of divided, ...) so that the
hint names the likely bug. The references are the library's own functions
(:func:`attncourse.functional.luong.score_general`,
:func:`~attncourse.functional.luong.local_window`,
:func:`~attncourse.functional.luong.gaussian_weights`,
:func:`attncourse.functional.softmax_with_temperature`), so check and library agree.

Window convention (as :func:`attncourse.functional.luong.local_window`): positions
are 0-based, and the window holds the integer positions s = 0..S-1 with
|s - p_t| <= D, i.e. ceil(p_t - D) .. floor(p_t + D), both ends included,
clipped to the sentence. p_t is real-valued and is never rounded, neither for
the window nor for the Gaussian.

References
----------
Luong, Pham, Manning (2015), "Effective Approaches to Attention-based Neural
Machine Translation", EMNLP, sections 3.1-3.2, eqs. (7)-(8), (10)-(11) (arXiv 1508.04025v5).
Hinton, Vinyals, Dean (2015), "Distilling the Knowledge in a Neural Network", section 2.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from attncourse.checks.core import (
    Case,
    CheckResult,
    buggy_variants,
    run_cases,
    variant_hint,
)
from attncourse.checks.guard import SOFTMAX, allowing
from attncourse.functional.luong import gaussian_weights, local_window, score_general
from attncourse.functional.numpy_attention import softmax
from attncourse.functional.temperature import hardmax, softmax_with_temperature

# Loose enough for a learner who computes in float32 torch, tight enough to
# tell every buggy variant apart.
_ATOL = 1e-5
_RTOL = 1e-4


# --------------------------------------------------------------------- general score (eq. (8))

GS_RULE = (
    "The general score puts the learned matrix W_a between the query h_t on its left and each "
    "source state h̄_s on its right (Luong et al. 2015, eq. (8)). w_a is (hidden_dim, key_dim) "
    "and acts on the keys: applied to every row of h_s at once it gives (src_len, hidden_dim), "
    "and each row's product with h_t is that position's score."
)
GS_TRANSPOSED_HINT = (
    "W_a is used transposed: you computed h̄_s^T W_a h_t = h_t^T W_a^T h̄_s. W_a sits between h_t "
    "on its left and h̄_s on its right, so it maps a key into the query's space. With a square "
    "W_a both orders run, but W_a is not symmetric, so the scores differ."
)
GS_DOT_HINT = (
    "These are the dot scores h_t^T h̄_s: W_a is ignored. The general score puts the learned "
    "matrix between query and key: h_t^T W_a h̄_s (eq. (8))."
)
GS_WEIGHTS_HINT = (
    "Your result sums to 1: those are the alignment weights, the softmax of the scores "
    "(eq. (7)). This exercise asks for the scores themselves; the softmax is the next move."
)
GS_SCALED_HINT = (
    "Your scores are divided by the square root of the width. That scaling belongs to the Transformer's scaled "
    "dot-product attention (Vaswani et al. 2017); Luong's general score has none: h_t^T W_a h̄_s."
)
GS_PROJECTED_HINT = (
    "You returned a matrix with one row per source position: W_a h̄_s (or h̄_s^T W_a) for every s, "
    "before the product with h_t. Multiply by h_t to get one score per position."
)
GS_1D_HINT = "Return a 1-D array of scores, shape (src_len,), one per source position, not a row or a column."


def _general_variants(h_t: np.ndarray, h_s: np.ndarray, w_a: np.ndarray) -> list[tuple[str, np.ndarray]]:
    right = score_general(h_t, h_s, w_a)
    return buggy_variants([
        (GS_TRANSPOSED_HINT, lambda: h_s @ w_a @ h_t),
        (GS_DOT_HINT, lambda: h_s @ h_t),
        (GS_WEIGHTS_HINT, lambda: softmax(right)),
        (GS_SCALED_HINT, lambda: right / math.sqrt(h_t.shape[0])),
        (GS_SCALED_HINT, lambda: right / math.sqrt(h_s.shape[1])),
    ])


def _diagnose_general_score(got: Any, case: Case) -> str | None:
    h_t, h_s, w_a = (case.args[name] for name in ("h_t", "h_s", "w_a"))
    expected = np.asarray(case.expected)
    if not isinstance(got, np.ndarray):
        return None
    if got.shape != expected.shape:
        if got.ndim == 2 and got.shape[0] == h_s.shape[0] and got.shape[1] in w_a.shape:
            return GS_PROJECTED_HINT
        if got.size == expected.size:
            return GS_1D_HINT
        return None
    hint = variant_hint(got, _general_variants(h_t, h_s, w_a), case.expected, case)
    if hint:
        return hint
    got = got.astype(np.float64)
    if (got >= 0).all() and np.isclose(got.sum(), 1.0, atol=1e-4) and not np.isclose(expected.sum(), 1.0):
        return GS_WEIGHTS_HINT
    return None


def _general_case(description: str, rng: np.random.Generator, src_len: int, hidden_dim: int, key_dim: int,
                  *, w_a: np.ndarray | None = None, scale: float = 1.0, hint: str = GS_RULE) -> Case:
    args = {
        "h_t": scale * rng.normal(size=hidden_dim),
        "h_s": scale * rng.normal(size=(src_len, key_dim)),
        "w_a": rng.normal(size=(hidden_dim, key_dim)) if w_a is None else w_a,
    }
    return Case(description=description, args=args, expected=score_general(*args.values()), atol=_ATOL,
                rtol=_RTOL, hint=hint, diagnose=_diagnose_general_score)


def general_score_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_general_score`, drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    return [
        _general_case("square W_a: hidden_dim = key_dim = 4, src_len=5", rng, 5, 4, 4,
                      hint="Here W_a is square, so a transposed W_a still runs, giving wrong scores. " + GS_RULE),
        _general_case("a single source position: src_len=1, hidden_dim = key_dim = 3", rng, 1, 3, 3,
                      hint="With one source position the result is still an array of shape (1,). " + GS_RULE),
        _general_case("W_a = identity: the general score equals the dot score, hidden_dim = key_dim = 3, "
                      "src_len=4", rng, 4, 3, 3, w_a=np.eye(3)),
        _general_case("larger states: hidden_dim = key_dim = 6, src_len=7", rng, 7, 6, 6, scale=2.0),
        _general_case("query and keys of different widths: hidden_dim=3, key_dim=5, W_a (3, 5), src_len=4",
                      rng, 4, 3, 5,
                      hint="W_a is (hidden_dim, key_dim) = (3, 5) here: it maps a key of width 5 to the "
                           "query's width 3, so only h_t^T W_a h̄_s fits. " + GS_RULE),
    ]


@allowing("NumPy matrix products (@).", library=("torch:bilinear", "torch:Bilinear"))
def check_general_score(fn: Callable[..., Any]) -> CheckResult:
    """Check a learner's Luong *general* score, h_t^T W_a h̄_s for every source position.

    Parameters
    ----------
    fn : callable
        The learner's ``general_score(h_t, h_s, w_a)``, called with float64
        ndarrays in that order:

        - ``h_t`` : (hidden_dim,), the current decoder state, the query;
        - ``h_s`` : (src_len, key_dim), the encoder states h̄_s, one row per
          source position, the keys;
        - ``w_a`` : (hidden_dim, key_dim), W_a (square, (d, d), in all cases
          but the last, where hidden_dim=3 and key_dim=5);
        - returns ``scores`` : (src_len,), score(h_t, h̄_s) = h_t^T W_a h̄_s,
          the scores before the softmax. A NumPy array, a torch tensor or a nested list.

    Returns
    -------
    CheckResult
        Truthy when every hidden case passes; otherwise the first failing case,
        the first wrong entry (or the exception and the learner's line that
        raised it) and a hint naming the likely bug: W_a transposed, W_a
        ignored (the dot score), the softmax applied (weights instead of
        scores), a 1/sqrt(d) scaling, the product with h_t missing.

    Notes
    -----
    The reference is :func:`attncourse.functional.luong.score_general`.

    References
    ----------
    Luong et al. (2015), section 3.1, eq. (8).

    Examples
    --------
    >>> import numpy as np
    >>> def my_general_score(h_t, h_s, w_a):
    ...     return h_t @ w_a @ h_s.T
    >>> check_general_score(my_general_score)
    ✔ check_general_score: all 5 hidden cases pass
    """
    return run_cases("check_general_score", fn, general_score_cases(), references=(score_general,))


# --------------------------------------------------------------------- local-p weights (eqs. (7), (11))

LP_RULE = (
    "The weight of position s is the softmax of the scores over the window (the positions of "
    "the sentence at most D away from p_t) times a Gaussian of the distance from s to p_t with "
    "standard deviation D / 2, and exactly 0 outside the window (Luong et al. 2015, eqs. (7) "
    "and (11)). The result is not renormalised. p_t is a float, so it cannot index or slice an "
    "array: build the window as a boolean mask from every position's distance to p_t."
)
LP_NO_GAUSS_HINT = (
    "The Gaussian is missing: you returned the softmax over the window. local-p multiplies it by "
    "a Gaussian of the distance to p_t with standard deviation D / 2 (eq. (11)), which "
    "favours positions near p_t."
)
LP_SIGMA_D_HINT = (
    "Your Gaussian is too wide: sigma = D. Luong et al. set sigma = D / 2 (empirically), so the "
    "window's edges, D away from p_t, lie two standard deviations from it."
)
LP_SIGMA_INT_HINT = (
    "Your sigma rounds down for an odd D (D = 3 gives 1 instead of 1.5): half of D needs true "
    "division, not floor division."
)
LP_WHOLE_HINT = (
    "The softmax runs over the whole sentence: every position shared the weight, then you kept the "
    "window. The softmax must run over the window only, so that the positions inside it share all "
    "the weight (before the Gaussian): set the scores outside the window to -inf first."
)
LP_BEFORE_HINT = (
    "The Gaussian is applied before the softmax (to the scores). Luong et al. apply it after: "
    "softmax over the window first, then multiply the weights by the Gaussian (eq. (11))."
)
LP_RENORM_HINT = (
    "Your weights were renormalised to sum to 1 after the Gaussian. Luong et al. do not "
    "renormalise: the softmax weights times the Gaussian sum to less than 1."
)
LP_EDGES_HINT = (
    "The window's edges are off. Do not round p_t: the window holds every integer position at "
    "most D away from p_t, both ends included, clipped to the sentence (a mask from each "
    "position's distance to p_t gets this right)."
)
LP_SLICE_HINT = (
    "The last position of the window is missing: a Python slice stops before its end. The "
    "window holds every position at most D away from p_t, both ends included: move the slice's "
    "end one further, or use a mask from each position's distance to p_t."
)
LP_CENTRE_HINT = (
    "The Gaussian is centred on a rounded p_t. p_t is real-valued (eq. (10) predicts it) and the "
    "Gaussian is centred exactly on it; only the positions are integers."
)
LP_WINDOW_ONLY_HINT = (
    "You returned the weights of the window's positions only. Return one weight per source "
    "position, shape (S,), like the scores, with exactly 0 outside the window."
)
LP_LEAK_HINT = (
    "Positions outside the window got nonzero weight, up to {largest}. Every position more "
    "than D away from p_t must get weight exactly 0."
)
LP_OVERFLOW_HINT = (
    "NaN with large scores: the exponential of a score near 1000 overflows to infinity, and "
    "infinity over infinity is NaN. "
    "Subtract the largest score in the window before exponentiating; the softmax does not change."
)


def _gauss(src_len: int, centre: float, sigma: float) -> np.ndarray:
    s = np.arange(src_len, dtype=np.float64)
    return np.exp(-((s - centre) ** 2) / (2.0 * sigma**2))


def _window_between(src_len: int, lo: float, hi: float) -> np.ndarray:
    s = np.arange(src_len)
    return (s >= lo) & (s <= hi)


def _local_p_reference(scores: np.ndarray, p_t: float, D: int) -> np.ndarray:
    """The library's local-p weights: softmax over ``local_window`` times ``gaussian_weights``."""
    src_len = scores.shape[0]
    window = local_window(p_t, D, src_len)
    return softmax(scores, mask=window) * gaussian_weights(np.arange(src_len), p_t, D)


def _local_p_variants(scores: np.ndarray, p_t: float, D: int) -> list[tuple[str, np.ndarray]]:
    src_len = scores.shape[0]
    window = local_window(p_t, D, src_len)
    align = softmax(scores, mask=window)
    g = gaussian_weights(np.arange(src_len), p_t, D)
    right = align * g
    lo, hi = math.ceil(p_t - D), math.floor(p_t + D)
    recipes: list[tuple[str, Callable[[], np.ndarray]]] = [
        (LP_NO_GAUSS_HINT, lambda: align),
        (LP_SIGMA_D_HINT, lambda: align * _gauss(src_len, p_t, D)),
        (LP_WHOLE_HINT, lambda: softmax(scores) * g * window),
        (LP_WHOLE_HINT, lambda: softmax(scores) * g),
        (LP_BEFORE_HINT, lambda: softmax(scores * g, mask=window)),
        (LP_BEFORE_HINT, lambda: softmax(scores * g) * window),
        (LP_RENORM_HINT, lambda: right / right.sum()),
        (LP_SLICE_HINT, lambda: softmax(scores, mask=_window_between(src_len, lo, hi - 1)) * g),
        (LP_EDGES_HINT, lambda: softmax(scores, mask=np.abs(np.arange(src_len) - p_t) < D) * g),
        (LP_CENTRE_HINT, lambda: align * gaussian_weights(np.arange(src_len), round(p_t), D)),
        (LP_CENTRE_HINT, lambda: align * gaussian_weights(np.arange(src_len), math.floor(p_t), D)),
    ]
    for centre in (round(p_t), math.floor(p_t), math.ceil(p_t)):
        edges = local_window(centre, D, src_len)
        recipes.append((LP_EDGES_HINT, lambda edges=edges: softmax(scores, mask=edges) * g))
        recipes.append((LP_EDGES_HINT, lambda edges=edges: softmax(scores, mask=edges) * g * edges))
    if D // 2 > 0:
        recipes.append((LP_SIGMA_INT_HINT, lambda: align * _gauss(src_len, p_t, D // 2)))
    return buggy_variants(recipes)


def _diagnose_local_p(got: Any, case: Case) -> str | None:
    scores, p_t, D = case.args["scores"], case.args["p_t"], case.args["D"]
    expected = np.asarray(case.expected)
    window = local_window(p_t, D, scores.shape[0])
    if not isinstance(got, np.ndarray):
        return None
    if got.shape != expected.shape:
        if got.shape == (int(window.sum()),):
            return LP_WINDOW_ONLY_HINT
        return None
    got = got.astype(np.float64)
    hint = variant_hint(got, _local_p_variants(scores, p_t, D), case.expected, case)
    if hint:
        return hint
    if np.isnan(got).any():
        return LP_OVERFLOW_HINT
    leaked = np.abs(np.where(window, 0.0, got))
    if leaked.max() > case.atol:
        return LP_LEAK_HINT.format(largest=f"{leaked.max():.3g}")
    return None


def _local_p_case(description: str, scores: np.ndarray, p_t: float, D: int, hint: str = LP_RULE) -> Case:
    scores = np.asarray(scores, dtype=np.float64)
    return Case(description=description, args={"scores": scores, "p_t": float(p_t), "D": int(D)},
                expected=_local_p_reference(scores, p_t, D), atol=_ATOL, rtol=_RTOL, hint=hint,
                diagnose=_diagnose_local_p)


def local_p_weights_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_local_p_weights`, drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    return [
        _local_p_case("p_t between two positions: S=8, p_t=3.4, D=2 (window s = 2..5)",
                      rng.normal(size=8), 3.4, 2),
        _local_p_case("integer p_t, the window's edges fall on positions: S=9, p_t=4.0, D=2 (window s = 2..6)",
                      rng.normal(size=9), 4.0, 2,
                      "Both edges, D before and D after p_t, are in the window when they are "
                      "positions. " + LP_RULE),
        _local_p_case("the window crosses the start of the sentence: S=7, p_t=0.7, D=3 (window s = 0..3)",
                      rng.normal(size=7), 0.7, 3,
                      "A window that crosses the sentence edge keeps the positions inside it, s = 0..S-1. "
                      + LP_RULE),
        _local_p_case("p_t past the last position (eq. (10) gives p_t in (0, S)): S=10, p_t=9.6, D=3 "
                      "(window s = 7..9)", rng.normal(size=10), 9.6, 3,
                      "p_t, a fraction of the sentence's length, may lie past its last position; the "
                      "window keeps the positions inside the sentence. " + LP_RULE),
        _local_p_case("odd D: S=12, p_t=5.5, D=3, sigma = 1.5 (window s = 3..8)", 2 * rng.normal(size=12), 5.5, 3),
        _local_p_case("the window covers the whole sentence: S=5, p_t=2.3, D=6", rng.normal(size=5), 2.3, 6),
        _local_p_case("large scores around 1000: S=8, p_t=4.2, D=2", 1000.0 + rng.normal(size=8), 4.2, 2,
                      LP_OVERFLOW_HINT),
    ]


@allowing("NumPy operations such as np.arange, np.where, np.exp and np.sum.", library=SOFTMAX)
def check_local_p_weights(fn: Callable[..., Any]) -> CheckResult:
    """Check a learner's local-p weights: a softmax over the window times a Gaussian.

    Parameters
    ----------
    fn : callable
        The learner's ``local_p_weights(scores, p_t, D)``, called as ``fn(scores, p_t, D)``:

        - ``scores`` : (S,) float64 ndarray, score(h_t, h̄_s) for every source
          position s = 0..S-1;
        - ``p_t`` : float, the aligned position (0-based, real-valued, in (0, S)
          as eq. (10) predicts it, so possibly past S - 1);
        - ``D`` : int >= 1, the window half-width;
        - returns ``weights`` : (S,). Inside the window, the positions s with
          |s - p_t| <= D (from ceil(p_t - D) to floor(p_t + D), both included,
          clipped to 0..S-1; p_t is not rounded): the softmax of the scores over
          the window times exp(-(s - p_t)^2 / (2 sigma^2)), sigma = D / 2.
          Outside it: exactly 0. Not renormalised. A NumPy array, a torch
          tensor or a nested list.

    Returns
    -------
    CheckResult
        Truthy when every hidden case passes; otherwise the first failing case,
        the first wrong entry and a hint naming the likely bug: no Gaussian,
        sigma = D (or D // 2), the softmax over the whole sentence, the
        Gaussian before the softmax, renormalised weights, a rounded p_t
        (window or Gaussian), a window one position short, weights of the
        window only, overflow at large scores.

    Notes
    -----
    The reference is computed with the library's
    :func:`attncourse.functional.luong.local_window`, a masked softmax and
    :func:`attncourse.functional.luong.gaussian_weights`, so it equals the
    ``weights`` of :func:`attncourse.functional.luong.luong_step` for local-p.

    References
    ----------
    Luong et al. (2015), section 3.2, eqs. (7), (10)-(11).

    Examples
    --------
    >>> import numpy as np
    >>> def my_local_p_weights(scores, p_t, D):
    ...     s = np.arange(len(scores))
    ...     window = np.abs(s - p_t) <= D
    ...     e = np.where(window, np.exp(scores - scores[window].max()), 0.0)
    ...     return e / e.sum() * np.exp(-(s - p_t) ** 2 / (2 * (D / 2) ** 2))
    >>> check_local_p_weights(my_local_p_weights)
    ✔ check_local_p_weights: all 7 hidden cases pass
    """
    return run_cases("check_local_p_weights", fn, local_p_weights_cases(),
                     references=(gaussian_weights,))


# --------------------------------------------------------------------- softmax with a temperature

TS_RULE = (
    "The weights are the softmax of the scores divided by tau: divide, then take a stable softmax "
    "(subtract the largest entry before exp). The weights sum to 1."
)
TS_TIMES_HINT = (
    "You multiplied the scores by tau instead of dividing: a large tau must flatten the weights "
    "towards uniform, a small one sharpen them."
)
TS_IGNORED_HINT = "tau is ignored: you returned the plain softmax. Divide the scores by tau first."
TS_AFTER_HINT = (
    "tau is applied after the softmax. It divides the scores, before the softmax."
)
TS_OVERFLOW_HINT = (
    "NaN at a small tau: the divided scores are in the thousands, their exponentials overflow to "
    "infinity and infinity over infinity is NaN. Subtract the largest divided score (or the "
    "largest score, before dividing) before exponentiating."
)
TS_HARDMAX_HINT = (
    "You returned the hardmax (all weight on the largest score): that is only the limit tau -> 0. "
    "At this tau the weights are the softmax of the divided scores."
)
TS_UNIFORM_HINT = (
    "You returned uniform weights: that is only the limit tau -> inf. At this tau the weights are "
    "the softmax of the divided scores."
)
TS_SHAPE_HINT = "Return weights of the same shape as the scores."


def _temperature_variants(scores: np.ndarray, tau: float) -> list[tuple[str, np.ndarray]]:
    plain = softmax(scores)
    return buggy_variants([
        (TS_TIMES_HINT, lambda: softmax(scores * tau)),
        (TS_IGNORED_HINT, lambda: plain),
        (TS_AFTER_HINT, lambda: plain / tau),
        (TS_AFTER_HINT, lambda: softmax(plain / tau)),
        (TS_AFTER_HINT, lambda: plain ** (1.0 / tau)),
        (TS_HARDMAX_HINT, lambda: hardmax(scores)),
        (TS_UNIFORM_HINT, lambda: np.full(scores.shape, 1.0 / scores.shape[-1])),
    ])


def _diagnose_temperature(got: Any, case: Case) -> str | None:
    scores, tau = case.args["scores"], case.args["tau"]
    if not isinstance(got, np.ndarray):
        return None
    if got.shape != np.asarray(case.expected).shape:
        return TS_SHAPE_HINT
    got = got.astype(np.float64)
    hint = variant_hint(got, _temperature_variants(scores, tau), case.expected, case)
    if hint:
        return hint
    if np.isnan(got).any():
        return TS_OVERFLOW_HINT
    return None


def _temperature_case(description: str, scores: np.ndarray, tau: float, hint: str = TS_RULE) -> Case:
    scores = np.asarray(scores, dtype=np.float64)
    return Case(description=description, args={"scores": scores, "tau": float(tau)},
                expected=softmax_with_temperature(scores, tau), atol=_ATOL, rtol=_RTOL, hint=hint,
                diagnose=_diagnose_temperature)


def temperature_softmax_cases(seed: int = 0) -> list[Case]:
    """The hidden cases of :func:`check_temperature_softmax`, drawn with ``seed``."""
    rng = np.random.default_rng(seed)
    tie = rng.normal(size=5)
    tie[[1, 3]] = tie.max() + 1.0
    # A largest score above 0.71 makes exp(score / 0.001) overflow float64 in an unstable softmax.
    sharp = rng.normal(size=5)
    sharp[2] = 1.5
    return [
        _temperature_case("tau = 0.5, sharper than the softmax: n=5", rng.normal(size=5), 0.5),
        _temperature_case("tau = 1, the plain softmax: n=6", rng.normal(size=6), 1.0),
        _temperature_case("tau = 4, flatter: n=4", 2 * rng.normal(size=4), 4.0),
        _temperature_case("tau = 100, nearly uniform: n=6", rng.normal(size=6), 100.0),
        _temperature_case("tau = 0.001, nearly the hardmax: n=5", sharp, 1e-3, TS_OVERFLOW_HINT),
        _temperature_case("tau = 0.001 with two tied largest scores (they share the weight): n=5", tie, 1e-3,
                          "Two scores tie for the largest: as tau -> 0 they split the weight, 0.5 each. "
                          + TS_OVERFLOW_HINT),
    ]


@allowing("NumPy operations: np.exp, np.max and np.sum.", library=SOFTMAX)
def check_temperature_softmax(fn: Callable[..., Any]) -> CheckResult:
    """Check a learner's softmax with a temperature, softmax(scores / tau).

    Parameters
    ----------
    fn : callable
        The learner's ``temperature_softmax(scores, tau)``, called as ``fn(scores, tau)``:

        - ``scores`` : (n,) float64 ndarray;
        - ``tau`` : float > 0, the temperature;
        - returns ``weights`` : (n,), exp(e_j / tau) / sum_k exp(e_k / tau),
          computed stably (tau = 0.001 is among the cases).

    Returns
    -------
    CheckResult
        Truthy when every hidden case passes; otherwise the first failing case,
        the first wrong entry and a hint naming the likely bug: tau multiplied
        instead of divided, tau ignored or applied after the softmax, the
        hardmax or uniform limit returned, overflow at a small tau.

    Notes
    -----
    The reference is :func:`attncourse.functional.softmax_with_temperature`.

    References
    ----------
    Hinton et al. (2015), section 2.

    Examples
    --------
    >>> import numpy as np
    >>> def my_temperature_softmax(scores, tau):
    ...     z = scores / tau
    ...     e = np.exp(z - z.max())
    ...     return e / e.sum()
    >>> check_temperature_softmax(my_temperature_softmax)
    ✔ check_temperature_softmax: all 6 hidden cases pass
    """
    return run_cases("check_temperature_softmax", fn, temperature_softmax_cases(),
                     references=(softmax_with_temperature,))


__all__ = [
    "check_general_score",
    "check_local_p_weights",
    "check_temperature_softmax",
    "general_score_cases",
    "local_p_weights_cases",
    "temperature_softmax_cases",
]
