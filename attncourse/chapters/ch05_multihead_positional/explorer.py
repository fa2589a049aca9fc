"""An explorer of the sinusoidal positional encoding: pick a position and a dimension.

:class:`PositionalEncodingExplorer` shows the table PE(pos, i) of Vaswani et al.
(2017, section 3.5) with the chosen row and column framed, the chosen
dimension as a sinusoid over the positions (its wavelength in the caption),
and the chosen position's vector, the one added to the token embedding there.
The figure is :func:`attncourse.viz.transformer.plot_positional_detail`, the
same one a chapter shows next to the widget.

References
----------
Vaswani et al. (2017), "Attention Is All You Need", section 3.5.
"""

from __future__ import annotations

import math

import ipywidgets as widgets
import numpy as np

from attncourse.functional.positional import positional_frequencies, sinusoidal_encoding
from attncourse.viz.transformer import plot_positional_detail
from attncourse.widgets.base import Explorer
from attncourse.widgets.static import BookAxis


class PositionalEncodingExplorer(Explorer):
    """Sliders for a position and a dimension of the sinusoidal positional encoding.

    Display the explorer by making it the last expression of a notebook cell.

    Parameters
    ----------
    max_len : int
        Number of positions in the table.
    d_model : int
        Width of the encoding; must be even.
    base : float
        10000 in the paper.
    position, dimension : int, optional
        Where the sliders start; by default position 10 and dimension 8 (or the
        last position and sine column that exist).

    Attributes
    ----------
    pe : ndarray, (max_len, d_model)
        The table, from :func:`attncourse.functional.positional.sinusoidal_encoding`.
    position : ipywidgets.IntSlider
        The row pos, 0..max_len-1.
    dimension : ipywidgets.IntSlider
        The column, 0..d_model-1 (column 2i is a sine, 2i + 1 a cosine of pos * omega_i).
    caption : ipywidgets.HTML
        The chosen column's formula, frequency and wavelength, and the value.
    out : ipywidgets.Output
        Holds the figure.
    widget : ipywidgets.VBox
        The whole explorer.
    figure : matplotlib.figure.Figure
        The figure on display; closed in pyplot once shown, so none pile up.
    shown : dict
        What is on display: ``"position"``, ``"dimension"``, ``"pair"`` (i =
        dimension // 2), ``"function"`` (``"sin"`` or ``"cos"``), ``"omega"``
        (radians per position), ``"wavelength"`` (positions, 2 pi * base^(2i / d_model)),
        ``"value"`` (PE(pos, dimension)), ``"column"`` (max_len,) and ``"vector"`` (d_model,).

    Notes
    -----
    The book (no kernel) shows :meth:`to_html`: five positions and the sine
    and cosine columns of five pairs, fastest to slowest (and the starting
    ones), drawn in advance.

    Raises
    ------
    ValueError
        If ``d_model`` is not a positive even number, ``max_len < 2``, or a start
        index is out of range.

    References
    ----------
    Vaswani et al. (2017), section 3.5.

    Examples
    --------
    >>> explorer = PositionalEncodingExplorer(max_len=16, d_model=8)
    >>> explorer.dimension.value = 3
    >>> explorer.shown["function"], explorer.shown["pair"]
    ('cos', 1)
    """

    def __init__(
        self,
        max_len: int = 64,
        d_model: int = 64,
        base: float = 10000.0,
        position: int | None = None,
        dimension: int | None = None,
    ) -> None:
        if int(max_len) < 2:
            raise ValueError(f"max_len must be at least 2, got {max_len}")
        self.pe = sinusoidal_encoding(max_len, d_model, base)
        self.max_len, self.d_model, self.base = int(max_len), int(d_model), float(base)
        self.omega = positional_frequencies(d_model, base)
        position = min(10, self.max_len - 1) if position is None else position
        dimension = min(8, self.d_model - 2) if dimension is None else dimension
        for name, value, size in (("position", position, self.max_len), ("dimension", dimension, self.d_model)):
            if not 0 <= int(value) < size:
                raise ValueError(f"{name} must lie in 0..{size - 1}, got {value}")

        self.position = widgets.IntSlider(value=int(position), min=0, max=self.max_len - 1, description="Position",
                                          continuous_update=False)
        self.dimension = widgets.IntSlider(value=int(dimension), min=0, max=self.d_model - 1,
                                           description="Dimension", continuous_update=False)
        super().__init__(widgets.HBox([self.position, self.dimension]))

        self.position.observe(self._on_change, names="value")
        self.dimension.observe(self._on_change, names="value")
        self._update()

    book_title = "Positional encoding explorer"

    def _book_axes(self) -> list[BookAxis]:
        # Five positions and, for five pairs from the fastest to the slowest, the sine and the
        # cosine column: the states that show how the wavelength grows across the table. (Each
        # frame holds the whole table, about 19 kB: a finer grid would pass 3 MB a page.)
        positions = np.linspace(0, self.max_len - 1, 5).round().astype(int).tolist()
        pairs = np.unique(np.linspace(0, self.d_model // 2 - 1, 5).round().astype(int))
        dimensions = sorted({*(2 * pairs).tolist(), *(2 * pairs + 1).tolist(), self.dimension.value})
        return [BookAxis(self.position, values=sorted({*positions, self.position.value})),
                BookAxis(self.dimension, values=dimensions)]

    def _book_note(self, n_states: int) -> str:
        return (f"{n_states} settings drawn in advance: five positions and the sine and cosine columns of five "
                "pairs, fastest to slowest. In JupyterLab every position and dimension is computed live.")

    def _update(self) -> None:
        pos, dim = self.position.value, self.dimension.value
        pair = dim // 2
        omega = float(self.omega[pair])
        self.shown = {
            "position": pos,
            "dimension": dim,
            "pair": pair,
            "function": "sin" if dim % 2 == 0 else "cos",
            "omega": omega,
            "wavelength": 2 * math.pi / omega,
            "value": float(self.pe[pos, dim]),
            "column": self.pe[:, dim].copy(),
            "vector": self.pe[pos].copy(),
        }
        self.caption.value = self._caption()
        self._render(plot_positional_detail(self.pe, pos, dim, base=self.base))

    def _caption(self) -> str:
        s = self.shown
        i, d = s["pair"], self.d_model
        periods = self.max_len / s["wavelength"]
        if periods >= 1:
            span = f"the {self.max_len} positions hold {periods:.1f} periods of it"
        else:
            span = f"the {self.max_len} positions cover only {100 * periods:.1f}% of one period"
        return (
            f"<b>Dimension {s['dimension']}</b> is the {'sine' if s['function'] == 'sin' else 'cosine'} of pair "
            f"i = {i}: PE(pos, {s['dimension']}) = {s['function']}(pos &middot; &omega;<sub>{i}</sub>), "
            f"&omega;<sub>{i}</sub> = 1 / {self.base:g}<sup>2&middot;{i}/{d}</sup> = {s['omega']:.4g} radians per "
            f"position. Its wavelength is 2&pi; &middot; {self.base:g}<sup>2i/d<sub>model</sub></sup> = "
            f"{s['wavelength']:,.1f} positions; {span}. "
            f"<b>Position {s['position']}</b>: PE({s['position']}, {s['dimension']}) = {s['value']:.3f}."
        )
