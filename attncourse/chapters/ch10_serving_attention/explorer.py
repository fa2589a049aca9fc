"""An explorer of a paged KV cache: a slider over decoding steps, the pool and the block tables.

:class:`PagedCacheExplorer` replays a :func:`~attncourse.decode.paged.serve_greedy`
run (recorded :class:`~attncourse.decode.paged.PoolState` per step): which physical
blocks each request holds, how full they are, which are shared by several requests
(a common prompt) and when a request's blocks return to the pool. The figure is
:func:`attncourse.chapters.ch10_serving_attention.figures.plot_paged_cache`.

References
----------
Kwon et al. (2023), "Efficient Memory Management for Large Language Model Serving
with PagedAttention", sections 4.2-4.4.
"""

from __future__ import annotations

from collections.abc import Sequence

import ipywidgets as widgets

from attncourse.chapters.ch10_serving_attention.figures import plot_paged_cache
from attncourse.decode.paged import Served
from attncourse.widgets.base import Explorer
from attncourse.widgets.static import BookAxis


class PagedCacheExplorer(Explorer):
    """Step through the pool of a paged KV cache while requests are served.

    Display the explorer by making it the last expression of a notebook cell.

    Parameters
    ----------
    served : Served
        A :func:`~attncourse.decode.paged.serve_greedy` result (its ``states``).
    block_size : int
    labels : sequence of str, optional
        The requests' names.

    Attributes
    ----------
    step : ipywidgets.IntSlider
        Decoding step, 0 .. len(states) - 1.
    shown : dict
        ``"step"``, ``"tables"``, ``"lengths"``, ``"used"`` (blocks in use), ``"shared"``
        (blocks used by more than one request), ``"wasted"`` (empty slots in allocated blocks).

    Raises
    ------
    ValueError
        If ``served`` recorded no state.

    Notes
    -----
    The book (no kernel) shows :meth:`to_html`: every step drawn in advance.
    """

    book_title = "Paged KV cache explorer"

    def __init__(self, served: Served, block_size: int, labels: Sequence[str] | None = None) -> None:
        if not served.states:
            raise ValueError("served holds no recorded step: serve at least one token")
        self.states, self.block_size = served.states, int(block_size)
        self.labels = list(labels) if labels is not None else None
        self.step = widgets.IntSlider(value=0, min=0, max=len(self.states) - 1, description="Step",
                                      continuous_update=False)
        self._step_buttons(self.step)
        super().__init__(widgets.HBox([self.previous, self.step, self.next]))
        self.step.observe(self._on_change, names="value")
        self._update()

    def _book_axes(self) -> list[BookAxis]:
        return [BookAxis(self.step)]

    def _book_note(self, n_states: int) -> str:
        return f"Every decoding step: {n_states} states drawn in advance."

    def _update(self) -> None:
        state = self.states[self.step.value]
        used = sum(1 for c in state.ref_counts if c)
        shared = sum(1 for c in state.ref_counts if c > 1)
        filled: dict[int, int] = {}  # tokens in each held block (shared blocks hold the same ones)
        for table, length in zip(state.tables, state.lengths):
            for i, block in enumerate(table):
                filled[block] = max(filled.get(block, 0), min(self.block_size, length - i * self.block_size))
        wasted = sum(self.block_size - n for n in filled.values())
        self.previous.disabled = self.step.value == self.step.min
        self.next.disabled = self.step.value == self.step.max
        self.shown = {"step": state.step, "tables": state.tables, "lengths": state.lengths,
                      "used": used, "shared": shared, "wasted": wasted}
        self.caption.value = (
            f"Step {state.step}: {sum(1 for t in state.tables if t)} requests hold {used} blocks "
            f"({shared} shared): {sum(state.lengths)} tokens in the requests, {sum(filled.values())} stored, "
            f"{wasted} slots allocated but empty "
            f"(only last blocks can be partly empty).")
        self._render(plot_paged_cache(state.tables, state.lengths, state.ref_counts, self.block_size,
                                      self.labels, title=f"step {state.step}: "))


__all__ = ["PagedCacheExplorer"]
