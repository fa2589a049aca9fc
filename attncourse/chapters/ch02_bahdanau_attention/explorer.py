"""An interactive walk through a trained attention model's greedy translation, one output step at a time.

:class:`BahdanauStepper` translates an example sentence greedily with a trained
:class:`attncourse.nn.rnn.Seq2Seq` (``attention="bahdanau"``) and shows, for the
chosen output step t, the three numbers of Bahdanau attention: the alignment
scores e_tj, the weights alpha_tj and the context vector c_t (from
:func:`attncourse.viz.seq2seq.plot_bahdanau_step`), above the alignment of the
whole translation with row t framed (:func:`attncourse.viz.seq2seq.plot_alignment`).

The step numbers are recomputed on the teaching path: for every step the
stepper keeps the decoder state s_{t-1} the model was in *before* the step and
calls :func:`attncourse.functional.additive_attention_step` with the model's own
W_a, U_a, v_a in float64. It checks that these weights equal the ones the model
used (``decode_step``) to 1e-5, so what the learner reads is what the model did.

References
----------
Bahdanau, Cho, Bengio (2015), "Neural Machine Translation by Jointly Learning to
Align and Translate", ICLR, section 3.1, equations (4)-(6), appendix A.1.2.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.figure import Figure

from attncourse.data.pairs import detokenize, tokenize
from attncourse.data.vocab import Vocabulary
from attncourse.functional import AdditiveStepTrace, additive_attention_step
from attncourse.viz.seq2seq import (
    bahdanau_step_size,
    plot_alignment,
    plot_bahdanau_step,
)
from attncourse.widgets.base import Explorer
from attncourse.widgets.explorer import source_sentences
from attncourse.widgets.static import BookAxis

#: Largest difference allowed between the teaching path's weights and the model's.
ATOL = 1e-5


def _as_float64(tensor: torch.Tensor | None) -> np.ndarray | None:
    return None if tensor is None else tensor.detach().cpu().double().numpy()


class BahdanauStepper(Explorer):
    """Step through the greedy translation of a trained Bahdanau attention model.

    Pick an example source sentence; the model translates it greedily (the
    most probable token at every step, until ``<eos>`` or ``max_len`` tokens).
    The slider ``t`` picks an output step: the figure shows the alignment
    scores, attention weights and context vector of that step, and below them
    the weights of every step with row t framed. The step that outputs
    ``<eos>`` is included, since it attends like every other step.

    Display the stepper by making it the last expression of a notebook cell.

    Parameters
    ----------
    model : attncourse.nn.rnn.Seq2Seq
        A model with attention (``model.attention`` an
        :class:`attncourse.nn.additive.AdditiveAttention`), usually trained.
        It is run in evaluation mode without gradients; its training flag is
        restored afterwards.
    src_vocab, tgt_vocab : Vocabulary
        The vocabularies the model was trained with; unknown source tokens
        become ``<unk>``.
    examples : sequence of str
        Source sentences offered in the ``example`` dropdown; the first is shown first.
    level : {"word", "char"}
        How to split the examples into tokens (:func:`attncourse.data.pairs.tokenize`).
    max_len : int
        Most output steps, ``<eos>`` included.

    Attributes
    ----------
    example : ipywidgets.Dropdown
        The source sentence.
    t : ipywidgets.IntSlider
        The output step t, 1..T where T is the number of decoding steps.
    previous, next : ipywidgets.Button
        Move one step back or forward; nothing happens past the first or last step.
    caption : ipywidgets.HTML
        What happens at step t, with its numbers.
    out : ipywidgets.Output
        Holds the figure.
    widget : ipywidgets.VBox
        The whole explorer.
    src_tokens : list of str, length src_len
        Tokens of the current example, ending with ``"<eos>"``: the model reads the
        source's end marker as in training (and as ``decoding.translate`` feeds it);
        without it a trained model does not know the source is over, and may not stop.
    tokens_out : list of str, length T
        The output token of every decoding step; the last is ``"<eos>"`` if the
        model stopped before ``max_len``.
    translation : str
        The output without ``<eos>``, joined at ``level``.
    traces : list of AdditiveStepTrace, length T
        The teaching path's trace of every step: ``s_prev (hidden_dim,)``,
        ``h (src_len, key_dim)``, ``scores (src_len,)``, ``weights (src_len,)``,
        ``context (key_dim,)``, ...
    attention : ndarray, (T, src_len)
        The weights the model itself used at every step (from ``decode_step``).
    figure : matplotlib.figure.Figure
        The figure on display; closed in pyplot once shown, so none pile up.
    shown : dict
        What is on display: ``"t"`` (1-based step), ``"output_token"``,
        ``"weights"`` (src_len,), ``"scores"`` (src_len,) and ``"context"``
        (key_dim,), all taken from ``traces[t - 1]``.

    Notes
    -----
    The book (no kernel) shows :meth:`to_html`: every output step of the
    greedy translation of every example, drawn in advance.

    Raises
    ------
    ValueError
        If the model has no attention, ``examples`` is empty, an example has no
        token, or ``max_len < 1``.
    RuntimeError
        If the teaching path's weights differ from the model's by more than
        1e-5 (the model's attention is not the additive attention of the paper).

    References
    ----------
    Bahdanau et al. (2015), section 3.1, equations (5)-(6); appendix A.1.2.
    """

    def __init__(
        self,
        model: Any,
        src_vocab: Vocabulary,
        tgt_vocab: Vocabulary,
        examples: Sequence[str],
        level: str = "word",
        max_len: int = 40,
    ) -> None:
        if getattr(model, "attention", None) is None:
            raise ValueError(
                "this model has no attention (model.attention is None), so there are no weights to "
                "step through; build it with Seq2Seq(..., attention='bahdanau')"
            )
        examples = source_sentences(examples, level, "examples")
        if max_len < 1:
            raise ValueError(f"max_len must be at least 1, got {max_len}")
        self.model, self.src_vocab, self.tgt_vocab = model, src_vocab, tgt_vocab
        self.level, self.max_len = level, int(max_len)

        self.example = widgets.Dropdown(options=examples, value=examples[0], description="Example",
                                        layout=widgets.Layout(width="36em"))
        self.t = widgets.IntSlider(value=1, min=1, max=1, description="Step t", continuous_update=False)
        self._step_buttons(self.t)
        super().__init__(self.example, widgets.HBox([self.previous, self.t, self.next]))

        self.src_tokens: list[str] = []
        self.tokens_out: list[str] = []
        self.translation = ""
        self.traces: list[AdditiveStepTrace] = []
        self.attention = np.zeros((0, 0))

        self._set_example(self.example.value)
        self.example.observe(self._on_example, names="value")
        self.t.observe(self._on_change, names="value")
        self._update()

    book_title = "Bahdanau attention stepper"

    def _book_axes(self) -> list[BookAxis]:
        return [BookAxis(self.example), BookAxis(self.t)]

    def _book_note(self, n_states: int) -> str:
        return (f"Every output step of the greedy translation of each example ({n_states} steps, drawn "
                "in advance from the trained model). In JupyterLab the stepper runs the model live.")

    # ------------------------------------------------------------------ decoding

    def _translate(self, text: str) -> None:
        """Greedy decoding of one sentence, keeping s_{t-1} of every step, then one trace per step."""
        model, vocab = self.model, self.tgt_vocab
        words = tokenize(text, self.level)
        self.src_tokens = words + [Vocabulary.EOS]
        device = next(model.parameters()).device
        src = torch.tensor([self.src_vocab.encode(words, add_eos=True)], dtype=torch.long, device=device)
        src_mask = torch.ones_like(src, dtype=torch.bool)
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                enc = model.encode(src, src_mask)
                state = model.init_state(enc)
                prev = torch.full((1,), vocab.bos_id, dtype=torch.long, device=device)
                states_before, weights, ids = [], [], []
                for _ in range(self.max_len):
                    states_before.append(_as_float64(state[0]))
                    logits, state, step_weights = model.decode_step(prev, state, enc)
                    prev = logits.argmax(dim=-1)
                    weights.append(_as_float64(step_weights[0]))
                    ids.append(int(prev[0]))
                    if ids[-1] == vocab.eos_id:
                        break
                h = _as_float64(enc.states[0, : len(self.src_tokens)])
        finally:
            model.train(was_training)

        attn = model.attention
        w_a, u_a, v_a, b = (_as_float64(p) for p in (attn.w_a, attn.u_a, attn.v_a, getattr(attn, "b_a", None)))
        mask = np.ones(len(self.src_tokens), dtype=bool)
        self.traces = [additive_attention_step(s_prev, h, w_a, u_a, v_a, b, mask) for s_prev in states_before]
        self.attention = np.stack(weights)
        gap = float(np.max(np.abs(np.stack([tr.weights for tr in self.traces]) - self.attention)))
        if gap > ATOL:
            raise RuntimeError(
                f"the teaching path's weights differ from the model's by {gap:.2e} (more than {ATOL}); "
                "the model's attention is not additive_attention_step with w_a, u_a, v_a, b_a"
            )
        self.tokens_out = [vocab.token_of(i) for i in ids]
        words = self.tokens_out[:-1] if ids[-1] == vocab.eos_id else self.tokens_out
        self.translation = detokenize(words, self.level)

    def _set_example(self, text: str) -> None:
        self._translate(text)
        # Quiet while the slider's range is replaced, so an example change redraws once.
        with self._quietly():
            self.t.value = 1
            self.t.max = len(self.tokens_out)

    # ------------------------------------------------------------------ events

    def _on_example(self, change: dict) -> None:
        self._set_example(change["new"])
        self._update()

    def _update(self) -> None:
        t = self.t.value
        trace = self.traces[t - 1]
        token = self.tokens_out[t - 1]
        self.previous.disabled = t == self.t.min
        self.next.disabled = t == self.t.max
        self.shown = {
            "t": t,
            "output_token": token,
            "weights": trace.weights,
            "scores": trace.scores,
            "context": trace.context,
        }
        self.caption.value = self._caption(t, trace, token)
        self._render(self._draw(t, trace, token))

    def _draw(self, t: int, trace: AdditiveStepTrace, token: str) -> Figure:
        """The step's three panels on top, the whole alignment with row t framed below."""
        step_w, step_h = bahdanau_step_size(len(self.src_tokens), trace.context.shape[0])
        n_out = len(self.tokens_out)
        align_w, align_h = 2.0 + 0.55 * len(self.src_tokens), 1.5 + 0.45 * n_out
        fig = plt.figure(figsize=(max(step_w, align_w), step_h + align_h), layout="constrained")
        top, bottom = fig.subfigures(2, 1, height_ratios=[step_h, align_h])
        plot_bahdanau_step(trace, self.src_tokens, step_label=f"{t} of {n_out}", out_token=token, fig=top)
        plot_alignment(self.attention, self.src_tokens, self.tokens_out, ax=bottom.subplots(),
                       highlight=t, title=f"All {n_out} steps of the translation (step {t} framed)")
        return fig

    def _caption(self, t: int, trace: AdditiveStepTrace, token: str) -> str:
        src = self.src_tokens
        best = int(np.argmax(trace.weights))
        state = "s<sub>0</sub>, the initial state," if t == 1 else f"s<sub>{t - 1}</sub>"
        end = " and stops" if token == self.tgt_vocab.EOS else ""
        return (
            f"<b>Step {t} of {len(self.tokens_out)}.</b> The decoder state {state} scores every source "
            f"token: e<sub>{t}j</sub> = v<sub>a</sub><sup>T</sup> tanh(W<sub>a</sub> s<sub>{t - 1}</sub> + "
            f"U<sub>a</sub> h<sub>j</sub>). The softmax turns the {len(src)} scores into weights that sum "
            f"to 1; the most weight, {trace.weights[best]:.2f}, goes to '{html.escape(src[best])}' "
            f"(position {best + 1}). The context c<sub>{t}</sub> = &Sigma;<sub>j</sub> &alpha;<sub>{t}j</sub> "
            f"h<sub>j</sub> ({trace.context.shape[0]} numbers) is read with s<sub>{t - 1}</sub>, and the "
            f"decoder outputs '{html.escape(token)}'{end}. "
            f"Full output: <i>{html.escape(self.translation)}</i>"
        )


__all__ = ["BahdanauStepper"]
