"""What every explorer of :mod:`attncourse.widgets` does the same way.

A subclass creates its controls, calls ``super().__init__`` with their rows and writes
:meth:`Explorer._update` (fill ``shown`` and ``caption``, then :meth:`Explorer._render` a
figure) and :meth:`Explorer._book_axes`, the states the kernel-less book pre-renders.
"""

from __future__ import annotations

import base64
import copy
import html
import io
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
from IPython import get_ipython
from IPython.display import display
from matplotlib.figure import Figure

from attncourse.runtime import book_build
from attncourse.widgets.static import (
    BookAxis,
    figure_data_uri,
    render_player,
)


@dataclass(frozen=True)
class BookState:
    """One pre-computed state of an explorer's book rendering."""

    values: tuple
    labels: tuple
    caption: str
    shown: dict
    frame: str


def _plain_text(caption: str) -> str:
    """The caption's HTML as plain text: the alternative text of its frame."""
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", caption)).split())


def _in_kernel() -> bool:
    """Whether this code runs in a Jupyter kernel, where widgets have a front end."""
    return getattr(get_ipython(), "kernel", None) is not None


def _display_data(fig: Figure) -> dict[str, Any]:
    """``fig`` as one ``display_data`` output, formatted as ``display(fig)`` formats it."""
    shell = get_ipython()
    data, metadata = shell.display_formatter.format(fig) if shell is not None else ({}, {})
    if "image/png" not in data:
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", bbox_inches="tight")
        data = {"image/png": base64.b64encode(buffer.getvalue()).decode("ascii"),
                "text/plain": repr(fig)}
    return {"output_type": "display_data", "data": data, "metadata": metadata}


