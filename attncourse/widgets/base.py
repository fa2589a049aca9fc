"""What every explorer of :mod:`attncourse.widgets` does the same way.

An explorer is a few controls above a caption above a figure. :class:`Explorer`
holds the parts that do not depend on what is explored: it shows itself as its
``widget``, redraws when a control changes, moves a slider with Previous and
Next buttons, and puts a matplotlib figure into its ``out`` area. A subclass
creates its controls (calling :meth:`Explorer._step_buttons` first if it wants
Previous and Next), calls ``super().__init__`` with the rows of controls, and
writes :meth:`Explorer._update`, which fills ``shown`` and ``caption`` and then
calls :meth:`Explorer._render` with a new figure.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
from IPython import get_ipython
from IPython.display import display
from matplotlib.figure import Figure


def _in_kernel() -> bool:
    """Whether this code runs in a Jupyter kernel, where widgets have a front end."""
    return getattr(get_ipython(), "kernel", None) is not None


class Explorer:
    """Base class of the explorers: layout, display, redraw on change and figure output.

    Parameters
    ----------
    *rows : ipywidgets.Widget
        The controls, one widget (often an ``ipywidgets.HBox``) per row, top to
        bottom; the caption and the figure come below them.

    Attributes
    ----------
    caption : ipywidgets.HTML
        Text below the controls; empty until the subclass fills it.
    out : ipywidgets.Output
        Holds the figure.
    widget : ipywidgets.VBox
        The whole explorer: the rows, then ``caption``, then ``out``.
    figure : matplotlib.figure.Figure or None
        The figure on display, None before the first :meth:`_render`. It is
        closed in pyplot as soon as it is shown, so no figures pile up; the
        object stays readable.
    shown : dict
        What is on display; the subclass decides the keys.

    Notes
    -----
    ``_quiet`` is False except inside ``with self._quietly():``, where the
    subclass changes several controls in a row (say, a slider's range and
    value); there :meth:`_on_change` does not redraw, so the subclass redraws
    once at the end.

    Examples
    --------
    >>> class Square(Explorer):
    ...     def __init__(self):
    ...         self.n = widgets.IntSlider(value=2, min=0, max=9)
    ...         super().__init__(self.n)
    ...         self.n.observe(self._on_change, names="value")
    ...         self._update()
    ...     def _update(self):
    ...         self.shown = {"square": self.n.value ** 2}
    ...         self._render(plt.figure())
    >>> square = Square()
    >>> square.n.value = 3
    >>> square.shown["square"]
    9
    """

    def __init__(self, *rows: widgets.Widget) -> None:
        self.caption = widgets.HTML()
        self.out = widgets.Output()
        self.widget = widgets.VBox([*rows, self.caption, self.out])
        self.figure: Figure | None = None
        self.shown: dict[str, Any] = {}
        self._quiet = False

    # Display: the explorer shows as its VBox.
    def _ipython_display_(self) -> None:
        display(self.widget)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)

    def _update(self) -> None:
        """Redraw ``shown``, ``caption`` and the figure for the current controls; each subclass writes it."""
        raise NotImplementedError

    def _on_change(self, _change: dict) -> None:
        """Observer of a control: redraw, unless ``_quiet`` is set."""
        if not self._quiet:
            self._update()

    @contextmanager
    def _quietly(self) -> Iterator[None]:
        """Within this ``with`` block, changed controls do not redraw (``_quiet`` is True)."""
        self._quiet = True
        try:
            yield
        finally:
            self._quiet = False

    def _step_buttons(self, slider: widgets.IntSlider) -> None:
        """Create ``self.previous`` and ``self.next``, buttons that move ``slider`` one step back or forward.

        Parameters
        ----------
        slider : ipywidgets.IntSlider
            The slider the buttons move; see :meth:`_move`.
        """
        self.previous = widgets.Button(description="Previous", icon="arrow-left",
                                       layout=widgets.Layout(width="8em"))
        self.next = widgets.Button(description="Next", icon="arrow-right", layout=widgets.Layout(width="8em"))
        self.previous.on_click(lambda _: self._move(slider, -1))
        self.next.on_click(lambda _: self._move(slider, +1))

    def _move(self, slider: widgets.IntSlider, delta: int) -> None:
        """Move ``slider`` by ``delta``, stopping at its ends.

        Parameters
        ----------
        slider : ipywidgets.IntSlider
            The slider to move.
        delta : int
            How far: -1 one step back, +1 one step forward.
        """
        slider.value = int(np.clip(slider.value + delta, slider.min, slider.max))

    def _render(self, fig: Figure) -> None:
        """Show ``fig`` in ``out`` in place of the previous figure, and keep it as ``figure``.

        The previous figure and ``fig`` are both closed in pyplot. ``fig`` is
        displayed only inside a Jupyter kernel; elsewhere (a script, pytest)
        it is only kept as ``figure``.

        Parameters
        ----------
        fig : matplotlib.figure.Figure
            The new figure, freshly drawn by the subclass.
        """
        previous, self.figure = self.figure, fig
        if previous is not None:
            plt.close(previous)
        # Outside a kernel (a script, pytest) there is no front end to show
        # the figure, and IPython would print its repr instead.
        if _in_kernel():
            self.out.clear_output(wait=True)
            with self.out:
                display(fig)
        # The figure is closed in pyplot once shown: no figure piles up, and the
        # inline backend does not draw it a second time at the end of the cell.
        plt.close(fig)


__all__ = ["Explorer"]
