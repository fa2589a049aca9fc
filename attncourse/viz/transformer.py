"""Figures for multi-head attention, positional encoding and the Transformer.

Source: Vaswani et al. (2017), "Attention Is All You Need", sections 3.2 and 3.5.
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
    """A positional-encoding table pe (max_len, d_model), positions down, dimensions across.

    Raises ValueError if ``pe`` is not 2-D. Source: Vaswani et al. (2017), section 3.5.
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
    """Wavelength in positions of column ``dimension``: 2 pi base^(2i / d_model), i = dim // 2.

    Raises ValueError if ``dimension`` is outside 0 .. d_model - 1 or ``d_model`` is odd.
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
    """One position and one dimension of a sinusoidal table pe (max_len, d_model).

    Raises ValueError if ``pe`` is not 2-D with an even width, or an index is out of
    range. Source: Vaswani et al. (2017), section 3.5.
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
    """One attention heatmap per head, in a grid: maps (num_heads, q_len, k_len).

    Raises ValueError if ``maps`` is not 3-D or the tokens do not fit its shape.
    Source: Vaswani et al. (2017), section 3.2.2.
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
    """One layer's attention maps for one example, with the right tokens on each axis.

    Raises ValueError if ``kind`` is unknown, an index is out of range, or there are more
    tokens than positions. Source: Vaswani et al. (2017), section 3.2.3.
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