class Explorer:
    """Base class of the explorers: layout, display, redraw on change and figure output.

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
        self._offline = False
        self._reuse_frame = False

    #: What the explorer is, for the book rendering's label (screen readers).
    book_title = "Explorer"

    # Display: the explorer shows as its VBox, plus its book rendering when the book is built.
    def _ipython_display_(self) -> None:
        display(self._repr_mimebundle_(), raw=True)

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        bundle = dict(self.widget._repr_mimebundle_(**kwargs) or {})
        if book_build():
            bundle["text/html"] = self.to_html()
        return bundle

    # ------------------------------------------------------------ book rendering

    def _book_axes(self) -> list[BookAxis]:
        """The controls the book offers and the values it pre-renders (per subclass)."""
        raise NotImplementedError

    def _frame_key(self) -> Any:
        """A key equal for two states whose figures are equal, or None (always draw)."""
        return None

    @property
    def _frame_drawn(self) -> bool:
        """True while the book walk redraws a state whose frame it already holds."""
        return self._reuse_frame

    def _book_note(self, n_states: int) -> str:
        """The line under the book rendering: what it covers."""
        return f"{n_states} settings drawn in advance; in JupyterLab the explorer computes any setting live."

    def book_states(self) -> list[BookState]:
        """Every state the book rendering holds, drawn by the live widget's own ``_update``."""
        axes = self._book_axes()
        start = [axis.control.value for axis in axes]
        states: list[BookState] = []
        self._offline = True
        try:
            self._walk(axes, 0, (), (), states, {})
        finally:
            with self._quietly():
                for axis, value in zip(axes, start):
                    axis.control.value = value
            self._offline = False
            self._update()
        return states

    def _walk(self, axes: Sequence[BookAxis], k: int, values: tuple, labels: tuple,
              out: list[BookState], drawn: dict[Any, str]) -> None:
        """Set axis ``k`` to each of its values and walk on; at the end, record the state."""
        if k == len(axes):
            key = self._frame_key()
            frame = drawn.get(key) if key is not None else None
            self._reuse_frame = frame is not None
            try:
                self._update()
            finally:
                self._reuse_frame = False
            if frame is None:
                frame = figure_data_uri(self.figure)
                if key is not None:
                    drawn[key] = frame
            out.append(BookState(values, labels, self.caption.value, copy.deepcopy(self.shown), frame))
            return
        axis = axes[k]
        if axis.applies is not None and not axis.applies():
            self._walk(axes, k + 1, values + (None,), labels + (None,), out, drawn)
            return
        for value in axis.current_values():
            # Quiet: one redraw per state, at the end of the walk, not one per control.
            with self._quietly():
                axis.control.value = value
            self._walk(axes, k + 1, values + (value,), labels + (axis.label_of(value),), out, drawn)

    def to_html(self) -> str:
        """The explorer for a page without a kernel: drawn states behind HTML controls."""
        axes = self._book_axes()
        start_applies = [axis.applies is None or axis.applies() for axis in axes]
        start = tuple(axis.control.value if on else None for axis, on in zip(axes, start_applies))
        states = self.book_states()
        options: list[list[str]] = []
        for k, axis in enumerate(axes):
            seen = [(s.values[k], s.labels[k]) for s in states if s.labels[k] is not None]
            if axis.kind == "slider":
                seen.sort(key=lambda pair: pair[0])
            labels = list(dict.fromkeys(label for _, label in seen))
            options.append(["off", "on"] if axis.kind == "checkbox" else labels)
        frames: dict[str, int] = {}
        table: dict[str, tuple[int, str, str]] = {}
        initial = None
        for state in states:
            key = "/".join("-" if label is None else str(options[k].index(label))
                           for k, label in enumerate(state.labels))
            frame = frames.setdefault(state.frame, len(frames))
            table[key] = (frame, state.caption, f"{self.book_title}: {_plain_text(state.caption)}")
            if state.values == start:
                initial = key
        axes_meta = [{"label": axis.title, "kind": axis.kind, "options": opts} for axis, opts in zip(axes, options)]
        return render_player(self.book_title, axes_meta, table, list(frames), initial or next(iter(table)),
                             note=self._book_note(len(table)))

    def _update(self) -> None:
        """Redraw ``shown``, ``caption`` and the figure for the controls (per subclass)."""
        raise NotImplementedError

    def _on_change(self, _change: dict) -> None:
        """Observer of a control: redraw, unless ``_quiet`` is set."""
        if not self._quiet:
            self._update()

    @contextmanager
    def _quietly(self) -> Iterator[None]:
        """Within this block, changed controls do not redraw."""
        # Restore what was there: a quiet block may sit inside another one.
        previous, self._quiet = self._quiet, True
        try:
            yield
        finally:
            self._quiet = previous

    def _step_buttons(self, slider: widgets.IntSlider) -> None:
        """Create ``self.previous`` and ``self.next``, moving ``slider`` one step."""
        self.previous = widgets.Button(description="Previous", icon="arrow-left",
                                       layout=widgets.Layout(width="8em"))
        self.next = widgets.Button(description="Next", icon="arrow-right", layout=widgets.Layout(width="8em"))
        self.previous.on_click(lambda _: self._move(slider, -1))
        self.next.on_click(lambda _: self._move(slider, +1))

    def _move(self, slider: widgets.IntSlider, delta: int) -> None:
        """Move ``slider`` by ``delta``, stopping at its ends."""
        slider.value = int(np.clip(slider.value + delta, slider.min, slider.max))

    def _render(self, fig: Figure) -> None:
        """Show ``fig`` in ``out`` in place of the previous one, and keep it as ``figure``."""
        previous, self.figure = self.figure, fig
        if previous is not None:
            plt.close(previous)
        # Outside a kernel (a script, pytest) there is no front end to show
        # the figure, and IPython would print its repr instead.
        if _in_kernel() and not self._offline:
            # The figure replaces the widget's ``outputs`` state, set here in the kernel.
            # Not ``with self.out: display(fig)``: that capture asks the front end to
            # route the cell's outputs into the widget, and nbclient (nbgrader, nbval,
            # jupyter execute), standing in for the front end, answers each captured
            # output on the shell channel while it waits there for the cell's reply; now
            # and then it then sees the reply only when the cell's time limit ends
            # (jupyter/nbclient#312). Setting the state sends nothing back.
            self.out.outputs = (_display_data(fig),)
        # The figure is closed in pyplot once shown: no figure piles up, and the
        # inline backend does not draw it a second time at the end of the cell.
        plt.close(fig)


__all__ = ["BookState", "Explorer"]
