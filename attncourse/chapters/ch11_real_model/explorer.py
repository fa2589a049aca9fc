"""The attention of every layer and head of a real language model on one prompt.

:class:`RealModelExplorer` shows the attention weights of a pretrained model
(chapter 11's SmolLM2-135M: 30 layers of 9 heads) on a prompt, with a slider over
the layers and a menu over the heads: all heads of the layer side by side, or one
head large with its tokens on both axes. The caption gives each shown head's mean
share of attention on the first token (the attention sink, Xiao et al. 2023) and on
the token just before the query (a previous-token head). A prompt that repeats
itself shows induction heads as a stripe one place right of the earlier copy's
diagonal (Olsson et al. 2022). Built from a model with :meth:`from_model`, the live
explorer also has a text box: a new prompt is run through the model at once.

References
----------
Xiao et al. (2023), "Efficient Streaming Language Models with Attention Sinks",
section 3.1 and figure 2 (attention maps of every layer of Llama-2-7B);
Olsson et al. (2022), "In-context Learning and Induction Heads", section 2.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import torch

from attncourse.widgets.base import Explorer
from attncourse.widgets.static import BookAxis

#: Value of the ``head`` dropdown that shows every head of the layer.
ALL_HEADS = -1


def token_labels(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Each token's text as a tick label: a leading space as ``␣``, a newline as ``⏎``.

    Parameters
    ----------
    tokenizer : object with ``decode(list[int]) -> str``
        E.g. :class:`~attncourse.pretrained.tokenizer.GGUFTokenizer`.
    ids : sequence of int
    """
    return [tokenizer.decode([int(i)]).replace(" ", "␣").replace("\n", "⏎") or "∅" for i in ids]


@torch.no_grad()
def attention_of(model: torch.nn.Module, ids: Sequence[int]) -> np.ndarray:
    """Every head's attention weights of ``model`` on ``ids``, computed on the written-out path.

    Parameters
    ----------
    model : attncourse.nn.gpt.GPT
        Called as ``model(tokens, need_weights=True, fast=False)``.
    ids : sequence of int, n tokens

    Returns
    -------
    (num_layers, num_heads, n, n) float32 array
        Row i is query i's weights over the keys 0..i (zeros right of the diagonal).
    """
    device = next(model.parameters()).device
    _, weights = model(torch.tensor([list(ids)], device=device), need_weights=True, fast=False)
    return torch.stack([w[0] for w in weights]).float().cpu().numpy()


