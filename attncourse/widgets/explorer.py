"""An explorer of a trained Transformer's attention: every kind, layer and head.

Source: Vaswani et al. (2017), "Attention Is All You Need", section 3.2.3.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets
import numpy as np
import torch

from attncourse.data.pairs import detokenize, tokenize
from attncourse.data.vocab import Vocabulary
from attncourse.decode.search import greedy_decode
from attncourse.viz.transformer import ATTENTION_KINDS, plot_attention_maps
from attncourse.widgets.base import Explorer
from attncourse.widgets.static import BookAxis

#: Labels of the ``kind`` dropdown.
KIND_LABELS: dict[str, str] = {
    "encoder_self": "encoder self-attention",
    "decoder_self": "decoder self-attention (masked)",
    "cross": "cross-attention",
}
#: Value of the ``head`` dropdown that shows every head.
ALL_HEADS = -1


def source_sentences(texts: str | Sequence[str], level: str, name: str = "sources") -> tuple[str, ...]:
    """The source sentences a translation explorer offers; one string is one sentence.

    Raises ValueError if there is no sentence, or one has no token at ``level``.
    """
    if isinstance(texts, str):
        texts = [texts]
    texts = tuple(texts)
    if not texts:
        raise ValueError(f"{name} is empty: give at least one source sentence")
    for text in texts:
        if not tokenize(text, level):
            raise ValueError(f"{name.removesuffix('s')} {text!r} has no token at level {level!r}")
    return texts


class AttentionExplorer(Explorer):
    """Pick an example, a kind of attention, a layer and a head of a trained Transformer.

    ``layer`` and ``head`` are 1-based (default: the last layer, all heads); ``max_len``
    counts output tokens, ``<eos>`` included. ``shown["weights"]`` is (num_heads, q_len,
    k_len) for all heads, (q_len, k_len) for one. Raises ValueError if ``sources`` is
    empty, a source has no token, ``kind`` is unknown, or ``max_len``, ``layer`` or
    ``head`` is out of range. Source: Vaswani et al. (2017), section 3.2.3.
    """

    def __init__(
        self,
        model: Any,
        src_vocab: Vocabulary,
        tgt_vocab: Vocabulary,
        sources: Sequence[str],
        level: str = "word",
        max_len: int = 50,
        kind: str = "cross",
        layer: int | None = None,
        head: int | None = None,
    ) -> None:
        sources = source_sentences(sources, level)
        if kind not in ATTENTION_KINDS:
            raise ValueError(f"kind must be one of {ATTENTION_KINDS}, got {kind!r}")
        if int(max_len) < 1:
            raise ValueError(f"max_len must be at least 1, got {max_len}")
        self.model, self.src_vocab, self.tgt_vocab = model, src_vocab, tgt_vocab
        self.level, self.max_len = level, int(max_len)
        self.num_layers = {"encoder_self": len(model.encoder_layers), "decoder_self": len(model.decoder_layers),
                           "cross": len(model.decoder_layers)}
        self.num_heads = int(model.config["num_heads"])
        first_layer = self.num_layers[kind] if layer is None else int(layer)
        if not 1 <= first_layer <= self.num_layers[kind]:
            raise ValueError(f"layer must lie in 1..{self.num_layers[kind]} for {kind}, got {layer}")
        if head is not None and not 1 <= int(head) <= self.num_heads:
            raise ValueError(f"head must lie in 1..{self.num_heads} or be None (all heads), got {head}")

        self.example = widgets.Dropdown(options=sources, value=sources[0], description="Example",
                                        layout=widgets.Layout(width="32em"))
        self.kind = widgets.Dropdown(options=[(KIND_LABELS[k], k) for k in ATTENTION_KINDS], value=kind,
                                     description="Attention", layout=widgets.Layout(width="24em"))
        self.layer = widgets.IntSlider(value=first_layer, min=1, max=self.num_layers[kind], description="Layer",
                                       continuous_update=False)
        self.head = widgets.Dropdown(
            options=[("all heads", ALL_HEADS)] + [(f"head {h + 1}", h) for h in range(self.num_heads)],
            value=ALL_HEADS if head is None else int(head) - 1, description="Head",
            layout=widgets.Layout(width="14em"))
        super().__init__(widgets.HBox([self.example, self.kind]), widgets.HBox([self.layer, self.head]))

        self.src_tokens: list[str] = []
        self.tgt_tokens: list[str] = []
        self.translation = ""
        self.maps: dict[str, list[np.ndarray]] = {}

        self._translate(self.example.value)
        self.example.observe(self._on_example, names="value")
        self.kind.observe(self._on_kind, names="value")
        self.layer.observe(self._on_change, names="value")
        self.head.observe(self._on_change, names="value")
        self._update()

    book_title = "Transformer attention explorer"

    def _book_axes(self) -> list[BookAxis]:
        return [BookAxis(self.example), BookAxis(self.kind), BookAxis(self.layer), BookAxis(self.head)]

    def _book_note(self, n_states: int) -> str:
        return (f"Every example, kind of attention, layer and head: {n_states} settings drawn in advance "
                "from the trained model. In JupyterLab the explorer runs the model live.")

    # ------------------------------------------------------------------ model

    def _translate(self, text: str) -> None:
        """Greedy translation of ``text``, then its attention maps (source, <bos> + output)."""
        tokens = tokenize(text, self.level)
        device = next(self.model.parameters()).device
        src = torch.tensor([self.src_vocab.encode(tokens, add_eos=True)], dtype=torch.long, device=device)
        src_mask = torch.ones_like(src, dtype=torch.bool)
        ids, _ = greedy_decode(self.model, src, src_mask, max_len=self.max_len,
                               bos_id=self.tgt_vocab.bos_id, eos_id=self.tgt_vocab.eos_id)
        output = [self.tgt_vocab.token_of(i) for i in ids[0]]
        tgt_in = torch.tensor([[self.tgt_vocab.bos_id] + ids[0]], dtype=torch.long, device=device)
        maps = self.model.attention_maps(src, src_mask, tgt_in)
        self.maps = {k: [w.detach().cpu().numpy() for w in v] for k, v in maps.items()}
        # What the encoder read: a token missing from the vocabulary was read as <unk>.
        self.src_tokens = [t if t in self.src_vocab else Vocabulary.UNK for t in tokens] + [Vocabulary.EOS]
        self.tgt_tokens = [Vocabulary.BOS] + output
        self.translation = detokenize(output, self.level)

    # ------------------------------------------------------------------ events

    def _on_example(self, change: dict) -> None:
        self._translate(change["new"])
        if not self._quiet:  # the book walk sets controls quietly and draws once per state
            self._update()

    def _on_kind(self, change: dict) -> None:
        n = self.num_layers[change["new"]]
        # Quiet while the layer slider's range is replaced, so one kind change redraws once.
        with self._quietly():
            self.layer.max = n
            self.layer.value = min(self.layer.value, n)
        if not self._quiet:
            self._update()

    def _update(self) -> None:
        kind, layer = self.kind.value, self.layer.value - 1
        head = None if self.head.value == ALL_HEADS else int(self.head.value)
        maps = self.maps[kind][layer][0]
        q_tokens = self.src_tokens if kind == "encoder_self" else self.tgt_tokens
        k_tokens = self.tgt_tokens if kind == "decoder_self" else self.src_tokens
        self.shown = {
            "example": self.example.value,
            "kind": kind,
            "layer": layer,
            "head": head,
            "weights": maps if head is None else maps[head],
            "q_tokens": list(q_tokens),
            "k_tokens": list(k_tokens),
            "translation": self.translation,
        }
        self.caption.value = self._caption()
        self._render(plot_attention_maps(self.maps, kind, layer, 0, self.src_tokens, self.tgt_tokens, head=head))

    def _caption(self) -> str:
        s = self.shown
        source = detokenize(tokenize(s["example"], self.level), self.level)
        what = {
            "encoder_self": "each source token (row) looks at the source tokens (columns)",
            "decoder_self": ("each decoder input (row) looks at itself and the inputs before it; the mask "
                             "keeps every weight above the diagonal at exactly 0"),
            "cross": ("the decoder input in each row, which predicts the next output token, looks at the "
                      "source tokens (columns)"),
        }[s["kind"]]
        heads = "all heads" if s["head"] is None else f"head {s['head'] + 1} of {self.num_heads}"
        return (
            f"<b>{html.escape(source)}</b> &rarr; <b>{html.escape(self.translation)}</b> (greedy). "
            f"{KIND_LABELS[s['kind']].capitalize()}, layer {s['layer'] + 1} of {self.num_layers[s['kind']]}, "
            f"{heads}: {what}. Every row sums to 1."
        )
