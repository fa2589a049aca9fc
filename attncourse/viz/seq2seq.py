"""Figures for the encoder-decoder chapters: the bottleneck and Bahdanau attention.

Source: Bahdanau et al. (2015), "Neural Machine Translation by Jointly Learning to Align
and Translate", section 3.1 and figure 3.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import cycle
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure, SubFigure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Rectangle

from attncourse.functional import AdditiveStepTrace
from attncourse.viz.heatmap import heatmap, to_numpy

#: Metrics of :func:`attncourse.train.metrics.evaluate_by_bucket`; the first two
#: are fractions in [0, 1] and are drawn in percent.
METRICS: dict[str, str] = {
    "exact_match": "exact match (%)",
    "token_accuracy": "token accuracy (%)",
    "bleu": "BLEU",
    "chrf": "chrF",
}
_PERCENT_METRICS = ("exact_match", "token_accuracy")

#: Most entries of c_t that :func:`plot_bahdanau_step` draws.
MAX_CONTEXT_ENTRIES = 24

_ENC_COLOUR, _DEC_COLOUR, _CTX_COLOUR = "#cfe2f3", "#fde5cc", "#d9ead3"
_EDGE, _ATTN_COLOUR, _HIGHLIGHT = "#404040", "#1f4e9c", "#d62728"
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")

# Rows of the encoder-decoder schematic, in data units (bottom to top).
_Y_SRC, _Y_ENC, _Y_CTX, _Y_DEC, _Y_OUT = 0.0, 1.0, 2.3, 3.6, 4.5
_BOX_W, _BOX_H = 0.72, 0.5


def token_label(token: Any) -> str:
    """A token as drawn: whitespace-only tokens become "␣" so they stay visible."""
    token = str(token)
    return "␣" * max(1, len(token)) if token.strip() == "" else token


def weights_2d(weights: Any, src_tokens: Sequence[str], tgt_tokens: Sequence[str]) -> np.ndarray:
    """Weights as a (tgt_len, src_len) array that fits the tokens; else ValueError."""
    values = to_numpy(weights)
    if values.ndim != 2:
        raise ValueError(
            f"weights must be (tgt_len, src_len), got shape {values.shape}; "
            "select one sentence (and one head) first"
        )
    if values.shape != (len(tgt_tokens), len(src_tokens)):
        raise ValueError(
            f"weights have shape (tgt_len, src_len) = {values.shape} but {len(tgt_tokens)} target and "
            f"{len(src_tokens)} source tokens were given; pass one target token per row and one "
            "source token per column"
        )
    return values


# ----------------------------------------------------------------------------- encoder-decoder schematic


def _box(ax: Axes, x: float, y: float, text: str, colour: str, *, fontsize: float,
         lw: float = 1.0, edge: str = _EDGE, alpha: float = 1.0, width: float = _BOX_W) -> None:
    ax.add_patch(FancyBboxPatch((x - width / 2, y - _BOX_H / 2), width, _BOX_H,
                                boxstyle="round,pad=0,rounding_size=0.08", facecolor=colour,
                                edgecolor=edge, linewidth=lw, alpha=alpha))
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize, alpha=max(alpha, 0.6))


def _arrow(ax: Axes, start: tuple[float, float], end: tuple[float, float], *, colour: str = _EDGE,
           lw: float = 1.0, style: str = "-|>", alpha: float = 1.0) -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=9, color=colour,
                                 linewidth=lw, alpha=alpha, shrinkA=0, shrinkB=0))


def _schematic_fontsize(n: int) -> float:
    if n <= 10:
        return 10.0
    if n <= 16:
        return 8.0
    return 6.5


def _step_weights(weights: Any, step: int | None, src: list[str], tgt: list[str]) -> tuple[Any, int | None]:
    """Row ``step`` (1-based) of ``weights`` and the step as an int, or (None, None)."""
    if weights is None:
        if step is not None:
            raise ValueError("step was given without weights: pass weights=(tgt_len, src_len) as well")
        return None, None
    values = weights_2d(weights, src, tgt)
    if step is None:
        raise ValueError(f"weights were given without step: pass step=t with t in 1..{len(tgt)}")
    if not 1 <= int(step) <= len(tgt):
        raise ValueError(f"step must lie in 1..tgt_len = 1..{len(tgt)} (it is 1-based), got {step}")
    return values[int(step) - 1], int(step)


def _draw_context(ax: Axes, row: Any, step: int | None, x_enc: np.ndarray, x_dec: np.ndarray, size: float) -> str:
    """The context between encoder and decoder, and the default title."""
    if row is None:
        x_c = 0.0
        _box(ax, x_c, _Y_CTX, "$c$", _CTX_COLOUR, fontsize=size + 1, lw=2.5, edge=_HIGHLIGHT)
        ax.text(x_c - _BOX_W / 2 - 0.15, _Y_CTX, "fixed-size context c\n(the last encoder state)",
                ha="right", va="center", fontsize=size - 1, color=_HIGHLIGHT)
        _arrow(ax, (x_enc[-1], _Y_ENC + _BOX_H / 2), (x_c + 0.1, _Y_CTX - _BOX_H / 2), colour=_HIGHLIGHT, lw=1.5)
        for x in x_dec:
            _arrow(ax, (x_c, _Y_CTX + _BOX_H / 2), (x, _Y_DEC - _BOX_H / 2), colour=_HIGHLIGHT, lw=1.2)
        default = "Without attention: every decoder step reads the same context c"
    else:
        x_c = x_dec[step - 1]
        top = max(float(row.max()), 1e-12)
        for x, a in zip(x_enc, row):
            start = np.array([x, _Y_ENC + _BOX_H / 2])
            end = np.array([x_c, _Y_CTX - _BOX_H / 2])
            ax.plot(*zip(start, end), color=_ATTN_COLOUR, linewidth=0.4 + 5.0 * a,
                    alpha=0.15 + 0.85 * a / top, solid_capstyle="round", gid="attention")
            at = start + 0.28 * (end - start)
            ax.text(at[0], at[1], f"{a:.2f}", ha="center", va="center", fontsize=size - 2,
                    color=_ATTN_COLOUR, bbox=dict(boxstyle="round,pad=0.15", facecolor="white",
                                                   edgecolor="none", alpha=0.85))
        _box(ax, x_c, _Y_CTX, f"$c_{{{step}}}$", _CTX_COLOUR, fontsize=size + 1, lw=2.0, edge=_ATTN_COLOUR)
        ax.text(x_c - _BOX_W / 2 - 0.1, _Y_CTX, rf"$c_{{{step}}} = \sum_j \alpha_{{{step}j}}\, h_j$",
                ha="right", va="center", fontsize=size - 1, color=_ATTN_COLOUR)
        _arrow(ax, (x_c, _Y_CTX + _BOX_H / 2), (x_c, _Y_DEC - _BOX_H / 2), colour=_ATTN_COLOUR, lw=1.5)
        default = f"With attention: step {step} reads its own context $c_{{{step}}}$, a weighted sum of the $h_j$"
    return default


def plot_encoder_decoder(
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    *,
    weights: Any = None,
    step: int | None = None,
    ax: Axes | None = None,
    title: str | None = None,
    bidirectional: bool = False,
) -> Axes:
    """An RNN encoder-decoder as boxes and arrows: one fixed context, or step t's c_t.

    Shapes: weights (tgt_len, src_len), with ``step`` t in 1 .. tgt_len. Returns the Axes;
    the attention lines have gid ``"attention"``. Raises ValueError if a token list is
    empty, ``weights`` does not fit the tokens, or ``weights`` and ``step`` do not come
    together. Source: Cho et al. (2014), section 2.2.
    """
    src = [token_label(t) for t in src_tokens]
    tgt = [token_label(t) for t in tgt_tokens]
    if not src or not tgt:
        raise ValueError(f"give at least one source and one target token, got {len(src)} and {len(tgt)}")
    n_src, n_tgt = len(src), len(tgt)
    row, step = _step_weights(weights, step, src, tgt)

    widest = max(n_src, n_tgt)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(8.5, min(16.0, 0.8 * widest + 3.5)), 4.0), layout="constrained")
    size = _schematic_fontsize(widest)
    x_enc = np.arange(n_src) - (n_src - 1) / 2
    x_dec = np.arange(n_tgt) - (n_tgt - 1) / 2
    left, right = -(widest - 1) / 2 - 0.5, (widest - 1) / 2 + 0.5

    for name, y in (("source", _Y_SRC), ("encoder", _Y_ENC), ("context", _Y_CTX),
                    ("decoder", _Y_DEC), ("output", _Y_OUT)):
        ax.text(left - 1.0, y, name, ha="right", va="center", fontsize=size - 1, color="0.4", style="italic")

    link = "<|-|>" if bidirectional else "-|>"
    for j, x in enumerate(x_enc):
        ax.text(x, _Y_SRC, src[j], ha="center", va="center", fontsize=size)
        _arrow(ax, (x, _Y_SRC + 0.2), (x, _Y_ENC - _BOX_H / 2))
        _box(ax, x, _Y_ENC, f"$h_{{{j + 1}}}$", _ENC_COLOUR, fontsize=size)
        if j + 1 < n_src:
            _arrow(ax, (x + _BOX_W / 2, _Y_ENC), (x_enc[j + 1] - _BOX_W / 2, _Y_ENC), style=link)

    for t, x in enumerate(x_dec, start=1):
        current = row is None or t == step
        alpha = 1.0 if current else 0.45
        _box(ax, x, _Y_DEC, f"$s_{{{t}}}$", _DEC_COLOUR, fontsize=size, alpha=alpha,
             lw=2.0 if row is not None and current else 1.0)
        _arrow(ax, (x, _Y_DEC + _BOX_H / 2), (x, _Y_OUT - 0.2), alpha=alpha)
        ax.text(x, _Y_OUT, tgt[t - 1], ha="center", va="center", fontsize=size, alpha=alpha,
                fontweight="bold" if row is not None and current else "normal")
        if t < n_tgt:
            _arrow(ax, (x + _BOX_W / 2, _Y_DEC), (x_dec[t] - _BOX_W / 2, _Y_DEC), alpha=alpha)

    default = _draw_context(ax, row, step, x_enc, x_dec, size)

    ax.set_xlim(left - 2.4, right + 0.3)
    ax.set_ylim(_Y_SRC - 0.4, _Y_OUT + 0.4)
    ax.set_axis_off()
    ax.set_title(default if title is None else title)
    return ax


# ----------------------------------------------------------------------------- alignment heatmap


def plot_alignment(
    weights: Any,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    *,
    ax: Axes | None = None,
    title: str | None = None,
    annotate: bool = True,
    highlight: int | None = None,
) -> Axes:
    """Heatmap of one translation's attention weights: which source token each output read.

    Shapes: weights (tgt_len, src_len); ``highlight`` a 1-based step. Raises ValueError if
    ``weights`` is not 2-D, the tokens do not fit it, or ``highlight`` lies outside
    1 .. tgt_len. Source: Bahdanau et al. (2015), section 5.2.1 and figure 3.
    """
    src = [token_label(t) for t in src_tokens]
    tgt = [token_label(t) for t in tgt_tokens]
    values = weights_2d(weights, src, tgt)
    n_tgt, n_src = values.shape
    if highlight is not None and not 1 <= int(highlight) <= n_tgt:
        raise ValueError(f"highlight must be a step in 1..tgt_len = 1..{n_tgt} (1-based), got {highlight}")
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4.5, 2.0 + 0.55 * n_src), 1.5 + 0.45 * n_tgt), layout="constrained")
    heatmap(values, tgt, src, ax=ax, annotate=annotate, fmt=".2f", cmap="Blues", vmin=0.0, vmax=1.0,
            title=r"Attention weights $\alpha_{tj}$ (rows sum to 1)" if title is None else title,
            xlabel="input (source) token", ylabel="output (target) token")
    if highlight is not None:
        t = int(highlight)
        ax.add_patch(Rectangle((-0.5, t - 1.5), n_src, 1.0, fill=False, edgecolor=_HIGHLIGHT,
                               linewidth=2.5, clip_on=False, in_layout=False))
        ax.get_yticklabels()[t - 1].set_fontweight("bold")
    return ax


# ----------------------------------------------------------------------------- scores by length and over training


def _bucket_table(results: Mapping[str, Mapping[str, Mapping[str, float]]], metric: str):
    if not results:
        raise ValueError("results is empty: give {model name: evaluate_by_bucket(...) result}")
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {list(METRICS)}, got {metric!r}")
    names = list(results)
    buckets = [label for label in results[names[0]] if label != "overall"]
    if not buckets:
        raise ValueError(f"the result of model {names[0]!r} has no length buckets besides 'overall'")
    for name in names[1:]:
        others = [label for label in results[name] if label != "overall"]
        if others != buckets:
            raise ValueError(
                f"models {names[0]!r} and {name!r} have different buckets: {buckets} vs {others}; "
                "evaluate them with the same edges"
            )
    scale = 100.0 if metric in _PERCENT_METRICS else 1.0
    values = np.array([[float(results[n][b][metric]) * scale for b in buckets] for n in names])
    counts = [[int(results[n][b]["count"]) for n in names] for b in buckets]
    return names, buckets, values, counts


def plot_by_length(
    results: Mapping[str, Mapping[str, Mapping[str, float]]],
    metric: str = "exact_match",
    *,
    ax: Axes | None = None,
    title: str | None = None,
    ylabel: str | None = None,
) -> Axes:
    """A score per source-length bucket: one group of bars per bucket, one bar per model.

    ``metric``: fractions (exact_match, token_accuracy) drawn in percent, bleu and chrf
    on their 0-100 scale. Raises ValueError if ``results`` is empty, ``metric`` is
    unknown, or the models' buckets are missing or differ. Source: Bahdanau et al.
    (2015), figure 2.
    """
    names, buckets, values, counts = _bucket_table(results, metric)
    if ax is None:
        _, ax = plt.subplots(figsize=(max(5.5, 1.1 * len(buckets) + 2.5), 4.0), layout="constrained")
    n_models = len(names)
    width = 0.8 / n_models
    x = np.arange(len(buckets))
    for k, name in enumerate(names):
        bars = ax.bar(x + (k - (n_models - 1) / 2) * width, values[k], width, label=name)
        labels = [f"{v:.0f}" if np.isfinite(v) else "" for v in values[k]]
        ax.bar_label(bars, labels=labels, fontsize=7, padding=1)
    ticks = []
    for bucket, ns in zip(buckets, counts):
        n = str(ns[0]) if len(set(ns)) == 1 else "/".join(str(c) for c in ns)
        ticks.append(f"{bucket}\n(n={n})")
    ax.set_xticks(x, labels=ticks)
    ax.set_ylim(0, 105)
    ax.set_xlabel("source length (tokens)")
    ax.set_ylabel(METRICS[metric] if ylabel is None else ylabel)
    ax.set_title(f"{METRICS[metric].replace(' (%)', '')} by source length" if title is None else title)
    ax.grid(True, axis="y", alpha=0.4)
    ax.set_axisbelow(True)
    # Below the axes, so the legend never hides a bar however many models there are.
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=min(n_models, 2), fontsize="small",
              frameon=False)
    return ax


def _is_fraction(key: str) -> bool:
    return key.endswith(("exact_match", "_acc", "accuracy"))


def plot_history(
    histories: Mapping[str, Sequence[Mapping[str, float]]],
    key: str = "valid_exact_match",
    *,
    ax: Axes | None = None,
    title: str | None = None,
    ylabel: str | None = None,
    xaxis: str = "epoch",
) -> Axes:
    """Learning curves of several training runs, one line per run.

    ``xaxis``: ``"epoch"``, or ``"seconds"`` of cumulative training time; fractions are
    drawn in percent. Raises ValueError if ``histories`` or a run is empty, ``xaxis``
    is unknown, or a row lacks an entry.
    """
    if not histories:
        raise ValueError("histories is empty: give {run name: list of per-epoch dicts}")
    if xaxis not in ("epoch", "seconds"):
        raise ValueError(f"xaxis must be 'epoch' or 'seconds', got {xaxis!r}")
    if ax is None:
        _, ax = plt.subplots(figsize=(6.0, 4.0), layout="constrained")
    scale = 100.0 if _is_fraction(key) else 1.0
    for (name, rows), marker in zip(histories.items(), cycle(_MARKERS)):
        if len(rows) == 0:
            raise ValueError(f"run {name!r} has an empty history")
        for i, row in enumerate(rows, start=1):
            for needed in (key, xaxis):
                if needed not in row:
                    raise ValueError(f"run {name!r}, epoch {i}: no {needed!r} in its history row "
                                     f"(it has {sorted(row)})")
        x = np.array([float(row[xaxis]) for row in rows])
        if xaxis == "seconds":
            x = np.cumsum(x)
        y = np.array([float(row[key]) for row in rows]) * scale
        ax.plot(x, y, label=name, marker=marker, markersize=4, markevery=max(1, len(x) // 20))
    pretty = key.replace("_", " ")
    ax.set_xlabel("epoch" if xaxis == "epoch" else "training time (s, cumulative)")
    ax.set_ylabel(ylabel if ylabel is not None else (f"{pretty} (%)" if scale == 100.0 else pretty))
    ax.set_title(title if title is not None else f"{pretty} during training")
    ax.grid(True, alpha=0.4)
    ax.legend()
    return ax


# ----------------------------------------------------------------------------- one Bahdanau step


def bahdanau_step_size(src_len: int, key_dim: int) -> tuple[float, float]:
    """Figure size, in inches, of :func:`plot_bahdanau_step` for ``src_len`` and ``key_dim``."""
    widest = max(src_len, min(key_dim, MAX_CONTEXT_ENTRIES))
    return max(6.0, 0.5 * widest + 2.0), 5.2


def plot_bahdanau_step(
    trace: AdditiveStepTrace,
    src_tokens: Sequence[str],
    *,
    step_label: int | str | None = None,
    out_token: str | None = None,
    fig: Figure | SubFigure | None = None,
) -> Figure | SubFigure:
    """The scores, weights and context of one Bahdanau step, from an AdditiveStepTrace.

    Raises ValueError if the trace is not one unbatched step or the tokens do not fit its
    src_len. Source: Bahdanau et al. (2015), section 3.1, eqs. (5)-(6).
    """
    scores, weights, context = (to_numpy(getattr(trace, name)) for name in ("scores", "weights", "context"))
    if scores.ndim != 1 or weights.shape != scores.shape or context.ndim != 1:
        raise ValueError(
            f"expected one unbatched step, scores (src_len,) and context (key_dim,), got scores "
            f"{scores.shape}, weights {weights.shape}, context {context.shape}"
        )
    src = [token_label(t) for t in src_tokens]
    if len(src) != scores.shape[0]:
        raise ValueError(
            f"{len(src)} source tokens were given for a trace with src_len {scores.shape[0]} "
            f"(scores have shape {scores.shape}); pass one token per source position"
        )
    if trace.mask is not None:
        scores = np.where(np.asarray(trace.mask, dtype=bool), scores, np.nan)
    key_dim = context.shape[0]
    shown = min(key_dim, MAX_CONTEXT_ENTRIES)

    if fig is None:
        fig = plt.figure(figsize=bahdanau_step_size(len(src), key_dim), layout="constrained")
    axes = fig.subplots(3, 1)
    finite = scores[np.isfinite(scores)]
    lim = float(np.max(np.abs(finite))) if finite.size and np.max(np.abs(finite)) > 0 else 1.0
    heatmap(scores, None, src, ax=axes[0], cmap="RdBu_r", vmin=-lim, vmax=lim,
            title=r"1. alignment scores $e_{tj} = v_a^\top \tanh(W_a s_{t-1} + U_a h_j)$",
            xlabel="source token $x_j$")
    heatmap(weights, None, src, ax=axes[1], cmap="Blues", vmin=0.0, vmax=1.0,
            title=rf"2. attention weights $\alpha_{{tj}} = \mathrm{{softmax}}_j(e_{{tj}})$, sum = {weights.sum():.2f}",
            xlabel="source token $x_j$")
    c_lim = float(np.max(np.abs(context[:shown]))) if shown and np.max(np.abs(context[:shown])) > 0 else 1.0
    note = f" (first {shown} of {key_dim} entries)" if shown < key_dim else f" ({key_dim} entries)"
    heatmap(context[:shown], None, [str(k + 1) for k in range(shown)], ax=axes[2], cmap="RdBu_r",
            vmin=-c_lim, vmax=c_lim, fontsize=7 if shown > 12 else None,
            title=rf"3. context $c_t = \sum_j \alpha_{{tj}} h_j${note}", xlabel="entry of $c_t$")
    for ax in axes:
        ax.set_yticks([])
    head = "One decoding step" if step_label is None else f"Decoding step {step_label}"
    if out_token is not None:
        head += f": next output '{token_label(out_token)}'"
    fig.suptitle(head)
    return fig


__all__ = [
    "MAX_CONTEXT_ENTRIES",
    "METRICS",
    "bahdanau_step_size",
    "plot_alignment",
    "plot_bahdanau_step",
    "plot_by_length",
    "plot_encoder_decoder",
    "plot_history",
]
