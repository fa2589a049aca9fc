"""Chapter 13's explorers: a masked model filling in a span, and what a ViT's ``[CLS]`` attends to.

:class:`FillInExplorer` masks the first characters of a chosen word of a sentence and
shows the masked language model's top guesses for each masked character
(:func:`~attncourse.chapters.ch13_encoders.recipe.fill_in`). :class:`ViTAttentionExplorer`
shows, for a chosen digit and layer, the ``[CLS]`` row of every head's weights over the
patches, their mean over heads, and the attention rollout up to that layer (Abnar and
Zuidema 2020; :func:`~attncourse.chapters.ch13_encoders.vit.attention_rollout`).

References
----------
Devlin et al. (2019), section 3.1; Dosovitskiy et al. (2021), figure 6; Abnar, Zuidema (2020).
"""

from __future__ import annotations

from collections.abc import Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import torch

from attncourse.chapters.ch13_encoders.recipe import fill_in
from attncourse.chapters.ch13_encoders.vit import VisionTransformer, attention_rollout
from attncourse.data.vocab import Vocabulary
from attncourse.nn.gpt import GPT
from attncourse.widgets.base import Explorer
from attncourse.widgets.static import BookAxis


class FillInExplorer(Explorer):
    """A menu of (sentence, word) and a slider over how many of the word's characters are masked.

    Parameters
    ----------
    model : GPT
        A masked language model (``causal=False``).
    vocab : Vocabulary
    sentences : sequence of (str, int)
        Each sentence and the index of the character where the masked span starts.
    max_span : int
        The slider runs over 1 .. ``max_span`` masked characters.
    top : int
        Guesses shown per masked character.

    Attributes
    ----------
    sentence : ipywidgets.Dropdown
    span : ipywidgets.IntSlider
    shown : dict
        ``"text"``, ``"start"``, ``"length"``, ``"truth"`` (the masked characters),
        ``"guesses"`` (per masked character, [(char, probability), ...]) and ``"right"``
        (how many masked characters the top guess gets right).

    Raises
    ------
    ValueError
        If no sentence is given, or a span of ``max_span`` runs past its sentence.
    """

    book_title = "Fill-in explorer"

    def __init__(self, model: GPT, vocab: Vocabulary, sentences: Sequence[tuple[str, int]], max_span: int = 4,
                 top: int = 5) -> None:
        if not sentences:
            raise ValueError("FillInExplorer needs at least one (sentence, start)")
        for text, start in sentences:
            if not 0 <= start <= len(text) - max_span:
                raise ValueError(f"a span of max_span={max_span} from {start} runs past {text!r}")
        self.model, self.vocab, self.top = model.eval(), vocab, int(top)
        self.sentences = [(str(t), int(s)) for t, s in sentences]
        options = [(f"{t[:s]}[{t[s:s + max_span]}]{t[s + max_span:]}", i) for i, (t, s) in enumerate(self.sentences)]
        self.sentence = widgets.Dropdown(options=options, value=0, description="sentence",
                                         layout=widgets.Layout(width="44em"))
        self.span = widgets.IntSlider(value=1, min=1, max=int(max_span), description="masked")
        self._step_buttons(self.span)
        super().__init__(self.sentence, widgets.HBox([self.previous, self.span, self.next]))
        self.sentence.observe(self._on_change, names="value")
        self.span.observe(self._on_change, names="value")
        self._update()

    def _book_axes(self) -> list[BookAxis]:
        return [BookAxis(self.sentence, label="sentence"), BookAxis(self.span, label="masked characters")]

    def _update(self) -> None:
        text, start = self.sentences[self.sentence.value]
        length = int(self.span.value)
        guesses = fill_in(self.model, self.vocab, text, start, length, self.top)
        truth = text[start:start + length]
        right = sum(g[0][0] == c for g, c in zip(guesses, truth))
        self.shown = {"text": text, "start": start, "length": length, "truth": truth, "guesses": guesses,
                      "right": right}
        fig, axes = plt.subplots(1, length, figsize=(2.3 * length + 0.6, 2.6), squeeze=False)
        for k, (ax, row, char) in enumerate(zip(axes[0], guesses, truth)):
            labels = [repr(c)[1:-1] if c != " " else "space" for c, _ in row]
            probs = [p for _, p in row]
            colors = ["tab:green" if c == char else "tab:gray" for c, _ in row]
            ax.barh(np.arange(len(row))[::-1], probs, color=colors)
            ax.set_yticks(np.arange(len(row))[::-1], labels)
            ax.set(xlim=(0, 1), xlabel="probability", title=f"masked char {k + 1}: {char!r}")
        fig.suptitle("top guesses (green: the true character)", fontsize=10)
        fig.tight_layout()
        masked = text[:start] + "▢" * length + text[start + length:]
        self.caption.value = (f"<code>{masked}</code>: {length} character(s) masked at once; the top guess "
                              f"is right for <b>{right} of {length}</b> (true: <code>{truth}</code>).")
        self._render(fig)


