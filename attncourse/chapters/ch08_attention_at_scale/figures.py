"""Figures of the attention-at-scale chapter: the online softmax step by step, the tiles of
FlashAttention, log-log cost curves and the roofline.

References
----------
Milakov, Gimelshein (2018), algorithm 3; Dao (2023), "FlashAttention-2", algorithm 1;
Williams, Waterman, Patterson (2009), "Roofline" (the roofline picture).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from matplotlib.ticker import FixedLocator

from attncourse.functional.tiled_attention import OnlineSoftmaxTrace, TiledAttention

#: Colours of the tile grid: computed before, being computed, still to come, skipped.
TILE_COLOURS = {"done": "#9ecae1", "current": "#e6550d", "todo": "#ffffff", "skipped": "#d9d9d9"}


def plot_online_softmax(trace: OnlineSoftmaxTrace, exact: np.ndarray | None = None) -> Figure:
    """One row of panels per step of the online softmax for one query.

    Left: the scaled scores, those of the current block in colour, those of earlier blocks
    in grey, later ones not drawn (the step has not seen them), with the running maximum
    ``m`` as a line. Right: the running output ``acc / l`` (one bar per value dimension)
    against the exact output.

    Parameters
    ----------
    trace : OnlineSoftmaxTrace
        From :func:`attncourse.functional.online_softmax_trace`.
    exact : (d_v,), optional
        The exact output, drawn as black marks on the right.

    Returns
    -------
    matplotlib.figure.Figure
    """
    n_steps = len(trace.blocks)
    n_keys = trace.k.shape[0]
    fig, axes = plt.subplots(n_steps, 2, figsize=(8.5, 1.6 * n_steps + 0.4), layout="constrained",
                             squeeze=False, gridspec_kw={"width_ratios": [2, 1]})
    all_scores = np.concatenate(trace.scores)
    finite = all_scores[np.isfinite(all_scores)]
    lo, hi = (finite.min(), finite.max()) if finite.size else (-1.0, 1.0)
    out_lo = min(trace.output.min(), 0 if exact is None else np.min(exact))
    out_hi = max(trace.output.max(), 0 if exact is None else np.max(exact))
    dims = np.arange(trace.output.shape[1])
    for step in range(n_steps):
        ax, ax_out = axes[step]
        for earlier in range(step + 1):
            start, stop = trace.blocks[earlier]
            colour = "C1" if earlier == step else "0.7"
            ax.bar(np.arange(start, stop), trace.scores[earlier], color=colour,
                   label="this block" if earlier == step else None)
        ax.axhline(trace.running_max[step], color="C3", lw=1.2, ls="--", label="running max m")
        ax.set_xlim(-0.6, n_keys - 0.4)
        ax.set_ylim(min(lo, 0) - 0.2, hi + 0.4)
        ax.set_ylabel(f"step {step + 1}")
        ax.text(0.99, 0.95, f"m = {trace.running_max[step]:.3f}, l = {trace.normaliser[step]:.3f}",
                transform=ax.transAxes, ha="right", va="top", fontsize=8)
        ax_out.bar(dims, trace.output[step], color="C0", label="acc / l")
        if exact is not None:
            ax_out.scatter(dims, exact, marker="_", s=300, color="k", label="exact")
        ax_out.set_ylim(out_lo - 0.1, out_hi + 0.1)
        ax_out.set_xticks(dims)
        if step == 0:
            ax.set_title("scaled scores seen so far (key position)", fontsize=9)
            ax_out.set_title("running output (value dimension)", fontsize=9)
            ax.legend(fontsize=7, loc="lower left")
            ax_out.legend(fontsize=7, loc="lower left")
    axes[-1, 0].set_xlabel("key position j")
    axes[-1, 1].set_xlabel("dimension of v")
    return fig


def tile_states(result: TiledAttention, n_q: int, n_k: int, step: int, causal: bool) -> np.ndarray:
    """The state of every tile after ``step``: 0 to come, 1 done, 2 current, 3 skipped (causal).

    Returns
    -------
    (n_q_blocks, n_k_blocks) int
    """
    rows = -(-n_q // result.block_q)
    cols = -(-n_k // result.block_k)
    states = np.zeros((rows, cols), dtype=int)
    if causal:
        for i in range(rows):
            last_row = min((i + 1) * result.block_q, n_q) - 1
            states[i, np.arange(cols) * result.block_k > last_row] = 3
    for s in result.steps[:step]:
        states[s.q_block, s.k_block] = 1
    current = result.steps[step]
    states[current.q_block, current.k_block] = 2
    return states


def plot_tiles(result: TiledAttention, exact: np.ndarray, step: int, causal: bool = False) -> Figure:
    """FlashAttention after one tile: which tile is loaded, each row's ``m`` and ``l``, and
    how far each row's partial output still is from the exact one.

    Parameters
    ----------
    result : TiledAttention
        From :func:`attncourse.functional.tiled_attention` with ``trace=True``.
    exact : (tgt_len, d_v)
        The exact output (e.g. from ``scaled_dot_product_attention``).
    step : int
        Index into ``result.steps``.
    causal : bool
        Whether the run was causal (tiles wholly in the future are drawn as skipped).

    Returns
    -------
    matplotlib.figure.Figure
        Three panels: the grid of tiles over the (tgt_len, src_len) score matrix, the
        running max and normaliser per query row, and the error per row on a log scale.
    """
    s = result.steps[step]
    n_q = s.m.shape[0]
    n_k = result.src_len
    states = tile_states(result, n_q, n_k, step, causal)
    fig, (ax_grid, ax_ml, ax_err) = plt.subplots(1, 3, figsize=(10, 3.6),
                                                 gridspec_kw={"width_ratios": [1.1, 1, 1]})
    # Fixed margins rather than a constrained layout: the book draws dozens of these frames.
    fig.subplots_adjust(left=0.05, right=0.98, bottom=0.2, top=0.9, wspace=0.3)
    colours = list(TILE_COLOURS.values())
    order = {0: colours[2], 1: colours[0], 2: colours[1], 3: colours[3]}
    for i in range(states.shape[0]):
        for j in range(states.shape[1]):
            r0, c0 = i * result.block_q, j * result.block_k
            h, w = min(result.block_q, n_q - r0), min(result.block_k, n_k - c0)
            ax_grid.add_patch(Rectangle((c0, r0), w, h, facecolor=order[states[i, j]], edgecolor="0.3", lw=1))
    ax_grid.set_xlim(0, n_k)
    ax_grid.set_ylim(n_q, 0)
    ax_grid.set_aspect("equal")
    ax_grid.set_xlabel("key j")
    ax_grid.set_ylabel("query i")
    ax_grid.set_title(f"tile (Q block {s.q_block}, K block {s.k_block})", fontsize=9)
    handles = [Rectangle((0, 0), 1, 1, facecolor=c, edgecolor="0.3") for c in TILE_COLOURS.values()]
    ax_grid.legend(handles, list(TILE_COLOURS), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2),
                   ncol=4, frameon=False)
    rows = np.arange(n_q)
    m = np.where(np.isfinite(s.m), s.m, np.nan)
    ax_ml.barh(rows - 0.2, s.l, height=0.4, color="C0", label="normaliser l")
    ax_ml.barh(rows + 0.2, m, height=0.4, color="C3", label="running max m")
    ax_ml.set_ylim(n_q - 0.5, -0.5)
    ax_ml.set_xlim(min(0.0, np.nanmin(m) if np.isfinite(m).any() else 0.0) - 0.1,
                   max(float(np.nanmax(result.steps[-1].l)), 1.0) * 1.05)
    ax_ml.axhspan(s.rows[0] - 0.5, s.rows[1] - 0.5, color=TILE_COLOURS["current"], alpha=0.12)
    ax_ml.set_title("per query row", fontsize=9)
    ax_ml.legend(fontsize=7, loc="lower right")
    err = np.abs(s.output - exact).max(axis=1)
    ax_err.barh(rows, np.maximum(err, 1e-17), color="C2")
    ax_err.set_xscale("log")
    ax_err.set_xlim(1e-17, 10)
    ax_err.set_xticks([1e-16, 1e-12, 1e-8, 1e-4, 1.0], ["1e-16", "1e-12", "1e-8", "1e-4", "1"])
    ax_err.minorticks_off()
    ax_err.set_ylim(n_q - 0.5, -0.5)
    ax_err.axvline(1e-15, color="0.5", ls=":", lw=1)
    ax_err.set_title("|partial output - exact|, max over d_v", fontsize=9)
    return fig


def plot_loglog(lengths: Sequence[int], series: Mapping[str, Sequence[float]], ylabel: str,
                title: str = "", ax: Axes | None = None) -> Axes:
    """Measured costs against n on log-log axes, each series with its fitted slope in the legend.

    Parameters
    ----------
    lengths : (n_points,)
        Sequence lengths n.
    series : mapping of name to (n_points,)
        Positive costs (seconds, bytes...).
    ylabel, title : str

    Returns
    -------
    matplotlib.axes.Axes
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.6), layout="constrained")
    # Lengths ticked by an earlier call on the same axes (loglog resets the locator).
    locator = ax.xaxis.get_major_locator()
    earlier = set(locator.locs) if isinstance(locator, FixedLocator) else set()
    x = np.asarray(lengths, dtype=float)
    for name, values in series.items():
        y = np.asarray(values, dtype=float)
        slope = np.polyfit(np.log(x), np.log(y), 1)[0]
        ax.loglog(x, y, "o-", label=f"{name} (slope {slope:.2f})")
    # Tick the measured lengths themselves, written out (256, not 2.56 x 10^2).
    ticks = sorted(earlier | set(x.tolist()))
    ax.set_xticks(ticks, [f"{t:,.0f}" for t in ticks])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set_xlabel("sequence length n")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return ax


