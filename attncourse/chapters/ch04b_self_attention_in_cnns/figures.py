"""Figures for self-attention inside a CNN: where one position of the feature map looks.

In :class:`~attncourse.nn.conv_attention.AttentionCNN` the attention block
works on the feature map after two 2x2 poolings, so each grid position (row,
col) stands for a ``grid_stride x grid_stride`` block of pixels (4 x 4 here).
Its row of the attention weights, alpha_{i, j} for the query position i and
every key position j of the same map, is an image of the grid's size.

* :func:`plot_pixel_attention`: the canvas with the query position framed and
  its attention weights stretched over the image (nearest neighbour, so every
  grid cell shows as the block of pixels it stands for).
* :func:`plot_pixel_attention_row`: the same for several query positions side
  by side, e.g. one on each digit and one on the blank background.

Unlike the attention of an encoder-decoder, where the queries come from one
sequence (the decoder) and the keys from another (the encoder), here query,
keys and values are all positions of the same feature map.

References
----------
Wang, Girshick, Gupta, He (2018), "Non-local Neural Networks", CVPR, section 4
and figure 3 (the positions one position attends to).
Zhang, Goodfellow, Metaxas, Odena (2019), "Self-Attention Generative Adversarial
Networks", ICML, figure 5 (attention maps of chosen query locations).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from attncourse.viz.heatmap import to_numpy
from attncourse.viz.images import as_image

_QUERY_COLOR = "cyan"


def _validate_grid(canvas: np.ndarray, weights: np.ndarray, grid_stride: int, shown_shape: tuple[int, ...]) -> None:
    if int(grid_stride) != grid_stride or grid_stride < 1:
        raise ValueError(f"grid_stride must be a positive int, got {grid_stride!r}")
    height, width = canvas.shape
    expected = (height // grid_stride, width // grid_stride)
    if weights.ndim != 2 or weights.shape != expected:
        raise ValueError(
            f"attention_map {shown_shape} does not fit image {canvas.shape} with grid_stride={grid_stride}: "
            f"expected (grid rows, grid columns) = {expected}"
        )


def _validate_query(query_position: Sequence[int], grid_shape: tuple[int, int]) -> tuple[int, int]:
    if len(query_position) != 2:
        raise ValueError(f"query_position must be (row, col), got {query_position!r}")
    row, col = int(query_position[0]), int(query_position[1])
    if not (0 <= row < grid_shape[0] and 0 <= col < grid_shape[1]):
        raise ValueError(f"query_position {tuple(query_position)} is outside the (grid rows, grid columns) = "
                         f"{grid_shape} map")
    return row, col


def plot_pixel_attention(
    image: Any,
    attention_map: Any,
    query_position: Sequence[int],
    grid_stride: int = 4,
    ax: Axes | None = None,
    alpha: float = 0.6,
    title: str | None = None,
) -> Figure:
    """The canvas, the query position framed, and its attention weights laid over the image.

    Parameters
    ----------
    image : (height, width) or (1, height, width) array or tensor
        One canvas.
    attention_map : (height // grid_stride, width // grid_stride) array or tensor
        alpha_{i, j} for the query position i and every key position j, e.g.
        ``model.attention_map(images, query_position)[b]`` of an
        :class:`~attncourse.nn.conv_attention.AttentionCNN`; sums to 1.
    query_position : (row, col)
        The query's grid position, 0-based; drawn as a frame around its
        ``grid_stride x grid_stride`` block of pixels and a marker at the
        block's centre, ``(col * grid_stride + (grid_stride - 1) / 2,
        row * grid_stride + (grid_stride - 1) / 2)`` in pixel (x, y).
    grid_stride : int
        Pixels per grid position along each side (4: two 2x2 poolings).
    ax : matplotlib Axes, optional
        Where to draw; a new figure with constrained layout if omitted.
    alpha : float
        Opacity of the weights over the canvas.
    title : str, optional
        Default: the query position and the largest weight.

    Returns
    -------
    matplotlib.figure.Figure
        ``ax.images`` holds the canvas then the weights; ``ax.lines[0]`` is the query marker.

    Raises
    ------
    ValueError
        If ``image`` is not one 2-D canvas, ``attention_map`` is not
        (height // grid_stride, width // grid_stride) (the message names both
        shapes), or ``query_position`` is outside the grid.

    References
    ----------
    Wang et al. (2018), figure 3; Zhang et al. (2019), figure 5.
    """
    canvas = as_image(image)
    weights = to_numpy(attention_map)
    _validate_grid(canvas, weights, grid_stride, tuple(np.shape(attention_map)))
    row, col = _validate_query(query_position, weights.shape)
    if ax is None:
        height, width = canvas.shape
        fig, ax = plt.subplots(figsize=(min(1.5 + 2.4 * width / height, 12.0), 2.6), layout="constrained")
    else:
        fig = ax.figure
    rows, cols = weights.shape
    # The grid covers rows * stride pixels; trailing pixels a pooling dropped stay uncovered.
    extent = (-0.5, cols * grid_stride - 0.5, rows * grid_stride - 0.5, -0.5)
    ax.imshow(canvas, cmap="gray", vmin=0.0, vmax=max(1.0, float(canvas.max())),
              extent=(-0.5, canvas.shape[1] - 0.5, canvas.shape[0] - 0.5, -0.5))
    ax.imshow(weights, cmap="magma", alpha=alpha, vmin=0.0, vmax=max(float(weights.max()), 1e-12),
              extent=extent, interpolation="nearest")
    ax.add_patch(Rectangle((col * grid_stride - 0.5, row * grid_stride - 0.5), grid_stride, grid_stride,
                           fill=False, edgecolor=_QUERY_COLOR, linewidth=1.8))
    centre = (grid_stride - 1) / 2
    ax.plot([col * grid_stride + centre], [row * grid_stride + centre], marker="x", color=_QUERY_COLOR,
            markersize=7, markeredgewidth=2, linestyle="none")
    ax.set_xlim(-0.5, canvas.shape[1] - 0.5)
    ax.set_ylim(canvas.shape[0] - 0.5, -0.5)
    ax.set_title(title if title is not None else f"query ({row}, {col}): max weight {weights.max():.2f}", fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
    return fig


def plot_pixel_attention_row(
    image: Any,
    attention_maps: Any,
    query_positions: Sequence[Sequence[int]],
    grid_stride: int = 4,
    titles: Sequence[str] | None = None,
    suptitle: str | None = None,
) -> Figure:
    """:func:`plot_pixel_attention` for several query positions of one canvas, side by side.

    Parameters
    ----------
    image : (height, width) or (1, height, width) array or tensor
    attention_maps : (queries, height // grid_stride, width // grid_stride) array or tensor
        One map per query position, in the same order.
    query_positions : sequence of (row, col)
    grid_stride : int
    titles : sequence of str, optional
        One per panel; default: each query position and its largest weight.
    suptitle : str, optional

    Returns
    -------
    matplotlib.figure.Figure
        One axes per query position.

    Raises
    ------
    ValueError
        If the number of maps, positions and titles differ, or a map does not
        fit the image (the message names both shapes).
    """
    canvas = as_image(image)
    maps = to_numpy(attention_maps)
    if maps.ndim != 3:
        raise ValueError(f"attention_maps must be (queries, grid rows, grid columns), got "
                         f"{tuple(np.shape(attention_maps))} for image {canvas.shape}")
    if len(query_positions) != maps.shape[0]:
        raise ValueError(f"{len(query_positions)} query positions for attention_maps {maps.shape} "
                         f"({maps.shape[0]} maps)")
    if titles is not None and len(titles) != maps.shape[0]:
        raise ValueError(f"{len(titles)} titles for attention_maps {maps.shape} ({maps.shape[0]} maps)")
    count = maps.shape[0]
    height, width = canvas.shape
    fig, axes = plt.subplots(1, count, figsize=(min(0.5 + 2.4 * count * width / height, 16.0), 2.4),
                             layout="constrained", squeeze=False)
    for index, ax in enumerate(axes[0]):
        plot_pixel_attention(canvas, maps[index], query_positions[index], grid_stride=grid_stride, ax=ax,
                             title=None if titles is None else titles[index])
    if suptitle:
        fig.suptitle(suptitle)
    return fig
