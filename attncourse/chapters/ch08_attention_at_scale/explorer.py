"""An explorer of FlashAttention's tiled forward pass: play the tiles one by one.

:class:`FlashAttentionExplorer` runs :func:`attncourse.functional.tiled_attention` with a
trace on a small random example and shows, after each tile, which block of queries and
which block of keys are loaded, the running maximum ``m`` and normaliser ``l`` of every
query row, and how far each row's partial output ``acc / l`` still is from the exact
output of the textbook formula. The figure is :func:`attncourse.viz.plot_tiles`.

References
----------
Dao (2023), "FlashAttention-2", algorithm 1; Dao et al. (2022), algorithm 1.
"""

from __future__ import annotations

import ipywidgets as widgets
import numpy as np

from attncourse.chapters.ch08_attention_at_scale.figures import plot_tiles
from attncourse.functional.numpy_attention import scaled_dot_product_attention
from attncourse.functional.tiled_attention import TiledAttention, tiled_attention
from attncourse.widgets.base import Explorer
from attncourse.widgets.static import BookAxis

#: Block sizes offered (block_q = block_k).
BLOCK_SIZES: tuple[int, ...] = (2, 4)


class FlashAttentionExplorer(Explorer):
    """Step through the tiles of FlashAttention's forward pass on a small example.

    Display the explorer by making it the last expression of a notebook cell.

    Parameters
    ----------
    seq_len : int
        n, queries and keys (2..16).
    d_k : int
        Width of queries, keys and values.
    block : int
        Starting block size, one of :data:`BLOCK_SIZES` (block_q = block_k).
    causal : bool
        Start with the causal mask (future key blocks are skipped).
    seed : int
        Seed of the random queries, keys and values.

    Attributes
    ----------
    q, k, v : ndarray, (seq_len, d_k)
    block : ipywidgets.Dropdown
        Block size.
    causal : ipywidgets.Checkbox
    tile : ipywidgets.IntSlider
        Tile number, 1..number of tiles computed.
    result : TiledAttention
        The traced run for the current block size and mask.
    exact : ndarray, (seq_len, d_k)
        The textbook output.
    shown : dict
        ``"tile"``, ``"n_tiles"``, ``"q_block"``, ``"k_block"``, ``"rows"``, ``"cols"``,
        ``"m"`` and ``"l"`` (seq_len,), ``"output"`` (seq_len, d_k), ``"error"`` (seq_len,)
        (max over d_k of |partial - exact|) and ``"finished"`` (rows whose last key block is in).

    Notes
    -----
    The book (no kernel) shows :meth:`to_html`: every tile for each block size, with and
    without the causal mask, drawn in advance.

    Raises
    ------
    ValueError
        If ``seq_len`` is out of 2..16 or ``block`` is not offered.

    Examples
    --------
    >>> explorer = FlashAttentionExplorer(seq_len=8, block=4)
    >>> explorer.shown["n_tiles"], explorer.tile.max
    (4, 4)
    >>> explorer.tile.value = 4
    >>> bool(explorer.shown["error"].max() < 1e-12)
    True
    """

    def __init__(self, seq_len: int = 8, d_k: int = 4, block: int = 2, causal: bool = False, seed: int = 0) -> None:
        if not 2 <= int(seq_len) <= 16:
            raise ValueError(f"seq_len must lie in 2..16 (a picture, not a benchmark), got {seq_len}")
        if block not in BLOCK_SIZES:
            raise ValueError(f"block must be one of {BLOCK_SIZES}, got {block}")
        rng = np.random.default_rng(seed)
        self.q, self.k, self.v = (rng.normal(size=(int(seq_len), int(d_k))) for _ in range(3))
        self.block = widgets.Dropdown(options=list(BLOCK_SIZES), value=block, description="Block size")
        self.causal = widgets.Checkbox(value=bool(causal), description="Causal mask", indent=False)
        self.tile = widgets.IntSlider(value=1, min=1, max=1, description="Tile", continuous_update=False)
        self._step_buttons(self.tile)
        super().__init__(widgets.HBox([self.block, self.causal]),
                         widgets.HBox([self.previous, self.tile, self.next]))
        self._run()
        for control in (self.block, self.causal):
            control.observe(self._on_setting, names="value")
        self.tile.observe(self._on_change, names="value")
        self._update()

    book_title = "FlashAttention tile explorer"

    def _book_axes(self) -> list[BookAxis]:
        return [BookAxis(self.block), BookAxis(self.causal, label="Causal mask"), BookAxis(self.tile)]

    def _book_note(self, n_states: int) -> str:
        return (f"Every tile for block sizes {', '.join(map(str, BLOCK_SIZES))}, with and without the causal "
                f"mask: {n_states} settings drawn in advance.")

    def _run(self) -> None:
        """Trace the tiled pass for the current block size and mask; fit the tile slider to it."""
        n = self.q.shape[0]
        causal = bool(self.causal.value)
        mask = np.tril(np.ones((n, n), dtype=bool)) if causal else None
        self.result: TiledAttention = tiled_attention(self.q, self.k, self.v, causal=causal,
                                                      block_q=self.block.value, block_k=self.block.value, trace=True)
        self.exact = scaled_dot_product_attention(self.q, self.k, self.v, mask=mask)[0]
        with self._quietly():
            self.tile.max = len(self.result.steps)
            self.tile.value = min(self.tile.value, self.tile.max)

    def _on_setting(self, change: dict) -> None:
        self._run()
        self._on_change(change)

    def _update(self) -> None:
        steps = self.result.steps
        index = self.tile.value - 1
        step = steps[index]
        error = np.abs(step.output - self.exact).max(axis=1)
        last_block = {}
        for s in steps:
            last_block[s.q_block] = s  # the last tile of each query block, in walking order
        finished = [r for b, s in last_block.items() if steps.index(s) <= index for r in range(*s.rows)]
        self.previous.disabled = self.tile.value == self.tile.min
        self.next.disabled = self.tile.value == self.tile.max
        self.shown = {
            "tile": self.tile.value, "n_tiles": len(steps), "q_block": step.q_block, "k_block": step.k_block,
            "rows": step.rows, "cols": step.cols, "m": step.m, "l": step.l, "output": step.output,
            "error": error, "finished": finished,
        }
        self.caption.value = self._caption()
        self._render(plot_tiles(self.result, self.exact, index, causal=bool(self.causal.value)))

    def _caption(self) -> str:
        s = self.shown
        n = self.q.shape[0]
        (r0, r1), (c0, c1) = s["rows"], s["cols"]
        text = (f"Tile {s['tile']} of {s['n_tiles']}: queries {r0}..{r1 - 1} against keys {c0}..{c1 - 1}, "
                f"{(r1 - r0) * (c1 - c0)} scores held at once (the full matrix has {n * n}). ")
        if self.causal.value:
            text += f"Causal: {s['n_tiles']} tiles computed instead of {(-(-n // self.block.value)) ** 2}. "
        if s["finished"]:
            done = s["finished"]
            worst = s["error"][done].max()
            text += (f"Rows {done[0]}..{done[-1]} have seen all their keys: their output equals the exact one "
                     f"(largest difference {worst:.1e}).")
        else:
            text += "No row has seen all its keys yet: each partial output is a softmax over the keys so far."
        return text


__all__ = ["BLOCK_SIZES", "FlashAttentionExplorer"]