class RealModelExplorer(Explorer):
    """A layer slider and a head menu over a model's attention on one prompt.

    Display the explorer by making it the last expression of a notebook cell.

    Parameters
    ----------
    weights : (num_layers, num_heads, n, n) array, or a sequence over layers of (num_heads, n, n)
        Attention weights on the prompt (:func:`attention_of`); rows are queries.
    labels : sequence of str
        The n tokens, as tick labels (:func:`token_labels`).
    book_layers : sequence of int, optional
        Layers (0-based) the book rendering pre-draws; default every layer.
    book_heads : sequence of int, optional
        Heads the book pre-draws one by one in each of ``book_layers``, besides all
        heads of the layer together (:data:`ALL_HEADS`); default none. Each is one
        frame per layer, drawn on every build of the book. In JupyterLab every layer
        and head is offered.

    Attributes
    ----------
    layer : ipywidgets.IntSlider
        The layer, 0-based.
    head : ipywidgets.Dropdown
        :data:`ALL_HEADS` or a head index, 0-based.
    shown : dict
        ``"layer"``, ``"head"`` (index or None), ``"weights"`` ((num_heads, n, n) or (n, n)),
        ``"first"`` and ``"previous"``: each shown head's mean share of attention on the
        first token and on the token before the query, over the queries 1..n-1
        ((num_heads,) arrays, or floats for one head).

    Raises
    ------
    ValueError
        If ``weights`` is not (layers, heads, n, n) with n = len(labels) >= 2, or a
        ``book_layers``/``book_heads`` entry is out of range.
    """

    book_title = "Attention of every layer and head"

    def __init__(self, weights: Any, labels: Sequence[str], book_layers: Sequence[int] | None = None,
                 book_heads: Sequence[int] = ()) -> None:
        self.model: torch.nn.Module | None = None
        self.tokenizer: Any = None
        self._set_weights(weights, labels)
        layers, heads = self.weights.shape[:2]
        self.book_layers = list(range(layers)) if book_layers is None else [int(x) for x in book_layers]
        self.book_heads = [ALL_HEADS] + [int(h) for h in book_heads]
        if not all(0 <= x < layers for x in self.book_layers):
            raise ValueError(f"book_layers {self.book_layers} must lie in 0..{layers - 1}")
        if not all(0 <= h < heads for h in self.book_heads[1:]):
            raise ValueError(f"book_heads {self.book_heads[1:]} must lie in 0..{heads - 1}")
        self.layer = widgets.IntSlider(value=0, min=0, max=layers - 1, description="Layer",
                                       continuous_update=False)
        self.head = widgets.Dropdown(options=[("all heads", ALL_HEADS)] + [(f"head {h}", h) for h in range(heads)],
                                     value=ALL_HEADS, description="Head", layout=widgets.Layout(width="14em"))
        self.prompt = widgets.Text(description="Prompt", continuous_update=False,
                                   layout=widgets.Layout(width="40em", display="none"))
        self._step_buttons(self.layer)
        super().__init__(widgets.HBox([self.layer, self.previous, self.next, self.head]), self.prompt)
        for control in (self.layer, self.head):
            control.observe(self._on_change, names="value")
        self.prompt.observe(self._on_prompt, names="value")
        self._update()

    def _set_weights(self, weights: Any, labels: Sequence[str]) -> None:
        w = np.asarray(np.stack([np.asarray(x, dtype=np.float32) for x in weights]), dtype=np.float32)
        self.labels = [str(t) for t in labels]
        n = len(self.labels)
        if w.ndim != 4 or w.shape[-2:] != (n, n) or n < 2:
            raise ValueError(f"weights are {w.shape}; expected (layers, heads, {n}, {n}) for {n} token labels "
                             "(at least 2)")
        if hasattr(self, "weights") and w.shape[:2] != self.weights.shape[:2]:
            raise ValueError(f"weights are {w.shape}; the explorer shows {self.weights.shape[:2]} layers and heads")
        self.weights = w
        rows = np.arange(1, n)
        self.first_share = w[..., 1:, 0].mean(-1)                      # (layers, heads)
        self.previous_share = w[..., rows, rows - 1].mean(-1)

    @classmethod
    def from_model(cls, model: torch.nn.Module, tokenizer: Any, prompt: str,
                   book_layers: Sequence[int] | None = None, book_heads: Sequence[int] = ()) -> RealModelExplorer:
        """Run ``model`` once on ``prompt`` and explore its attention; the text box runs new prompts.

        Parameters
        ----------
        model : attncourse.nn.gpt.GPT
            E.g. from :func:`attncourse.pretrained.load_smollm2`.
        tokenizer : object with ``encode(str) -> list[int]`` and ``decode(list[int]) -> str``
        prompt : str
            At least 2 tokens.
        book_layers, book_heads : optional
            As in the constructor.
        """
        ids = tokenizer.encode(prompt)
        explorer = cls(attention_of(model, ids), token_labels(tokenizer, ids), book_layers, book_heads)
        explorer.model, explorer.tokenizer = model, tokenizer
        with explorer._quietly():
            explorer.prompt.value = prompt
        explorer.prompt.layout.display = None
        return explorer

    def _on_prompt(self, change: dict) -> None:
        """A new prompt in the text box: run the model on it, then redraw."""
        if self._quiet or self.model is None:
            return
        ids = self.tokenizer.encode(change["new"])
        if len(ids) < 2:
            self.caption.value = "The prompt needs at least 2 tokens."
            return
        self._set_weights(attention_of(self.model, ids), token_labels(self.tokenizer, ids))
        self._update()

    def _book_axes(self) -> list[BookAxis]:
        return [BookAxis(self.layer, values=self.book_layers), BookAxis(self.head, values=self.book_heads)]

    def _book_note(self, n_states: int) -> str:
        typed = ", and runs the model on any prompt you type" if self.model is not None else ""
        return (f"{n_states} settings drawn in advance for this prompt. In JupyterLab the explorer offers "
                f"every layer and head{typed}.")

    def _update(self) -> None:
        layer = int(self.layer.value)
        head = None if self.head.value == ALL_HEADS else int(self.head.value)
        pick = slice(None) if head is None else head
        self.shown = {"layer": layer, "head": head, "weights": self.weights[layer, pick],
                      "first": self.first_share[layer, pick], "previous": self.previous_share[layer, pick]}
        self.caption.value = self._caption()
        self._render(self._figure())

    def _caption(self) -> str:
        s = self.shown
        if s["head"] is not None:
            return (f"Layer {s['layer']}, head {s['head']}: on average {s['first']:.2f} of a query's attention "
                    f"lands on the first token, {s['previous']:.2f} on the token just before it.")
        sink = int(np.sum(s["first"] > 0.5))
        return (f"Layer {s['layer']}, all {len(s['first'])} heads: {sink} put more than half of their attention "
                f"on the first token (mean share {s['first'].mean():.2f}); the strongest previous-token head is "
                f"head {int(np.argmax(s['previous']))} ({s['previous'].max():.2f}).")

    def _ticks(self, ax, rows: bool = True, cols: bool = True, fontsize: float = 7) -> None:
        n = len(self.labels)
        every = max(1, math.ceil(n / 24))   # at most about 24 labels per axis stay readable
        at = list(range(0, n, every))
        ax.set_xticks(at, [self.labels[i] for i in at] if cols else [], rotation=90, fontsize=fontsize)
        ax.set_yticks(at, [self.labels[i] for i in at] if rows else [], fontsize=fontsize)

    def _figure(self):
        s = self.shown
        if s["head"] is not None:
            fig, ax = plt.subplots(figsize=(5.6, 5.0), layout="constrained")
            image = ax.imshow(s["weights"], cmap="viridis", vmin=0, vmax=1)
            self._ticks(ax)
            ax.set_xlabel("key (attended token)")
            ax.set_ylabel("query")
            ax.set_title(f"layer {s['layer']}, head {s['head']}", fontsize=10)
            fig.colorbar(image, ax=ax, fraction=0.046, label="attention weight")
            return fig
        # All heads as one mosaic on one axes: a grid of subplots would lay out nine sets of
        # tick labels, many times the drawing time of the book's pre-drawn frames.
        weights = s["weights"]
        heads, n = weights.shape[0], weights.shape[-1]
        cols = math.ceil(math.sqrt(heads))
        rows = math.ceil(heads / cols)
        gap = max(1, n // 8)
        mosaic = np.full((rows * (n + gap) - gap, cols * (n + gap) - gap), np.nan, dtype=np.float32)
        for k in range(heads):
            r, c = divmod(k, cols)
            mosaic[r * (n + gap):r * (n + gap) + n, c * (n + gap):c * (n + gap) + n] = weights[k]
        fig, ax = plt.subplots(figsize=(7.2, 7.2 * mosaic.shape[0] / mosaic.shape[1] + 0.4))
        ax.imshow(mosaic, cmap=plt.get_cmap("viridis").with_extremes(bad="white"), vmin=0, vmax=1)
        for k in range(heads):
            r, c = divmod(k, cols)
            ax.text(c * (n + gap) + n / 2 - 0.5, r * (n + gap) - 0.7, f"head {k}", ha="center", va="bottom",
                    fontsize=8)
        # Token labels once: the queries beside the top row, the keys under the bottom row's first head.
        # A head's square is a third of the figure's width, so fewer labels than in the one-head
        # view leave room for a legible size.
        every = max(1, math.ceil(n / 16))
        at = list(range(0, n, every))
        ax.set_yticks(at, [self.labels[i] for i in at], fontsize=7)
        ax.set_xticks(at, [self.labels[i] for i in at], rotation=90, fontsize=7)
        ax.tick_params(length=1, pad=1)
        ax.set_ylim(mosaic.shape[0] - 0.5, -2.5)
        for side in ax.spines.values():
            side.set_visible(False)
        ax.set_title(f"Layer {s['layer']}: every head; rows are queries, columns keys (0 to 1)", fontsize=9,
                     pad=14)
        return fig


__all__ = ["ALL_HEADS", "RealModelExplorer", "attention_of", "token_labels"]
