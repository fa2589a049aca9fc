"""An explorer of a fixed-size memory being written and overwritten: the delta rule against
linear attention.

:class:`MemoryWriteExplorer` writes a list of (key, value) pairs into two memories of the
same size, one write per step: linear attention's ``S_t = S_{t-1} + k_t^T v_t`` and the
delta rule's ``S_t = S_{t-1} + k_t^T (v_t - k_t S_{t-1})`` (beta = 1). Some keys come back
later with a new value. A slider picks the step t; the figure shows, for each memory, the
read ``k_i S_t`` at every key written so far, as its weight on the key's current value
(1 is an exact recall) and its largest weight on any other value, and the caption counts
the keys each memory recalls (the read's weight on the current value above every other). The reads
come from :func:`~attncourse.functional.memory_recall.memory_reads`, the same function the
chapter checks against the written-out loops.

References
----------
Schlag, Irie, Schmidhuber (2021), "Linear Transformers Are Secretly Fast Weight
Programmers", sections 3-4 (the delta rule against the sum of outer products).
"""

from __future__ import annotations

from collections.abc import Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn.functional as F

from attncourse.functional.memory_recall import key_codebook, memory_reads
from attncourse.widgets.base import Explorer
from attncourse.widgets.static import BookAxis

#: The two memories side by side: label -> rule of :func:`memory_reads`.
MEMORIES: dict[str, str] = {"delta rule": "delta", "linear attention": "linear"}

#: The default writes: six keys, then three of them again with new values, then one a third time.
DEFAULT_WRITES: tuple[tuple[int, int], ...] = ((0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 5),
                                               (1, 6), (3, 7), (4, 0), (1, 2))


class MemoryWriteExplorer(Explorer):
    """A slider over the writes into two fixed-size memories, with each stored key's recall.

    Display the explorer by making it the last expression of a notebook cell.

    Parameters
    ----------
    writes : sequence of (key, value) pairs of ints
        Key indices into ``n_keys`` random unit keys of width ``d_k`` and value symbols
        (one-hot over ``n_values``), written in order; a key may come back.
    n_keys, d_k, n_values : int
    orthogonal : bool
        Orthonormal keys (needs ``n_keys <= d_k``): the memories differ only where a key comes
        back. Random unit keys add linear attention's crosstalk, and the delta rule's too.
    seed : int
        Seeds the random keys.

    Attributes
    ----------
    t : ipywidgets.IntSlider
        Writes made, 1 .. len(writes).
    previous, next : ipywidgets.Button
    reads : dict
        Memory label -> ``(len(writes), n_keys, n_values)`` array: the read at every key
        after each write (float64).
    shown : dict
        ``"t"``, ``"stored"`` (the keys written so far), ``"current"`` (key -> its latest
        value), and per memory label ``"{label} on value"`` (weight on the current value of
        each stored key) and ``"{label} recalled"`` (how many stored keys it recalls: the
        weight on the current value strictly the largest).

    Raises
    ------
    ValueError
        If ``writes`` is empty or names a key or value out of range.
    """

    book_title = "Delta rule against linear attention: a memory written and overwritten"

    def __init__(self, writes: Sequence[tuple[int, int]] = DEFAULT_WRITES, n_keys: int = 6,
                 d_k: int = 8, n_values: int = 8, orthogonal: bool = True, seed: int = 0) -> None:
        writes = [(int(k), int(v)) for k, v in writes]
        if not writes:
            raise ValueError("writes must hold at least one (key, value) pair")
        bad = [(k, v) for k, v in writes if not (0 <= k < n_keys and 0 <= v < n_values)]
        if bad:
            raise ValueError(f"writes {bad} out of range: keys in [0, {n_keys}), values in [0, {n_values})")
        self.writes, self.n_values = writes, n_values
        generator = torch.Generator().manual_seed(seed)
        self.keys = key_codebook(n_keys, d_k, orthogonal, generator=generator)  # (n_keys, d_k) float64 unit rows
        order = torch.tensor([k for k, _ in writes])
        values = F.one_hot(torch.tensor([v for _, v in writes]), n_values).to(self.keys.dtype)
        self.reads = {label: np.stack([memory_reads(rule, self.keys[order[:t]][None], values[None, :t],
                                                    self.keys[None])[0].numpy()
                                       for t in range(1, len(writes) + 1)])
                      for label, rule in MEMORIES.items()}
        self.t = widgets.IntSlider(value=1, min=1, max=len(writes), description="writes t",
                                   continuous_update=False)
        self._step_buttons(self.t)
        super().__init__(widgets.HBox([self.previous, self.t, self.next]))
        self.t.observe(self._on_change, names="value")
        self._update()

    def _book_axes(self) -> list[BookAxis]:
        return [BookAxis(self.t, label="writes t")]

    def _book_note(self, n_states: int) -> str:
        return f"All {n_states} writes, drawn in advance."

    def _update(self) -> None:
        t = self.t.value
        self.previous.disabled, self.next.disabled = t == self.t.min, t == self.t.max
        current = dict(self.writes[:t])  # a later write of a key replaces its value
        stored = sorted(current)
        self.shown = {"t": t, "stored": stored, "current": current}
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.2), sharey=True)
        for ax, label in zip(axes, MEMORIES):
            read = self.reads[label][t - 1]
            on_value = np.array([read[k, current[k]] for k in stored])
            others = np.array([np.delete(read[k], current[k]).max() for k in stored])
            recalled = int((on_value > others).sum())  # a tie is not a recall
            self.shown[f"{label} on value"], self.shown[f"{label} recalled"] = on_value, recalled
            ax.bar(stored, on_value, color="tab:blue", label="weight on the current value")
            ax.plot(stored, others, "o", color="tab:red", label="largest other weight")
            ax.axhline(1.0, color="gray", linestyle=":")
            ax.set(title=f"{label}: {recalled} of {len(stored)} recalled", xlabel="stored key i",
                   xticks=range(len(self.keys)), ylim=(-0.6, 2.1))
        axes[0].set_ylabel("read k_i S_t")
        axes[0].legend(loc="upper left", fontsize=8)
        fig.tight_layout()
        key, value = self.writes[t - 1]
        again = "again, replacing its value" if key in dict(self.writes[:t - 1]) else "for the first time"
        self.caption.value = (
            f"<b>Write {t} of {len(self.writes)}</b>: key {key} with value {value}, {again}. "
            f"The delta rule recalls <b>{self.shown['delta rule recalled']}</b> of the "
            f"{len(stored)} stored keys, linear attention "
            f"<b>{self.shown['linear attention recalled']}</b>. A bar at the dotted line is an exact "
            "recall; linear attention adds a second value to a key written twice.")
        self._render(fig)


__all__ = ["DEFAULT_WRITES", "MEMORIES", "MemoryWriteExplorer"]
