"""Figures for the chapter "A family of attentions": Luong's local windows and the temperature knob.

- :func:`local_weights`: the numbers behind a local-attention picture (window,
  alignment weights, Gaussian, final weights) for given scores, computed with
  :mod:`attncourse.functional.luong` so that figure and library agree.
- :func:`plot_local_window`: one target step of local attention as bars over
  the source positions: the window [p_t - D, p_t + D] shaded, the Gaussian of
  local-p drawn as a curve, the alignment weights and the final weights.
- :func:`plot_alignment_windows`: the weights of a whole translation with each
  row's window framed and its aligned position p_t marked (local-m vs local-p).
- :func:`plot_temperature`: softmax(e / tau) for several temperatures side by
  side, from the uniform distribution (large tau) to the hardmax (tau -> 0).
- :func:`plot_tempered_weights`: the weights at one temperature against the
  two limits, the figure of :class:`attncourse.widgets.TemperatureExplorer`.
- :func:`plot_cost`: scores computed per target step, global (S) vs local (2D + 1).

Window convention (the library's, :func:`attncourse.functional.luong.local_window`):
the source positions s = 0..S-1 with |s - p_t| <= D are in the window, i.e. the
integers from ceil(p_t - D) to floor(p_t + D), both included, clipped to the
sentence. p_t is never rounded.

References
----------
Luong, Pham, Manning (2015), "Effective Approaches to Attention-based Neural
Machine Translation", EMNLP, sections 3.1-3.2, eqs. (7), (10)-(11) of the arXiv
version 1508.04025v5 (eq. (10) predicts p_t, eq. (11) is the Gaussian, sigma = D / 2).
Hinton, Vinyals, Dean (2015), "Distilling the Knowledge in a Neural Network", section 2.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.patches import Rectangle

from attncourse.functional.luong import (
    gaussian_weights,
    local_window,
    validate_half_width,
)
from attncourse.functional.numpy_attention import softmax
from attncourse.functional.temperature import entropy, hardmax, softmax_with_temperature
from attncourse.viz.heatmap import to_numpy
from attncourse.viz.seq2seq import plot_alignment, token_label, weights_2d

#: The local modes of Luong et al. (2015), section 3.2.
LOCAL_MODES: tuple[str, ...] = ("local-m", "local-p")

_WINDOW_COLOUR, _ALIGN_COLOUR, _WEIGHT_COLOUR = "#fde5cc", "#9ecae1", "#1f4e9c"
_GAUSS_COLOUR, _MARK_COLOUR = "#d62728", "#d62728"


# ----------------------------------------------------------------------------- the numbers


@dataclass(frozen=True)
class LocalWeights:
    """The moves of one local-attention step, from given scores (Luong et al. 2015, section 3.2).

    Attributes
    ----------
    mode : str
        ``"local-m"`` or ``"local-p"``.
    p_t : float
        Aligned position (0-based).
    D : int
        Window half-width.
    window : (src_len,) bool
        ``True`` where |s - p_t| <= D.
    positions : (n_window,) int
        The source positions in the window, ascending (empty if none).
    align : (src_len,)
        Softmax of the scores over the window (eq. (7)); 0 outside it; sums to
        1 unless the window is empty.
    gaussian : (src_len,) or None
        exp(-(s - p_t)^2 / (2 sigma^2)), sigma = D / 2 (eq. (11)); ``None`` for local-m.
    weights : (src_len,)
        ``align * gaussian`` for local-p, ``align`` for local-m; not renormalised.
    sigma : float or None
        D / 2 for local-p, ``None`` for local-m.
    """

    mode: str
    p_t: float
    D: int
    window: np.ndarray
    positions: np.ndarray
    align: np.ndarray
    gaussian: np.ndarray | None
    weights: np.ndarray
    sigma: float | None


def _validate_mode(mode: str) -> None:
    if mode not in LOCAL_MODES:
        raise ValueError(f"mode must be one of {LOCAL_MODES}, got {mode!r}")


def local_weights(scores: Any, p_t: float, D: int, mode: str = "local-p") -> LocalWeights:
    """Window, alignment weights and Gaussian of one local-attention step, for given scores.

    The same computation as moves 2-4 of
    :func:`attncourse.functional.luong.luong_step`, starting from the scores
    instead of the states: ``local_window``, a softmax over the window, and for
    local-p the factor ``gaussian_weights``.

    Parameters
    ----------
    scores : array-like, (src_len,)
        score(h_t, h̄_s) for every source position.
    p_t : float
        Aligned position, 0-based (for local-m, the target step t).
    D : int
        Window half-width (>= 1 for local-p, >= 0 for local-m).
    mode : {"local-m", "local-p"}
        local-p multiplies the weights by the Gaussian of eq. (11); local-m does not.

    Returns
    -------
    LocalWeights

    Raises
    ------
    ValueError
        If ``scores`` is not one non-empty vector, ``mode`` is unknown, or D is
        not a valid window half-width.
    """
    _validate_mode(mode)
    values = to_numpy(scores)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"scores must be one non-empty vector (src_len,), got shape {values.shape}")
    D = validate_half_width(D, mode)
    src_len = values.shape[0]
    window = local_window(p_t, D, src_len)
    align = softmax(values, mask=window)
    if mode == "local-p":
        gaussian = gaussian_weights(np.arange(src_len), p_t, D)
        weights, sigma = align * gaussian, D / 2.0
    else:
        gaussian, weights, sigma = None, align, None
    return LocalWeights(mode=mode, p_t=float(p_t), D=D, window=window, positions=np.flatnonzero(window),
                        align=align, gaussian=gaussian, weights=weights, sigma=sigma)


# ----------------------------------------------------------------------------- one step


def plot_local_window(
    tokens: Sequence[str],
    p_t: float,
    D: int,
    scores: Any = None,
    mode: str = "local-p",
    ax: Axes | None = None,
) -> Axes:
    """Draw one step of local attention as bars over the source tokens (Luong et al. 2015, section 3.2).

    The window [p_t - D, p_t + D] is shaded (a source position is in it when
    its bar's centre lies in the shade), p_t is a vertical line, and for
    local-p the Gaussian exp(-(s - p_t)^2 / (2 sigma^2)), sigma = D / 2, is a
    curve. Wide light bars are the alignment weights, the softmax of the scores
    over the window (eq. (7)); narrow dark bars are the final weights, the
    alignment weights times the Gaussian (eq. (11)). For local-m there is no
    Gaussian and the two coincide, so only one set of bars is drawn. Every
    weight outside the window is 0.

    Parameters
    ----------
    tokens : sequence of str, length src_len
        Source tokens, the x tick labels.
    p_t : float
        Aligned position, 0-based (for local-m, the target step t).
    D : int
        Window half-width.
    scores : array-like, (src_len,), optional
        Alignment scores score(h_t, h̄_s). Without them all scores are taken
        equal, so the alignment weights are uniform over the window and the
        picture shows the window and the Gaussian alone.
    mode : {"local-p", "local-m"}
        Whether the Gaussian applies.
    ax : matplotlib Axes, optional
        Where to draw; a new figure sized to ``src_len`` is made if omitted.

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on. ``ax.containers`` holds the bars, labelled
        ``"align"`` then (local-p only) ``"weights"``; the shaded window has gid
        ``"window"``, the p_t line gid ``"p_t"`` and the Gaussian curve gid ``"gaussian"``.

    Raises
    ------
    ValueError
        If there is no token, ``scores`` does not have one entry per token
        (both lengths are in the message), or ``mode`` or D are invalid.

    References
    ----------
    Luong et al. (2015), section 3.2, eqs. (7), (10)-(11).
    """
    labels = [token_label(t) for t in tokens]
    src_len = len(labels)
    if src_len == 0:
        raise ValueError("give at least one source token")
    _validate_mode(mode)
    if scores is None:
        values = np.zeros(src_len)
    else:
        values = to_numpy(scores)
        if values.shape != (src_len,):
            raise ValueError(
                f"scores must be (src_len,) = ({src_len},) to fit the {src_len} tokens, got shape {values.shape}"
            )
    step = local_weights(values, p_t, D, mode)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(5.0, 1.5 + 0.55 * src_len) + 2.2, 3.2), layout="constrained")

    x = np.arange(src_len)
    ax.axvspan(step.p_t - step.D, step.p_t + step.D, color=_WINDOW_COLOUR, alpha=0.8, zorder=0, gid="window",
               label=f"window [p$_t$ - D, p$_t$ + D] = [{step.p_t - step.D:g}, {step.p_t + step.D:g}]")
    ax.axvline(step.p_t, color=_MARK_COLOUR, linestyle=":", linewidth=1.2, gid="p_t")
    if mode == "local-p":
        ax.bar(x, step.align, width=0.8, color=_ALIGN_COLOUR, edgecolor=_WEIGHT_COLOUR, linewidth=0.6,
               label="align", zorder=2)
        ax.bar(x, step.weights, width=0.4, color=_WEIGHT_COLOUR, label="weights", zorder=3)
        grid = np.linspace(-0.5, src_len - 0.5, 50 * src_len + 1)
        ax.plot(grid, gaussian_weights(grid, step.p_t, step.D), color=_GAUSS_COLOUR, linewidth=1.5, gid="gaussian",
                zorder=4, label=rf"Gaussian, $\sigma$ = D/2 = {step.sigma:g}")
    else:
        ax.bar(x, step.align, width=0.6, color=_WEIGHT_COLOUR, label="align", zorder=3)
    # Legend entries: bar containers carry short labels for tests; the legend spells them out.
    handles, names = ax.get_legend_handles_labels()
    pretty = {"align": "softmax over the window" + ("" if mode == "local-p" else " = weights"),
              "weights": "weights = softmax × Gaussian"}
    # Outside the axes, so it never hides a bar.
    ax.legend(handles, [pretty.get(n, n) for n in names], fontsize=7, loc="upper left",
              bbox_to_anchor=(1.01, 1.0))

    ax.set_xticks(x, labels=labels)
    if src_len > 6 and max(len(label) for label in labels) > 3:
        plt.setp(ax.get_xticklabels(), rotation=45, ha="right", rotation_mode="anchor")
    ax.set_xlim(-0.5, src_len - 0.5)
    ax.set_ylim(0.0, 1.25)
    ax.set_xlabel("source position s (0-based)")
    ax.set_ylabel("weight")
    total = float(step.weights.sum())
    ax.set_title(f"{mode}: p$_t$ = {step.p_t:g}, D = {step.D}; weights sum to {total:.2f}")
    return ax


# ----------------------------------------------------------------------------- a whole translation


def plot_alignment_windows(
    weights: Any,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    positions: Any,
    D: int,
    ax: Axes | None = None,
    title: str | None = None,
) -> Axes:
    """Alignment heatmap of a local-attention model with each row's window framed and p_t marked.

    Row t holds the weights a_t(s) with which output token t was produced; its
    window, the source positions s with |s - p_t| <= D, is outlined, and a dot
    marks p_t (connected from row to row, so the path of the aligned position
    shows). With local-m, p_t = t and the windows march down the diagonal; with
    local-p the model predicts p_t (eq. (10)) and the windows follow the
    reordering of the words. For local-p a row sums to less than 1, since the
    weights are multiplied by the Gaussian and not renormalised.

    Parameters
    ----------
    weights : array-like, (tgt_len, src_len)
        a_t(s) for every target step t and source position s. Torch tensors are accepted.
    src_tokens : sequence of str, length src_len
        Column labels.
    tgt_tokens : sequence of str, length tgt_len
        Row labels.
    positions : array-like, (tgt_len,)
        p_t of every row, 0-based (a row number t for local-m).
    D : int
        Window half-width, >= 0.
    ax : matplotlib Axes, optional
        Where to draw; a new figure sized to the matrix is made if omitted.
    title : str, optional
        Axes title; by default it names D.

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on; the window frames are the patches with gid
        ``"window"`` (one per row whose window is not empty) and the p_t
        marks the line with gid ``"p_t"``.

    Raises
    ------
    ValueError
        If ``weights`` does not fit the tokens, ``positions`` is not
        ``(tgt_len,)`` (both shapes are in the message), or D is invalid.

    References
    ----------
    Luong et al. (2015), section 3.2 and figure 7 (alignments of global and local models).
    """
    values = weights_2d(weights, [token_label(t) for t in src_tokens], [token_label(t) for t in tgt_tokens])
    n_tgt, n_src = values.shape
    p = to_numpy(positions)
    if p.shape != (n_tgt,):
        raise ValueError(
            f"positions must be (tgt_len,) = ({n_tgt},), one p_t per row of weights {values.shape}, got shape {p.shape}"
        )
    D = validate_half_width(D)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4.5, 2.0 + 0.55 * n_src), 1.5 + 0.45 * n_tgt), layout="constrained")
    title = f"Local attention: windows [p$_t$ - D, p$_t$ + D], D = {D}; dots mark p$_t$" if title is None else title
    plot_alignment(values, src_tokens, tgt_tokens, ax=ax, title=title, annotate=max(n_src, n_tgt) <= 12)
    for t, p_t in enumerate(p):
        inside = np.flatnonzero(local_window(p_t, D, n_src))
        if inside.size:
            lo, hi = int(inside[0]), int(inside[-1])
            ax.add_patch(Rectangle((lo - 0.5, t - 0.5), hi - lo + 1, 1.0, fill=False, edgecolor=_MARK_COLOUR,
                                   linewidth=1.5, gid="window", clip_on=False, in_layout=False))
    # p_t of local-p lies in (0, S), so it may fall half a cell right of the last column.
    ax.plot(p, np.arange(n_tgt), "o-", color=_MARK_COLOUR, markersize=4, linewidth=0.8, alpha=0.9, gid="p_t",
            clip_on=False)
    return ax


# ----------------------------------------------------------------------------- temperature


def _scores_and_labels(scores: Any, labels: Sequence[str] | None) -> tuple[np.ndarray, list[str]]:
    values = to_numpy(scores)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"scores must be one non-empty vector (n,), got shape {values.shape}")
    if labels is None:
        return values, [str(j) for j in range(values.size)]
    names = [token_label(label) for label in labels]
    if len(names) != values.size:
        raise ValueError(f"{len(names)} labels were given for scores of shape {values.shape}; pass one per score")
    return values, names


def plot_temperature(
    scores: Any,
    taus: Sequence[float],
    labels: Sequence[str] | None = None,
    ax: Axes | None = None,
) -> Axes:
    """Grouped bars of softmax(e / tau) for several temperatures tau, one colour per tau.

    The order of the weights never changes; only how peaked they are. A large
    tau flattens them towards the uniform 1/n (dashed line), a small one
    sharpens them towards the hardmax, all weight on the largest score
    (:func:`attncourse.functional.softmax_with_temperature`).

    Parameters
    ----------
    scores : array-like, (n,)
        Scores e_j, e.g. alignment scores over n source tokens.
    taus : sequence of float
        Temperatures, each > 0 (``numpy.inf`` allowed); drawn left to right in
        each group, in the order given.
    labels : sequence of str, length n, optional
        Token labels of the scores (the x ticks); numbered from 0 if omitted.
    ax : matplotlib Axes, optional
        Where to draw; a new figure is made if omitted.

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on; ``ax.containers[i]`` holds the bars of ``taus[i]``,
        labelled ``"tau = ..."``; the uniform level is the line with gid ``"uniform"``.

    Raises
    ------
    ValueError
        If ``scores`` is not one vector, the labels do not fit it, ``taus`` is
        empty, or a tau is not > 0.

    References
    ----------
    Hinton et al. (2015), section 2.
    """
    values, names = _scores_and_labels(scores, labels)
    taus = [float(tau) for tau in taus]
    if not taus:
        raise ValueError("taus is empty: give at least one temperature")
    rows = [softmax_with_temperature(values, tau) for tau in taus]
    n, k = values.size, len(taus)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(5.0, 1.5 + 0.35 * n * k) + 1.2, 3.2), layout="constrained")
    width = 0.8 / k
    colours = plt.get_cmap("viridis")(np.linspace(0.1, 0.9, k))
    for i, (tau, row) in enumerate(zip(taus, rows)):
        ax.bar(np.arange(n) + (i - (k - 1) / 2) * width, row, width=width, color=colours[i],
               label=f"tau = {tau:g}")
    ax.axhline(1.0 / n, color="grey", linestyle="--", linewidth=1.0, gid="uniform", label="uniform 1/n")
    ax.set_xticks(np.arange(n), labels=[f"{name}\n{v:.2g}" for name, v in zip(names, values)])
    ax.set_xlabel("token (score e$_j$)")
    ax.set_ylabel(r"softmax(e / $\tau$)")
    ax.set_ylim(0.0, 1.05)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(r"Large $\tau$: uniform; $\tau \to 0$: hardmax")
    return ax


def plot_tempered_weights(
    scores: Any,
    tau: float,
    labels: Sequence[str] | None = None,
    ax: Axes | None = None,
) -> Axes:
    """The weights softmax(e / tau) at one temperature, between its two limits.

    Bars are the weights at ``tau``; black outlines are the hardmax (tau -> 0,
    all weight on the largest score, ties split) and the dashed line the
    uniform weights 1/n (tau -> inf). The title gives the largest weight and
    the entropy in nats (0 for the hardmax with one winner, ln n for uniform).

    Parameters
    ----------
    scores : array-like, (n,)
        Scores e_j.
    tau : float
        Temperature, > 0.
    labels : sequence of str, length n, optional
        Token labels; each tick also shows its score.
    ax : matplotlib Axes, optional
        Where to draw; a new figure is made if omitted.

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on; ``ax.containers`` holds the bars labelled
        ``"weights"`` and ``"hardmax"``; the uniform level has gid ``"uniform"``.

    Raises
    ------
    ValueError
        If ``scores`` is not one vector, the labels do not fit it, or tau is not > 0.

    References
    ----------
    Hinton et al. (2015), section 2.
    """
    values, names = _scores_and_labels(scores, labels)
    weights = softmax_with_temperature(values, tau)
    n = values.size
    if ax is None:
        _, ax = plt.subplots(figsize=(max(5.0, 1.5 + 0.6 * n) + 2.0, 3.2), layout="constrained")
    x = np.arange(n)
    ax.bar(x, weights, width=0.6, color=_WEIGHT_COLOUR, label="weights", zorder=2)
    ax.bar(x, hardmax(values), width=0.75, fill=False, edgecolor="black", linewidth=1.0, linestyle="-",
           label="hardmax", zorder=3)
    ax.axhline(1.0 / n, color="grey", linestyle="--", linewidth=1.0, gid="uniform", label="uniform 1/n")
    handles, got = ax.get_legend_handles_labels()
    pretty = {"weights": rf"softmax(e / $\tau$), $\tau$ = {float(tau):.3g}", "hardmax": r"hardmax ($\tau \to 0$)",
              "uniform 1/n": r"uniform 1/n ($\tau \to \infty$)"}
    ax.legend(handles, [pretty[g] for g in got], fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_xticks(x, labels=[f"{name}\n{v:.2g}" for name, v in zip(names, values)])
    ax.set_xlabel("token (score e$_j$)")
    ax.set_ylabel("weight")
    ax.set_ylim(0.0, 1.25)
    ax.set_title(f"largest weight {weights.max():.2f}, entropy {entropy(weights):.2f} nats\n"
                 f"(hardmax: 0, uniform: ln {n} = {np.log(n):.2f})", fontsize=10)
    return ax


# ----------------------------------------------------------------------------- cost


def plot_cost(src_lens: Sequence[int], D: int | Sequence[int], ax: Axes | None = None) -> Axes:
    """Score computations per target step: global attention (S) against local attention (2D + 1).

    Global attention scores every source position, so its cost per target step
    grows with the source length S; local attention scores only the window, at
    most 2D + 1 positions (fewer when S < 2D + 1 or the window crosses the
    sentence edge), whatever S is. The local lines show min(S, 2D + 1).

    Parameters
    ----------
    src_lens : sequence of int
        Source lengths S on the x axis, each >= 1.
    D : int or sequence of int
        Window half-width(s); one local line per value (the paper uses D = 10).
    ax : matplotlib Axes, optional
        Where to draw; a new figure is made if omitted.

    Returns
    -------
    matplotlib.axes.Axes
        The axes drawn on; ``ax.lines[0]`` is global attention, then one line
        per D, labelled ``"global"`` and ``"local, D = ..."``.

    Raises
    ------
    ValueError
        If ``src_lens`` is empty or holds a length < 1, or a D is invalid.

    References
    ----------
    Luong et al. (2015), section 3.2 (local attention "avoids the expensive
    computation" of global attention over long sentences).
    """
    lengths = np.asarray(src_lens)
    if lengths.ndim != 1 or lengths.size == 0 or (lengths < 1).any():
        raise ValueError(f"src_lens must be a non-empty list of lengths >= 1, got {src_lens!r}")
    halves = [validate_half_width(d) for d in (D if isinstance(D, Sequence) else [D])]
    if ax is None:
        _, ax = plt.subplots(figsize=(5.0, 3.2), layout="constrained")
    ax.plot(lengths, lengths, "o-", color="black", markersize=3, label="global")
    colours = plt.get_cmap("tab10")(np.arange(len(halves)) % 10)
    for colour, d in zip(colours, halves):
        ax.plot(lengths, np.minimum(lengths, 2 * d + 1), "s-", color=colour, markersize=3,
                label=f"local, D = {d}")
    ax.set_xlabel("source length S")
    ax.set_ylabel("scores per target step")
    ax.set_title("Global attention scores all S positions; local at most 2D + 1")
    ax.legend(fontsize=8)
    return ax


__all__ = [
    "LOCAL_MODES",
    "LocalWeights",
    "local_weights",
    "plot_alignment_windows",
    "plot_cost",
    "plot_local_window",
    "plot_tempered_weights",
    "plot_temperature",
]
