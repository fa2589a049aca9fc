"""Watch induction heads form: every head's attention on one repeated sequence, checkpoint by checkpoint.

:class:`InductionExplorer` takes the attention weights of a model at several
training checkpoints, all on the same probe (a segment of random tokens repeated),
and shows them with a slider over the checkpoints and a menu over the heads. Before
the phase change every head looks at the recent past; after it, an induction head
draws a stripe one position to the right of the diagonal of the earlier repeat (each
token of a repeat attends to the token that followed its previous occurrence), and a
layer-1 head draws the sub-diagonal of a previous-token head.

References
----------
Olsson et al. (2022), "In-context Learning and Induction Heads", section 2 and the
attention patterns of its figures; Elhage et al. (2021), section "Induction heads".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import torch

from attncourse.widgets.base import Explorer
from attncourse.widgets.static import BookAxis

#: Value of the ``head`` dropdown that shows every head.
ALL_HEADS = -1


class InductionExplorer(Explorer):
    """A slider over training checkpoints and a menu over heads, on one repeated sequence.

    Display the explorer by making it the last expression of a notebook cell.

    Parameters
    ----------
    weights : mapping of step -> sequence over layers of (num_heads, n, n) arrays
        The attention of each checkpoint on ``tokens`` (e.g. from :meth:`from_models`).
    tokens : sequence of int
        The probe, n tokens; labels the axes.
    segment_len : int
        Length of the repeated segment: marks where each repeat starts.
    scores : mapping of step -> dict, optional
        Per checkpoint, values shown in the caption: ``"loss_repeated"`` and
        ``"prefix_L2H1"``-style head scores (:func:`attncourse.chapters.ch09_what_heads_learn.recipe.head_scores`).
    book_heads : sequence of str, optional
        The heads the book rendering pre-draws one by one, as labels (``"L2H1"``),
        besides all heads together; default every head. In JupyterLab every head is
        offered. Fewer heads keep the page small: each is one frame per checkpoint.

    Attributes
    ----------
    checkpoint : ipywidgets.IntSlider
        Index into :attr:`steps`.
    head : ipywidgets.Dropdown
        ``-1`` (:data:`ALL_HEADS`) or a flat head index ``layer * num_heads + head``.
    steps : list of int
    shown : dict
        ``"step"``, ``"head"`` (flat index or None), ``"weights"`` ((layers, heads, n, n) or (n, n)).

    Raises
    ------
    ValueError
        If ``weights`` is empty, a checkpoint's weights do not match ``tokens``, or a
        ``book_heads`` label names no head.
    """

    book_title = "Induction head explorer"

    def __init__(self, weights: Mapping[int, Sequence[Any]], tokens: Sequence[int], segment_len: int,
                 scores: Mapping[int, Mapping[str, float]] | None = None,
                 book_heads: Sequence[str] | None = None) -> None:
        if not weights:
            raise ValueError("weights must hold at least one checkpoint")
        self.steps = sorted(int(s) for s in weights)
        self.tokens = [int(t) for t in tokens]
        self.weights = {int(s): np.stack([np.asarray(w, dtype=np.float32) for w in ws]) for s, ws in weights.items()}
        n = len(self.tokens)
        for step, w in self.weights.items():
            if w.ndim != 4 or w.shape[-2:] != (n, n):
                raise ValueError(f"weights at step {step} are {w.shape}, expected (layers, heads, {n}, {n})")
        self.num_layers, self.num_heads = self.weights[self.steps[0]].shape[:2]
        self.segment_len, self.scores = int(segment_len), {int(k): dict(v) for k, v in (scores or {}).items()}
        self.checkpoint = widgets.IntSlider(value=0, min=0, max=len(self.steps) - 1, description="Checkpoint",
                                            continuous_update=False)
        names = [(self.head_label(i), i) for i in range(self.num_layers * self.num_heads)]
        flat = dict(names)
        unknown = [h for h in (book_heads or ()) if h not in flat]
        if unknown:
            raise ValueError(f"book_heads {unknown} name no head; the heads are {list(flat)}")
        self.book_heads = [ALL_HEADS] + [flat[h] for h in (book_heads if book_heads is not None else flat)]
        self.head = widgets.Dropdown(options=[("all heads", ALL_HEADS)] + names, value=ALL_HEADS,
                                     description="Head", layout=widgets.Layout(width="14em"))
        self._step_buttons(self.checkpoint)
        super().__init__(widgets.HBox([self.checkpoint, self.previous, self.next, self.head]))
        for control in (self.checkpoint, self.head):
            control.observe(self._on_change, names="value")
        self._update()

    @classmethod
    @torch.no_grad()
    def from_models(cls, models: Mapping[int, torch.nn.Module], tokens: torch.Tensor, segment_len: int,
                    scores: Mapping[int, Mapping[str, float]] | None = None,
                    book_heads: Sequence[str] | None = None) -> InductionExplorer:
        """Build it from the model at each checkpoint, run once on ``tokens``.

        Parameters
        ----------
        models : mapping of step -> GPT
            E.g. ``{s: snapshot_model(run, s) for s in steps}``
            (:func:`attncourse.chapters.ch09_what_heads_learn.recipe.snapshot_model`).
        tokens : (n,) int tensor
            The probe.
        segment_len : int
        scores : mapping of step -> dict, optional
            The captions' values, e.g. the run's history rows by their ``"step"``.
        book_heads : sequence of str, optional
            As in the constructor.
        """
        weights = {}
        for step, model in models.items():
            _, ws = model(tokens[None].to(next(model.parameters()).device), need_weights=True)
            weights[int(step)] = [w[0].cpu().numpy() for w in ws]
        return cls(weights, tokens.tolist(), segment_len, scores, book_heads)

    def head_label(self, flat: int) -> str:
        """``"L2H3"`` for the flat index of layer 2 (1-based), head 3."""
        return f"L{flat // self.num_heads + 1}H{flat % self.num_heads + 1}"

    def _book_axes(self) -> list[BookAxis]:
        return [BookAxis(self.checkpoint), BookAxis(self.head, values=self.book_heads)]

    def _book_note(self, n_states: int) -> str:
        which = "Every checkpoint and head" if len(self.book_heads) > self.num_layers * self.num_heads \
            else "Every checkpoint, all heads and the heads named in the text"
        return (f"{which}: {n_states} settings drawn in advance from the saved weights. "
                "In JupyterLab the same explorer runs live, with every head.")

    def _update(self) -> None:
        step = self.steps[self.checkpoint.value]
        head = None if self.head.value == ALL_HEADS else int(self.head.value)
        w = self.weights[step]
        self.shown = {"step": step, "head": head,
                      "weights": w if head is None else w[head // self.num_heads, head % self.num_heads]}
        self.caption.value = self._caption()
        self._render(self._figure())

    def _segment_ticks(self, ax) -> None:
        starts = list(range(0, len(self.tokens), self.segment_len))
        ax.set_xticks(starts, [str(s) for s in starts], fontsize=7)
        ax.set_yticks(starts, [str(s) for s in starts], fontsize=7)

    def _figure(self):
        s = self.shown
        if s["head"] is None:
            fig, axes = plt.subplots(self.num_layers, self.num_heads, squeeze=False,
                                     figsize=(2.2 * self.num_heads, 2.6 * self.num_layers + 0.6))
            for layer in range(self.num_layers):
                for h in range(self.num_heads):
                    ax = axes[layer, h]
                    ax.imshow(s["weights"][layer, h], cmap="viridis", vmin=0, vmax=1)
                    ax.set_title(self.head_label(layer * self.num_heads + h), fontsize=9)
                    ax.set_xticks([])
                    ax.set_yticks([])
        else:
            fig, ax = plt.subplots(figsize=(6.4, 5.2))
            image = ax.imshow(s["weights"], cmap="viridis", vmin=0, vmax=1)
            self._segment_ticks(ax)
            ax.set_xlabel("key position")
            ax.set_ylabel("query position")
            ax.set_title(self.head_label(s["head"]), fontsize=10)
            fig.colorbar(image, ax=ax, fraction=0.046, label="attention weight")
        fig.suptitle(f"step {s['step']}: rows = queries, columns = keys;\nthe segment repeats "
                     f"every {self.segment_len} tokens", fontsize=9)
        fig.tight_layout(h_pad=1.5)   # room for the second row's titles
        return fig

    def _caption(self) -> str:
        s = self.shown
        row = self.scores.get(s["step"], {})
        parts = [f"Checkpoint at step {s['step']}"]
        if "loss_repeated" in row:
            parts.append(f"loss on the repeated tokens {row['loss_repeated']:.2f} nats")
        text = "; ".join(parts) + "."
        heads = range(self.num_layers * self.num_heads) if s["head"] is None else [s["head"]]
        cells = []
        for flat in heads:
            name = self.head_label(flat)
            if f"prefix_{name}" in row:
                cells.append(f"{name}: prefix {row[f'prefix_{name}']:.2f}, previous "
                             f"{row[f'previous_{name}']:.2f}, copying {row[f'copying_{name}']:.2f}")
        if cells:
            text += " Scores: " + "; ".join(cells) + "."
        return text
