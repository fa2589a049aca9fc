"""A labelled heatmap: the one picture of a matrix that every chapter reuses."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes

# Relative luminance weights of the sRGB primaries (ITU-R BT.709); a cell darker
# than the threshold gets white text, a lighter one black text.
_LUMA = np.array([0.2126, 0.7152, 0.0722])
_DARK_BELOW = 0.45


def to_numpy(array: Any) -> np.ndarray:
    """A float ndarray from an array-like (NumPy array, list, CPU or GPU torch tensor)."""
    if hasattr(array, "detach"):
        array = array.detach().cpu().numpy()
    return np.asarray(array, dtype=float)


def _validate_labels(labels: Sequence[str] | None, size: int, what: str, shape: tuple[int, ...]) -> list[str] | None:
    if labels is None:
        return None
    labels = [str(label) for label in labels]
    if len(labels) != size:
        raise ValueError(
            f"{len(labels)} {what} labels were given for a matrix with {size} {what}s "
            f"(shape {shape}); pass exactly one label per {what}"
        )
    return labels


def _default_fontsize(n_rows: int, n_cols: int) -> float:
    largest = max(n_rows, n_cols)
    if largest <= 6:
        return 9.0
    if largest <= 10:
        return 8.0
    return 7.0


def heatmap(
    matrix: Any,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    xlabel: str | None = None,
    ylabel: str | None = None,
    annotate: bool = True,
    fmt: str = ".2f",
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    colorbar: bool = False,
    fontsize: float | None = None,
) -> Axes:
    """A matrix as coloured cells, row r drawn r-th from the top, with labels and values.

    Shapes: matrix (n_rows, n_cols), e.g. weights (tgt_len, src_len), or (n_cols,) for one
    row; row_labels (n_rows,); col_labels (n_cols,). ``fontsize`` in points. Returns the
    Axes; ``ax.texts`` holds the cell texts in row-major order. Raises ValueError if
    ``matrix`` is not 1-D or 2-D or the labels do not fit its shape.
    """
    values = to_numpy(matrix)
    if values.ndim == 1:
        values = values[None, :]
    if values.ndim != 2:
        raise ValueError(
            f"heatmap draws a 1-D or 2-D array, got an array of shape {values.shape}; "
            "select a single head or batch element first"
        )
    n_rows, n_cols = values.shape
    row_labels = _validate_labels(row_labels, n_rows, "row", values.shape)
    col_labels = _validate_labels(col_labels, n_cols, "column", values.shape)

    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 0.6 * n_cols, 0.8 + 0.5 * n_rows), layout="constrained")

    image = ax.imshow(values, cmap=cmap, vmin=vmin, vmax=vmax, interpolation="nearest")

    ax.set_xticks(np.arange(n_cols), labels=col_labels if col_labels is not None else np.arange(n_cols))
    ax.set_yticks(np.arange(n_rows), labels=row_labels if row_labels is not None else np.arange(n_rows))
    # Long token labels under narrow columns would overlap, so tilt them.
    if col_labels is not None and n_cols > 3 and max(len(label) for label in col_labels) > 3:
        plt.setp(ax.get_xticklabels(), rotation=45, ha="right", rotation_mode="anchor")
    ax.tick_params(length=0)
    ax.spines[:].set_visible(False)
    ax.grid(False)
    # Thin white lines between cells make single cells easy to pick out.
    ax.vlines(np.arange(1, n_cols) - 0.5, -0.5, n_rows - 0.5, colors="white", linewidth=1.0, in_layout=False)
    ax.hlines(np.arange(1, n_rows) - 0.5, -0.5, n_cols - 0.5, colors="white", linewidth=1.0, in_layout=False)

    if annotate:
        size = _default_fontsize(n_rows, n_cols) if fontsize is None else fontsize
        luma = np.asarray(image.cmap(image.norm(values)))[..., :3] @ _LUMA
        for r in range(n_rows):
            for c in range(n_cols):
                value = values[r, c]
                if not np.isfinite(value):
                    continue
                colour = "white" if luma[r, c] < _DARK_BELOW else "black"
                # Cell texts lie inside the axes, so the layout engine need not measure them.
                ax.text(c, r, format(value, fmt), ha="center", va="center", color=colour, fontsize=size,
                        in_layout=False)

    if title is not None:
        ax.set_title(title)
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, shrink=0.8)
    return ax
