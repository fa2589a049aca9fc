"""Line plots of several named series against one x axis."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import cycle
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes

from attncourse.viz.heatmap import to_numpy

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
# Past this many points, markers on every point hide the line; thin them out.
_MAX_MARKERS = 20


def plot_curves(
    x: Any,
    series: Mapping[str, Any],
    *,
    ax: Axes | None = None,
    title: str,
    xlabel: str,
    ylabel: str,
    logx: bool = False,
    logy: bool = False,
    markers: bool = True,
) -> Axes:
    """One line per named series against a shared x axis, with legend and grid.

    Shapes: x (n_points,); series mapping label -> (n_points,), drawn in order. Raises
    ValueError if ``series`` is empty, ``x`` is not 1-D, a series' length differs from
    ``len(x)``, or a log axis gets values that are not positive.
    """
    if not series:
        raise ValueError("series is empty: give at least one {label: y_values} entry")
    xs = to_numpy(x)
    if xs.ndim != 1:
        raise ValueError(f"x must be 1-D (n_points,), got shape {xs.shape}")
    ys = {}
    for label, values in series.items():
        y = to_numpy(values)
        if y.shape != xs.shape:
            raise ValueError(
                f"series {label!r} has shape {y.shape} but x has {len(xs)} points; "
                f"give one y value per x value"
            )
        ys[label] = y
    if logx and np.any(xs <= 0):
        raise ValueError(f"logx=True needs positive x values, got a minimum of {xs.min()}")
    if logy:
        for label, y in ys.items():
            if np.any(y <= 0):
                raise ValueError(f"logy=True needs positive y values, series {label!r} has a minimum of {y.min()}")

    if ax is None:
        _, ax = plt.subplots(figsize=(6.0, 4.0), layout="constrained")
    markevery = max(1, len(xs) // _MAX_MARKERS)
    for (label, y), marker in zip(ys.items(), cycle(_MARKERS)):
        ax.plot(xs, y, label=label, marker=marker if markers else None, markevery=markevery, markersize=5)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.4)
    if logx or logy:
        ax.grid(True, which="minor", alpha=0.15)
    ax.legend()
    return ax