class ViTAttentionExplorer(Explorer):
    """A menu over digits and a slider over layers: ``[CLS]``'s attention per head, its mean and the rollout.

    Parameters
    ----------
    model : VisionTransformer
        Trained, without registers (the maps are over the patches).
    images : (n, image_size, image_size) tensor
    labels : (n,) tensor

    Attributes
    ----------
    digit : ipywidgets.Dropdown
    layer : ipywidgets.IntSlider
        1 .. number of layers.
    shown : dict
        ``"heads"`` (num_heads, grid, grid): ``[CLS]``'s weights on the patches per head;
        ``"mean"`` (grid, grid) their mean; ``"rollout"`` (grid, grid) rollout to this layer;
        ``"cls_self"`` (num_heads,) the weight ``[CLS]`` puts on itself; ``"predicted"``.

    Raises
    ------
    ValueError
        If the model has registers, or ``images`` and ``labels`` differ in length.
    """

    book_title = "ViT attention explorer"

    def __init__(self, model: VisionTransformer, images: torch.Tensor, labels: torch.Tensor) -> None:
        if model.num_registers:
            raise ValueError(f"the explorer maps patches only: model has {model.num_registers} registers")
        if len(images) != len(labels) or len(images) == 0:
            raise ValueError(f"images ({len(images)}) and labels ({len(labels)}) must be as many, at least one")
        self.model, self.images, self.labels = model.eval(), images, labels
        with torch.no_grad():
            self.logits, self.weights = model(images, need_weights=True)
        self.digit = widgets.Dropdown(options=[(f"test image {i} (a {int(y)})", i) for i, y in enumerate(labels)],
                                      value=0, description="digit")
        self.layer = widgets.IntSlider(value=1, min=1, max=len(model.blocks), description="layer")
        self._step_buttons(self.layer)
        super().__init__(widgets.HBox([self.digit, self.previous, self.layer, self.next]))
        self.digit.observe(self._on_change, names="value")
        self.layer.observe(self._on_change, names="value")
        self._update()

    def _book_axes(self) -> list[BookAxis]:
        return [BookAxis(self.digit, label="digit"), BookAxis(self.layer, label="layer")]

    def _update(self) -> None:
        i, layer = int(self.digit.value), int(self.layer.value)
        grid = int(round(self.model.num_patches ** 0.5))
        w = self.weights[layer - 1][i]                          # (heads, T, T)
        heads = w[:, 0, 1:].reshape(-1, grid, grid).numpy()
        rollout = attention_rollout([x[i:i + 1] for x in self.weights[:layer]])[0, 0, 1:]
        self.shown = {"heads": heads, "mean": heads.mean(0), "rollout": rollout.reshape(grid, grid).numpy(),
                      "cls_self": w[:, 0, 0].numpy(), "predicted": int(self.logits[i].argmax())}
        panels = [("image", self.images[i].numpy())] + [(f"head {h + 1}", m) for h, m in enumerate(heads)]
        panels += [("mean of heads", self.shown["mean"]), (f"rollout, layers 1-{layer}", self.shown["rollout"])]
        fig, axes = plt.subplots(1, len(panels), figsize=(1.6 * len(panels), 2.1))
        for ax, (title, image) in zip(axes, panels):
            ax.imshow(image, cmap="gray_r" if title == "image" else "viridis")
            ax.set_title(title, fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
        fig.tight_layout()
        self.caption.value = (
            f"Test image {i}, a <b>{int(self.labels[i])}</b> (predicted {self.shown['predicted']}); layer "
            f"{layer}: where <code>[CLS]</code> looks among the {grid}x{grid} patches, per head (it keeps "
            f"{self.shown['cls_self'].mean():.0%} on itself on average), and the rollout through layers "
            f"1-{layer}.")
        self._render(fig)


__all__ = ["FillInExplorer", "ViTAttentionExplorer"]
