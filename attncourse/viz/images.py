"""Figures for attention over images: where the captioner looked, and how seeds learned.

Source: Xu et al. (2015), "Show, Attend and Tell: Neural Image Caption Generation with
Visual Attention", section 5.4 and figures 2-3.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import cycle
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from attncourse.viz.heatmap import to_numpy


def as_image(image: Any) -> np.ndarray:
    """A (height, width) ndarray from a (height, width) or (1, height, width) image."""
    array = to_numpy(image)
    if array.ndim == 3 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 2:
        raise ValueError(f"image must be (height, width) or (1, height, width), got {tuple(np.shape(image))}")
    return array


def plot_attention_overlay(
    image: Any,
    weight_maps: Any,
    predicted: Sequence[Any],
    target: Sequence[Any] | None = None,
    title: str | None = None,
    ax_row: Sequence[Axes] | None = None,
    mark_argmax: bool = False,
    alpha: float = 0.7,
    cmap: str = "autumn",
) -> Figure:
    """The canvas once per output step, with that step's attention weights laid over it.

    Shapes: image (height, width) or (1, height, width); weight_maps (steps, grid_rows,
    grid_cols); predicted, target, ax_row one entry per step. Raises ValueError if a
    shape does not fit.
    """
    canvas = as_image(image)
    maps = to_numpy(weight_maps)
    if maps.ndim != 3:
        raise ValueError(f"weight_maps must be (steps, grid rows, grid columns), got {tuple(np.shape(weight_maps))} "
                         f"for image {canvas.shape}")
    steps, rows, cols = maps.shape
    if len(predicted) != steps:
        raise ValueError(f"predicted has {len(predicted)} labels, weight_maps {maps.shape} has {steps} steps")
    if target is not None and len(target) != steps:
        raise ValueError(f"target has {len(target)} labels, weight_maps {maps.shape} has {steps} steps")
    if ax_row is None:
        height, width = canvas.shape
        fig, axes = plt.subplots(1, steps, figsize=(min(2.0 + 2.2 * steps * width / height, 15.0), 2.2),
                                 layout="constrained", squeeze=False)
        axes = list(axes[0])
        if title:
            fig.suptitle(title)
    else:
        axes = list(ax_row)
        if len(axes) != steps:
            raise ValueError(f"ax_row has {len(axes)} axes, weight_maps {maps.shape} has {steps} steps")
        fig = axes[0].figure
        if title:
            axes[0].set_ylabel(title)
    height, width = canvas.shape
    extent = (-0.5, width - 0.5, height - 0.5, -0.5)  # the weights cover the canvas exactly
    cell_h, cell_w = height / rows, width / cols
    for t, ax in enumerate(axes):
        ax.imshow(canvas, cmap="gray", vmin=0.0, vmax=max(1.0, float(canvas.max())), extent=extent)
        # Opacity grows with the weight, so locations with no attention leave the canvas as it is.
        scaled = maps[t] / max(float(maps[t].max()), 1e-12)
        overlay = plt.get_cmap(cmap)(scaled)
        overlay[..., 3] = alpha * scaled
        ax.imshow(overlay, extent=extent, interpolation="nearest")
        if mark_argmax:
            r, c = np.unravel_index(int(np.argmax(maps[t])), (rows, cols))
            ax.add_patch(Rectangle((c * cell_w - 0.5, r * cell_h - 0.5), cell_w, cell_h,
                                   fill=False, edgecolor="cyan", linewidth=1.5))
        label = f"step {t + 1}: {predicted[t]}"
        wrong = target is not None and str(predicted[t]) != str(target[t])
        if wrong:
            label += f" (true {target[t]})"
        ax.set_title(label, color="tab:red" if wrong else "black", fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
    return fig


def plot_seed_curves(
    histories: Mapping[str, Sequence[Sequence[Mapping[str, float]]]],
    key: str = "valid_exact_match",
    ax: Axes | None = None,
    x: str = "epoch",
    title: str | None = None,
    ylabel: str | None = None,
) -> Figure:
    """Learning curves of several seeds per model: a thin line per seed, a thick mean.

    ``histories``: model -> one per-epoch history per seed; ``x``: ``"epoch"`` or
    ``"seconds"``. Raises ValueError if a model, seed or history is empty, or a row
    lacks ``key`` or ``x``.
    """
    if not histories:
        raise ValueError("histories is empty: give at least one model with one seed")
    if ax is None:
        fig, ax = plt.subplots(figsize=(6.0, 3.6), layout="constrained")
    else:
        fig = ax.figure
    colors = cycle(plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0", "C1", "C2"]))
    for name, runs in histories.items():
        if len(runs) == 0:
            raise ValueError(f"{name!r} has no histories")
        color = next(colors)
        xs, ys = [], []
        for seed, history in enumerate(runs):
            if len(history) == 0:
                raise ValueError(f"{name!r}: history {seed} is empty")
            for row in history:
                if key not in row or x not in row:
                    raise ValueError(f"{name!r}: history {seed} has a row without {key!r} or {x!r}; "
                                     f"its keys are {sorted(row)}")
            xs.append(np.array([row[x] for row in history], dtype=float))
            ys.append(np.array([row[key] for row in history], dtype=float))
            ax.plot(xs[-1], ys[-1], color=color, linewidth=0.9, alpha=0.4)
        common = min(len(values) for values in ys)
        mean_x = np.mean([values[:common] for values in xs], axis=0)
        mean_y = np.mean([values[:common] for values in ys], axis=0)
        ax.plot(mean_x, mean_y, color=color, linewidth=2.5, label=f"{name} (mean of {len(runs)} seeds)")
    ax.set_xlabel(x)
    ax.set_ylabel(ylabel or key)
    ax.set_title(title or f"{key} per {x}, thin lines: single seeds")
    ax.grid(True, alpha=0.3)
    ax.legend()
    return fig