def plot_roofline(peak_flops: float, bandwidth: float, points: Mapping[str, tuple[float, float]],
                  ax: Axes | None = None) -> Axes:
    """The roofline: attainable FLOP/s = min(peak, bandwidth x arithmetic intensity).

    Parameters
    ----------
    peak_flops : float
        Peak FLOP/s of the device.
    bandwidth : float
        Memory bandwidth, bytes/s.
    points : mapping of name to (intensity FLOP/byte, FLOPs)
        Kernels placed on the roof at their arithmetic intensity.

    Returns
    -------
    matplotlib.axes.Axes
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.8), layout="constrained")
    ridge = peak_flops / bandwidth
    x = np.logspace(-1, 4, 200)
    ax.loglog(x, np.minimum(peak_flops, bandwidth * x), color="k", lw=1.5)
    ax.axvline(ridge, color="0.5", ls=":", lw=1)
    ax.text(ridge * 1.1, peak_flops * 0.02, f"ridge: {ridge:.0f} FLOP/byte", fontsize=8, rotation=90)
    for k, (name, (intensity, _)) in enumerate(points.items()):
        attainable = min(peak_flops, bandwidth * intensity)
        ax.scatter([intensity], [attainable], color=f"C{k}", zorder=3, label=f"{name}: {intensity:.0f} FLOP/byte")
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
    ax.set_ylabel("attainable FLOP/s")
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(True, which="both", alpha=0.3)
    return ax


__all__ = ["TILE_COLOURS", "plot_loglog", "plot_online_softmax", "plot_roofline", "plot_tiles", "tile_states"]
