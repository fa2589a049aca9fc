"""An explorer of a trained decoder-only model: causal attention per head, and generation step by step.

:class:`DecoderOnlyExplorer` generates greedily from a prompt with a
:class:`~attncourse.nn.gpt.GPT` (with its KV cache), keeping the five most
probable next characters of every step, then runs the model once on the prompt
and its continuation with ``need_weights=True``. Because attention is causal, the
weights of the first t positions do not depend on later ones, so that one pass
gives the attention of every step: the top-left t x t block. A slider walks the
steps; the figure shows each head's causal attention over the text so far and,
beside it, the candidates for the next character with their probabilities.

References
----------
Radford et al. (2018), section 3.1; Vaswani et al. (2017), section 3.2.3 (the causal mask).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import torch

from attncourse.data.vocab import Vocabulary
from attncourse.decode.generation import GenerationStep, trace_generation
from attncourse.widgets.base import Explorer
from attncourse.widgets.static import BookAxis

#: Value of the ``head`` dropdown that shows every head.
ALL_HEADS = -1


def show_char(c: str) -> str:
    """A character as a readable tick label: space, newline and tab made visible."""
    return {" ": "␣", "\n": "⏎", "\t": "⇥"}.get(c, c)


class DecoderOnlyExplorer(Explorer):
    """Pick a prompt, a layer, a head and a generation step of a trained character-level GPT.

    Display the explorer by making it the last expression of a notebook cell.

    Parameters
    ----------
    model : attncourse.nn.gpt.GPT
        Usually trained; run in evaluation mode without gradients.
    vocab : Vocabulary
        Its characters; a prompt character not in it becomes ``<unk>``.
    prompts : sequence of str
        Offered in the ``prompt`` dropdown; the first is shown first.
    steps : int
        Characters generated greedily after each prompt.
    k : int
        Candidates shown per step.

    Attributes
    ----------
    prompt : ipywidgets.Dropdown
    layer : ipywidgets.IntSlider
        1 .. number of layers.
    head : ipywidgets.Dropdown
        ``-1`` (:data:`ALL_HEADS`) or a 0-based head.
    step : ipywidgets.IntSlider
        0 .. steps - 1: the text so far is the prompt and the first ``step`` generated characters.
    traces : dict
        Prompt -> list of :class:`~attncourse.decode.generation.GenerationStep`.
    weights : dict
        Prompt -> list over layers of (num_heads, n, n) NumPy arrays, n = prompt length + steps.
    shown : dict
        ``"prompt"``, ``"layer"`` (0-based), ``"head"`` (0-based or None), ``"step"``,
        ``"text"`` (the characters so far), ``"weights"`` ((heads, t, t) or (t, t)),
        ``"candidates"`` (list of (character, probability)), ``"chosen"``.

    Notes
    -----
    The book (no kernel) shows :meth:`to_html`: every prompt, layer and step with all heads
    together, drawn in advance (the single-head views are live only, to keep the page small).

    Raises
    ------
    ValueError
        If ``prompts`` is empty or holds an empty string, or ``steps``/``k`` is below 1.
    """

    book_title = "Decoder-only attention and generation explorer"

    def __init__(self, model: Any, vocab: Vocabulary, prompts: Sequence[str], steps: int = 6, k: int = 5) -> None:
        prompts = (prompts,) if isinstance(prompts, str) else tuple(prompts)
        if not prompts or any(not p for p in prompts):
            raise ValueError("prompts must hold at least one non-empty string")
        if int(steps) < 1 or int(k) < 1:
            raise ValueError(f"steps and k must be at least 1, got steps={steps}, k={k}")
        self.model, self.vocab, self.steps, self.k = model, vocab, int(steps), int(k)
        self.num_layers, self.num_heads = len(model.blocks), model.blocks[0].attn.num_heads
        self.traces: dict[str, list[GenerationStep]] = {}
        self.weights: dict[str, list[np.ndarray]] = {}
        self.texts: dict[str, list[str]] = {}
        for prompt in prompts:
            self._run(prompt)
        self.prompt = widgets.Dropdown(options=prompts, value=prompts[0], description="Prompt",
                                       layout=widgets.Layout(width="26em"))
        self.layer = widgets.IntSlider(value=self.num_layers, min=1, max=self.num_layers, description="Layer",
                                       continuous_update=False)
        self.head = widgets.Dropdown(
            options=[("all heads", ALL_HEADS)] + [(f"head {h + 1}", h) for h in range(self.num_heads)],
            value=ALL_HEADS, description="Head", layout=widgets.Layout(width="14em"))
        self.step = widgets.IntSlider(value=0, min=0, max=self.steps - 1, description="Step",
                                      continuous_update=False)
        self._step_buttons(self.step)
        super().__init__(widgets.HBox([self.prompt, self.layer, self.head]),
                         widgets.HBox([self.step, self.previous, self.next]))
        for control in (self.prompt, self.layer, self.head, self.step):
            control.observe(self._on_change, names="value")
        self._update()

    def _book_axes(self) -> list[BookAxis]:
        return [BookAxis(self.prompt), BookAxis(self.layer), BookAxis(self.head, values=[ALL_HEADS]),
                BookAxis(self.step)]

    def _book_note(self, n_states: int) -> str:
        return (f"Every prompt, layer and step with all heads: {n_states} settings drawn in advance from the "
                "trained model. In JupyterLab the explorer also shows single heads, live.")

    @torch.no_grad()
    def _run(self, prompt: str) -> None:
        device = next(self.model.parameters()).device
        ids = torch.tensor(self.vocab.encode(list(prompt)), dtype=torch.long)
        trace = trace_generation(self.model, ids, self.steps, self.k)
        full = torch.cat([ids, torch.tensor([s.token for s in trace])])[None].to(device)
        _, weights = self.model(full, need_weights=True)
        self.traces[prompt] = trace
        self.weights[prompt] = [w[0].cpu().numpy() for w in weights]
        self.texts[prompt] = [self.vocab.token_of(int(i)) for i in full[0]]

    def _update(self) -> None:
        prompt, layer, step = self.prompt.value, self.layer.value - 1, self.step.value
        head = None if self.head.value == ALL_HEADS else int(self.head.value)
        n = len(prompt) + step
        block = self.weights[prompt][layer][:, :n, :n]
        current = self.traces[prompt][step]
        self.shown = {
            "prompt": prompt, "layer": layer, "head": head, "step": step,
            "text": self.texts[prompt][:n],
            "weights": block if head is None else block[head],
            "candidates": [(self.vocab.token_of(i), p) for i, p in zip(current.top_ids, current.top_probs)],
            "chosen": self.vocab.token_of(current.token),
        }
        self.caption.value = self._caption()
        self._render(self._figure())

    def _figure(self):
        s = self.shown
        labels = [show_char(c) for c in s["text"]]
        heads = list(range(self.num_heads)) if s["head"] is None else [s["head"]]
        cols = min(4, len(heads))
        rows = int(np.ceil(len(heads) / cols))
        fig = plt.figure(figsize=(2.6 * cols + 2.8, 2.6 * rows + 0.3))
        grid = fig.add_gridspec(rows, cols + 1, width_ratios=[1] * cols + [0.9])
        weights = s["weights"] if s["head"] is None else s["weights"][None]
        few = len(labels) <= 32
        for j, h in enumerate(heads):
            ax = fig.add_subplot(grid[j // cols, j % cols])
            ax.imshow(weights[j], cmap="viridis", vmin=0, vmax=1)
            ax.set_title(f"head {h + 1}", fontsize=9)
            if few and len(heads) == 1:
                ax.set_xticks(range(len(labels)), labels, fontsize=7)
                ax.set_yticks(range(len(labels)), labels, fontsize=7)
            else:
                ax.set_xticks([])
                ax.set_yticks([])
        bars = fig.add_subplot(grid[:, cols])
        chars = [show_char(c) for c, _ in s["candidates"]][::-1]
        probs = [p for _, p in s["candidates"]][::-1]
        colors = ["tab:orange" if c == show_char(s["chosen"]) else "tab:blue" for c in chars]
        bars.barh(range(len(chars)), probs, color=colors)
        bars.set_yticks(range(len(chars)), [repr(c) for c in chars])
        bars.set_xlim(0, 1)
        bars.set_title("next character", fontsize=9)
        bars.set_xlabel("probability")
        fig.suptitle(f"layer {s['layer'] + 1}: rows = queries, columns = keys (upper triangle masked)",
                     fontsize=9)
        fig.tight_layout()
        return fig

    def _caption(self) -> str:
        s = self.shown
        text = "".join(s["text"])
        heads = "all heads" if s["head"] is None else f"head {s['head'] + 1} of {self.num_heads}"
        top = ", ".join(f"{html.escape(repr(c))} {p:.2f}" for c, p in s["candidates"])
        return (f"Text so far: <code>{html.escape(repr(text))}</code>. Layer {s['layer'] + 1} of "
                f"{self.num_layers}, {heads}. Step {s['step'] + 1} of {self.steps}: the model picks "
                f"<b>{html.escape(repr(s['chosen']))}</b> (greedy); top {self.k}: {top}.")
