"""Figures for the chapters on multi-head attention, positional encoding and the Transformer.

- :func:`plot_positional_encoding`: the table PE(pos, i) as an image,
  positions down, dimensions across (Vaswani et al. 2017, section 3.5).
- :func:`plot_positional_detail`: one position and one dimension of that
  table picked out: the table with the row and column framed, the column as a
  sinusoid over positions, and the row as a vector. The
  :class:`~attncourse.chapters.ch05_multihead_positional.explorer.PositionalEncodingExplorer` draws it.
- :func:`plot_head_maps`: one attention map per head, side by side, with token labels.
- :func:`plot_attention_maps`: one layer of a
  :meth:`Transformer.attention_maps <attncourse.nn.transformer.Transformer.attention_maps>`
  result (encoder self-attention, masked decoder self-attention or cross-attention)
  for one example, with the right tokens on each axis. The
  :class:`~attncourse.widgets.explorer.AttentionExplorer` draws it.

References
----------
Vaswani et al. (2017), "Attention Is All You Need", sections 3.2.2, 3.2.3 and 3.5.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from attncourse.functional.positional import positional_frequencies
from attncourse.viz.heatmap import heatmap, to_numpy

#: The kinds of attention in a Transformer, as keys of ``Transformer.attention_maps``.
ATTENTION_KINDS: tuple[str, ...] = ("encoder_self", "decoder_self", "cross")

#: For each kind: (what the rows are, what the columns are).
_AXES: dict[str, tuple[str, str]] = {
    "encoder_self": ("query (source)", "key (source)"),
    "decoder_self": ("query (target input)", "key (target input)"),
    "cross": ("query (target input)", "key (source)"),
}
_TITLES = {
    "encoder_self": "encoder self-attention",
    "decoder_self": "masked decoder self-attention",
    "cross": "cross-attention (decoder to encoder)",
}
_HIGHLIGHT = "#d62728"
#: Most heads per row in :func:`plot_head_maps`.
MAX_COLUMNS = 4


def _show(token: Any) -> str:
    text = str(token)
    return text if text.strip() else "␣"


def plot_positional_encoding(
    pe: Any,
    ax: Axes | None = None,
    *,
    title: str | None = None,
    colorbar: bool = True,
) -> Axes:
    """Draw a positional-encoding table, positions down and dimensions across.

    With the sinusoids of Vaswani et al. (2017) the left columns (fast
    frequencies) flicker from row to row and the right ones (slow frequencies)
    barely change: each position gets its own pattern of stripes.

    Parameters
    ----------
    pe : array-like, (max_len, d_model)
        PE(pos, i) in row pos, column i, e.g.
        :func:`attncourse.functional.positional.sinusoidal_encoding` or a learned
        table. Torch tensors are accepted.
    ax : matplotlib Axes, optional
        Where to draw; a new figure is made if omitted.
    title : str, optional
        Defaults to "Positional encodings PE(pos, i)".
    colorbar : bool
        Add a colour bar.

    Returns
    -------
    matplotlib.axes.Axes
        Its only image is the table, drawn with a colour scale symmetric about 0.

    Raises
    ------
    ValueError
        If ``pe`` is not 2-D.

    References
    ----------
    Vaswani et al. (2017), section 3.5.
    """
    values = to_numpy(pe)
    if values.ndim != 2:
        raise ValueError(f"pe must be a (max_len, d_model) table, got shape {values.shape}")
    max_len, d_model = values.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(7.0, 4.5), layout="constrained")
    limit = max(float(np.abs(values).max()), 1e-12)
    image = ax.imshow(values, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest")
    ax.set_xlabel("dimension i")
    ax.set_ylabel("position pos")
    ax.set_title("Positional encodings PE(pos, i)" if title is None else title)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, shrink=0.85, label="PE(pos, i)")
    return ax


def _validate_index(name: str, value: int, size: int, what: str) -> int:
    if not 0 <= int(value) < size:
        raise ValueError(f"{name} must lie in 0..{size - 1} (the table has {size} {what}), got {value}")
    return int(value)


def dimension_wavelength(dimension: int, d_model: int, base: float = 10000.0) -> float:
    """Wavelength in positions of column ``dimension``: 2 pi * base^(2i / d_model), i = dimension // 2.

    Columns 2i (sine) and 2i + 1 (cosine) share the frequency omega_i of
    :func:`attncourse.functional.positional.positional_frequencies`.

    Raises
    ------
    ValueError
        If ``dimension`` is outside 0..d_model-1 or ``d_model`` is not even.
    """
    omega = positional_frequencies(d_model, base)
    _validate_index("dimension", dimension, int(d_model), "dimensions")
    return float(2 * math.pi / omega[int(dimension) // 2])


def plot_positional_detail(
    pe: Any,
    position: int,
    dimension: int,
    *,
    base: float = 10000.0,
    fig: Figure | None = None,
) -> Figure:
    """One position and one dimension of a sinusoidal table: where they are, and what they hold.

    Three panels: the table (:func:`plot_positional_encoding`) with row
    ``position`` and column ``dimension`` framed; column ``dimension`` as a
    function of the position, the sinusoid drawn through its values at the
    integer positions and its wavelength in the title; and row ``position``,
    the vector PE(position) added to the token at that position, as bars.

    Parameters
    ----------
    pe : array-like, (max_len, d_model)
        A sinusoidal table (:func:`~attncourse.functional.positional.sinusoidal_encoding`
        with the same ``base``); the smooth curve of the middle panel assumes it.
    position : int
        Row, 0..max_len-1.
    dimension : int
        Column, 0..d_model-1.
    base : float
        The table's base (10000 in the paper).
    fig : Figure, optional
        Draw into this figure (cleared first); a new one is made if omitted.

    Returns
    -------
    matplotlib.figure.Figure
        ``fig.axes[:3]`` are the table, the column and the row (a colour bar follows).

    Raises
    ------
    ValueError
        If ``pe`` is not 2-D with an even width, or an index is out of range.

    References
    ----------
    Vaswani et al. (2017), section 3.5.
    """
    values = to_numpy(pe)
    if values.ndim != 2 or values.shape[1] % 2:
        raise ValueError(f"pe must be a (max_len, d_model) table with an even d_model, got shape {values.shape}")
    max_len, d_model = values.shape
    pos = _validate_index("position", position, max_len, "positions")
    dim = _validate_index("dimension", dimension, d_model, "dimensions")
    pair = dim // 2
    omega = positional_frequencies(d_model, base)[pair]
    wavelength = 2 * math.pi / omega
    kind = "sin" if dim % 2 == 0 else "cos"

    if fig is None:
        fig = plt.figure(figsize=(14.0, 4.2), layout="constrained")
    else:
        fig.clear()
    ax_table, ax_column, ax_row = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1.15, 1.0, 1.0]})

    plot_positional_encoding(values, ax=ax_table, title="the table PE(pos, i)")
    for rect in (Rectangle((-0.5, pos - 0.5), d_model, 1.0), Rectangle((dim - 0.5, -0.5), 1.0, max_len)):
        rect.set(fill=False, edgecolor="black", linewidth=1.8, clip_on=False, in_layout=False)
        ax_table.add_patch(rect)

    positions = np.arange(max_len)
    fine = np.linspace(0, max_len - 1, 20 * max_len)
    curve = np.sin(fine * omega) if kind == "sin" else np.cos(fine * omega)
    ax_column.plot(fine, curve, color="#1f77b4", linewidth=1.2)
    ax_column.plot(positions, values[:, dim], "o", color="#1f77b4", markersize=3)
    ax_column.plot([pos], [values[pos, dim]], "o", color=_HIGHLIGHT, markersize=8)
    ax_column.set_ylim(-1.15, 1.15)
    ax_column.set_xlabel("position pos")
    ax_column.set_ylabel(f"PE(pos, {dim})")
    ax_column.set_title(f"dimension {dim} = {kind}(pos $\\omega_{{{pair}}}$), wavelength {wavelength:,.1f}")
    ax_column.grid(True, alpha=0.4)

    ax_row.bar(np.arange(d_model), values[pos], color="#9ecae1", width=0.9)
    ax_row.bar([dim], [values[pos, dim]], color=_HIGHLIGHT, width=0.9)
    ax_row.set_ylim(-1.15, 1.15)
    ax_row.set_xlabel("dimension i")
    ax_row.set_ylabel(f"PE({pos}, i)")
    ax_row.set_title(f"the vector PE({pos}) added at position {pos}")
    ax_row.grid(True, axis="y", alpha=0.4)
    fig.suptitle(f"Sinusoidal positional encoding: position {pos}, dimension {dim} "
                 f"(d_model = {d_model})")
    return fig


def _validate_tokens(tokens: Sequence[str], size: int, what: str, shape: tuple[int, ...]) -> list[str]:
    tokens = [_show(t) for t in tokens]
    if len(tokens) != size:
        raise ValueError(
            f"{len(tokens)} {what} tokens were given for maps of shape {shape}; pass one token per {what} "
            f"position ({size})"
        )
    return tokens


def plot_head_maps(
    maps: Any,
    q_tokens: Sequence[str],
    k_tokens: Sequence[str],
    title: str | None = None,
    *,
    xlabel: str = "key",
    ylabel: str = "query",
    annotate: bool | None = None,
    heads: Sequence[int] | None = None,
) -> Figure:
    """One attention heatmap per head, in a grid, with token labels.

    Parameters
    ----------
    maps : array-like, (num_heads, q_len, k_len)
        Each head's attention weights, rows summing to 1 (e.g. one example of
        ``MultiHeadAttention(..., need_weights=True)``). Torch tensors are accepted.
    q_tokens : sequence of str, length q_len
        Row labels.
    k_tokens : sequence of str, length k_len
        Column labels.
    title : str, optional
        Figure title.
    xlabel, ylabel : str
        Axis labels of every panel.
    annotate : bool, optional
        Write the weights in the cells; by default only when the maps are at
        most 6 x 6.
    heads : sequence of int, optional
        Numbers to put in the panel titles ("head 1", ...), 1-based; default
        1..num_heads.

    Returns
    -------
    matplotlib.figure.Figure
        One axes per head (row-major, at most :data:`MAX_COLUMNS` per row), then
        one colour bar; the colour scale is [0, 1] in every panel.

    Raises
    ------
    ValueError
        If ``maps`` is not 3-D or the token counts do not fit its shape.

    References
    ----------
    Vaswani et al. (2017), section 3.2.2.
    """
    values = to_numpy(maps)
    if values.ndim != 3:
        raise ValueError(
            f"maps must be (num_heads, q_len, k_len), got shape {values.shape}; pick one example and one "
            "layer first"
        )
    num_heads, q_len, k_len = values.shape
    rows_labels = _validate_tokens(q_tokens, q_len, "query", values.shape)
    cols_labels = _validate_tokens(k_tokens, k_len, "key", values.shape)
    numbers = list(range(1, num_heads + 1)) if heads is None else [int(h) for h in heads]
    if len(numbers) != num_heads:
        raise ValueError(f"{len(numbers)} head numbers were given for {num_heads} heads")
    if annotate is None:
        annotate = max(q_len, k_len) <= 6
    ncols = min(num_heads, MAX_COLUMNS)
    nrows = math.ceil(num_heads / ncols)
    cell = 0.42 if annotate else 0.3
    panel_w = max(2.6, 1.0 + cell * k_len)
    panel_h = max(2.4, 1.0 + cell * q_len)
    fig, axes = plt.subplots(nrows, ncols, figsize=(panel_w * ncols + 1.0, panel_h * nrows + 0.6),
                             layout="constrained", squeeze=False)
    for index, ax in enumerate(axes.flat):
        if index >= num_heads:
            ax.set_visible(False)
            continue
        heatmap(values[index], rows_labels, cols_labels, ax=ax, annotate=annotate, cmap="Blues", vmin=0.0,
                vmax=1.0, title=f"head {numbers[index]}", xlabel=xlabel,
                ylabel=ylabel if index % ncols == 0 else None, fontsize=7.0)
    fig.colorbar(axes.flat[0].images[0], ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
    if title is not None:
        fig.suptitle(title)
    return fig


def plot_attention_maps(
    maps: Mapping[str, Sequence[Any]],
    kind: str,
    layer: int,
    example_index: int,
    src_tokens: Sequence[str],
    tgt_tokens: Sequence[str],
    *,
    head: int | None = None,
    title: str | None = None,
    annotate: bool | None = None,
) -> Figure:
    """The attention maps of one layer of a Transformer for one example, with the right tokens on each axis.

    ``kind`` decides the labels: encoder self-attention has source tokens on
    both axes, masked decoder self-attention target inputs on both, and
    cross-attention target inputs as queries (rows) and source tokens as keys
    (columns). Maps of a padded batch are cut to the tokens given, so padding
    does not show.

    Parameters
    ----------
    maps : dict
        :meth:`attncourse.nn.transformer.Transformer.attention_maps` output:
        ``"encoder_self"`` -> list over layers of (batch, num_heads, src_len, src_len),
        ``"decoder_self"`` -> list of (batch, num_heads, tgt_len, tgt_len),
        ``"cross"`` -> list of (batch, num_heads, tgt_len, src_len).
    kind : {"encoder_self", "decoder_self", "cross"}
    layer : int
        0-based index into ``maps[kind]`` (titles count layers from 1).
    example_index : int
        Row of the batch.
    src_tokens : sequence of str
        The source as the encoder read it, e.g. x_1..x_S ``<eos>``.
    tgt_tokens : sequence of str
        The decoder's inputs, e.g. ``<bos>`` y_1..y_T: row t of a decoder map
        is the query that predicts the next token.
    head : int, optional
        0-based head to draw alone (a single larger panel, weights written in
        the cells when they fit); ``None`` draws every head (:func:`plot_head_maps`).
    title : str, optional
        Figure title; by default names the kind, layer and head.
    annotate : bool, optional
        Write the weights in the cells (default: when they fit).

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ValueError
        If ``kind`` is unknown, ``layer``, ``example_index`` or ``head`` is out of
        range, or there are more tokens than positions in the maps.

    References
    ----------
    Vaswani et al. (2017), section 3.2.3 (the three uses of attention).
    """
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"kind must be one of {ATTENTION_KINDS}, got {kind!r}")
    if kind not in maps:
        raise ValueError(f"maps has no {kind!r} entry; pass the dict returned by Transformer.attention_maps")
    layers = maps[kind]
    if not 0 <= int(layer) < len(layers):
        raise ValueError(f"layer must lie in 0..{len(layers) - 1} ({len(layers)} layers of {kind}), got {layer}")
    values = to_numpy(layers[int(layer)])
    if values.ndim != 4:
        raise ValueError(f"maps[{kind!r}][{layer}] must be (batch, num_heads, q_len, k_len), got {values.shape}")
    batch, num_heads, q_len, k_len = values.shape
    if not 0 <= int(example_index) < batch:
        raise ValueError(f"example_index must lie in 0..{batch - 1}, got {example_index}")
    q_tokens = list(src_tokens) if kind == "encoder_self" else list(tgt_tokens)
    k_tokens = list(tgt_tokens) if kind == "decoder_self" else list(src_tokens)
    if len(q_tokens) > q_len or len(k_tokens) > k_len:
        raise ValueError(
            f"{len(q_tokens)} query tokens and {len(k_tokens)} key tokens do not fit maps of {q_len} x {k_len} "
            f"positions ({kind}, layer {layer})"
        )
    example = values[int(example_index), :, : len(q_tokens), : len(k_tokens)]
    ylabel, xlabel = _AXES[kind]
    where = f"{_TITLES[kind]}, layer {int(layer) + 1} of {len(layers)}"
    if head is None:
        return plot_head_maps(example, q_tokens, k_tokens, title=where if title is None else title,
                              xlabel=xlabel, ylabel=ylabel, annotate=annotate)
    if not 0 <= int(head) < num_heads:
        raise ValueError(f"head must lie in 0..{num_heads - 1} or be None (all heads), got {head}")
    if annotate is None:
        annotate = max(len(q_tokens), len(k_tokens)) <= 12
    n_rows, n_cols = len(q_tokens), len(k_tokens)
    fig, ax = plt.subplots(figsize=(max(4.5, 1.8 + 0.55 * n_cols), max(3.2, 1.4 + 0.45 * n_rows)),
                           layout="constrained")
    heatmap(example[int(head)], _validate_tokens(q_tokens, n_rows, "query", example.shape),
            _validate_tokens(k_tokens, n_cols, "key", example.shape), ax=ax, annotate=annotate, cmap="Blues",
            vmin=0.0, vmax=1.0, xlabel=xlabel, ylabel=ylabel, colorbar=True,
            title=f"{where}, head {int(head) + 1} of {num_heads}" if title is None else title)
    return fig
