"""An interactive walk through the six steps of self-attention.

:class:`SelfAttentionStepper` lets a learner pick a sentence and a query token
and step through project, score, scale, softmax, weight and sum, with the
static figure of each step (from :func:`attncourse.viz.plot_step`) and a caption
that states what happens and the numbers that matter. It is a companion to the
static figures, never a replacement: every chapter shows the figure as well.

References
----------
Vaswani et al. (2017), "Attention Is All You Need", section 3.2.1, equation (1).
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import ipywidgets as widgets
import numpy as np

from attncourse.chapters.ch04_self_attention.figures import plot_step
from attncourse.data import SENTENCES, embed, projections, tokenize
from attncourse.functional import STEPS, SelfAttentionTrace, self_attention_trace
from attncourse.widgets.base import (  # noqa: F401  (_in_kernel: kept importable from here)
    Explorer,
    _in_kernel,
)
from attncourse.widgets.static import BookAxis

#: The trace field each step's figure is mainly about; it becomes ``shown["matrix"]``.
MAIN_FIELD: dict[str, str] = {
    "project": "q",
    "score": "scores",
    "scale": "scaled_scores",
    "softmax": "weights",
    "weight": "weighted_values",
    "sum": "output",
}


def _vector(values: np.ndarray) -> str:
    return "[" + ", ".join(f"{v:.2f}" for v in np.ravel(values)) + "]"


def _per_token(tokens: Sequence[str], values: np.ndarray) -> str:
    return ", ".join(f"{html.escape(t)}&nbsp;{v:.2f}" for t, v in zip(tokens, values))


class SelfAttentionStepper(Explorer):
    """Step through self-attention on a toy sentence, one step at a time.

    The embeddings come from :func:`attncourse.data.embed` and the projections
    from :func:`attncourse.data.projections`; both are random but fixed by
    ``seed``, so the numbers carry no meaning: the point is the mechanics.
    Display the stepper by making it the last expression of a notebook cell.

    Parameters
    ----------
    sentences : sequence of str
        Sentences offered in the ``sentence`` dropdown; the first is shown first.
    d_model : int
        Width of the embeddings X.
    d_k : int
        Width of queries and keys (and of values, ``d_v = d_k``).
    seed : int
        Seed of the embeddings and of W^Q, W^K, W^V.

    Attributes
    ----------
    sentence : ipywidgets.Dropdown
        The sentence.
    query : ipywidgets.Dropdown
        The query position; labels read like ``"2: robot"`` (1-based), values are
        0-based positions. Its options follow the sentence.
    step : ipywidgets.IntSlider
        The step number, 1 to 6 (see :data:`attncourse.functional.STEPS`).
    previous, next : ipywidgets.Button
        Move one step back or forward; nothing happens past the first or last step.
    matrix_form : ipywidgets.Checkbox
        Show all queries at once (matrix form) instead of the chosen query.
    caption : ipywidgets.HTML
        What the current step does, with its key numbers for the chosen query.
    out : ipywidgets.Output
        Holds the current step's figure.
    widget : ipywidgets.VBox
        The whole explorer, controls above caption above figure.
    tokens : list of str
        Tokens of the current sentence.
    x : ndarray, (seq_len, d_model)
        Embeddings of the current sentence.
    w_q, w_k, w_v : ndarray, (d_model, d_k)
        The projections W^Q, W^K, W^V.
    trace : SelfAttentionTrace
        Trace of the current sentence, in matrix form or for the chosen query.
    figure : matplotlib.figure.Figure
        The figure on display. It is closed in pyplot as soon as it is shown, so
        no figures pile up; the object stays readable.
    shown : dict
        What is on display: ``"step"`` (name), ``"step_number"`` (1-6),
        ``"matrix"`` (the main array of the step, e.g. ``trace.weights`` for
        softmax), ``"field"`` (the trace field of ``"matrix"``), ``"matrix_form"``
        and ``"query_index"``.

    Notes
    -----
    The book (no kernel) shows :meth:`to_html`: every step of every query token
    of every sentence, and every step of every sentence in matrix form, all
    drawn in advance (168 figures for the four default sentences).

    Raises
    ------
    ValueError
        If ``sentences`` is empty or holds an empty sentence, or if ``d_model``
        or ``d_k`` is smaller than 1.

    Examples
    --------
    >>> stepper = SelfAttentionStepper()
    >>> stepper.step.value = 4
    >>> stepper.shown["step"]
    'softmax'
    >>> round(float(stepper.shown["matrix"].sum()), 6)
    1.0
    """

    def __init__(
        self,
        sentences: Sequence[str] = SENTENCES,
        d_model: int = 4,
        d_k: int = 3,
        seed: int = 0,
    ) -> None:
        sentences = tuple(sentences)
        if not sentences:
            raise ValueError("sentences is empty: give at least one sentence")
        for sentence in sentences:
            tokenize(sentence)
        if d_model < 1 or d_k < 1:
            raise ValueError(f"d_model and d_k must be at least 1, got d_model={d_model}, d_k={d_k}")
        self.d_model, self.d_k, self.seed = d_model, d_k, seed
        self.w_q, self.w_k, self.w_v = projections(d_model, d_k, seed=seed)

        self.sentence = widgets.Dropdown(options=sentences, value=sentences[0], description="Sentence",
                                         layout=widgets.Layout(width="32em"))
        self.query = widgets.Dropdown(description="Query", layout=widgets.Layout(width="14em"))
        self.step = widgets.IntSlider(value=1, min=1, max=len(STEPS), description="Step",
                                      continuous_update=False)
        self._step_buttons(self.step)
        self.matrix_form = widgets.Checkbox(value=False, description="All queries (matrix form)", indent=False)
        super().__init__(
            widgets.HBox([self.sentence, self.query]),
            widgets.HBox([self.previous, self.step, self.next, self.matrix_form]),
        )

        self.tokens: list[str] = []
        self.trace: SelfAttentionTrace | None = None

        self._set_sentence(self.sentence.value)
        self.sentence.observe(self._on_sentence, names="value")
        self.query.observe(self._on_change, names="value")
        self.step.observe(self._on_change, names="value")
        self.matrix_form.observe(self._on_change, names="value")
        self._update()

    book_title = "Self-attention stepper"

    def _book_axes(self) -> list[BookAxis]:
        return [BookAxis(self.sentence), BookAxis(self.query), BookAxis(self.step),
                BookAxis(self.matrix_form, label="All queries (matrix form)")]

    def _frame_key(self) -> tuple | None:
        # In matrix form the figure shows every query: the same for each choice of query.
        if self.matrix_form.value:
            return (self.sentence.value, self.step.value)
        return None

    def _book_note(self, n_states: int) -> str:
        return (f"Every step for every query token of each sentence, and in matrix form ({n_states} "
                "settings, drawn in advance). In JupyterLab the stepper computes them live.")

    @property
    def step_name(self) -> str:
        """Name of the current step, e.g. ``"softmax"``."""
        return STEPS[self.step.value - 1]

    def _set_sentence(self, sentence: str) -> None:
        """Tokenize ``sentence`` and refill the query options, keeping the position if it still exists."""
        self.tokens = tokenize(sentence)
        self.x = embed(self.tokens, d_model=self.d_model, seed=self.seed)
        keep = self.query.value if self.query.value is not None else 0
        # Quiet while the query options are replaced, so that one sentence
        # change redraws once rather than once per intermediate query value.
        with self._quietly():
            self.query.options = [(f"{i + 1}: {token}", i) for i, token in enumerate(self.tokens)]
            self.query.value = keep if keep < len(self.tokens) else 0

    def _on_sentence(self, change: dict) -> None:
        self._set_sentence(change["new"])
        self._update()

    def _update(self) -> None:
        """Recompute the trace for the current controls, then redraw caption and figure."""
        query_index = self.query.value
        matrix_form = self.matrix_form.value
        self.trace = self_attention_trace(self.x, self.w_q, self.w_k, self.w_v,
                                          query_index=None if matrix_form else query_index)
        name = self.step_name
        self.previous.disabled = self.step.value == self.step.min
        self.next.disabled = self.step.value == self.step.max
        self.shown = {
            "step": name,
            "step_number": self.step.value,
            "field": MAIN_FIELD[name],
            "matrix": np.asarray(getattr(self.trace, MAIN_FIELD[name])),
            "matrix_form": matrix_form,
            "query_index": query_index,
        }
        self.caption.value = self._caption(name, query_index, matrix_form)
        if not self._frame_drawn:   # the book walk has this matrix-form frame already
            self._render(plot_step(self.trace, self.tokens, name))

    def _caption(self, name: str, i: int, matrix_form: bool) -> str:
        """One or two sentences on the current step, with its numbers for query ``i``."""
        t = self.trace
        row = (lambda a: np.asarray(a)[i]) if matrix_form else np.asarray
        token = html.escape(self.tokens[i])
        n = len(self.tokens)
        number = self.step.value
        head = f"<b>Step {number} of {len(STEPS)}: {name}.</b> "
        if matrix_form:
            head += f"All {n} queries at once (matrix form); the numbers here are for the row of '{token}'. "

        if name == "project":
            body = (f"Each embedding x<sub>i</sub> (d<sub>model</sub> = {self.d_model} numbers) is multiplied "
                    f"by the matrices W<sup>Q</sup>, W<sup>K</sup> and W<sup>V</sup>, giving a query, a key and "
                    f"a value of d<sub>k</sub> = {self.d_k} numbers each. "
                    f"The query of '{token}' is q = {_vector(row(t.q))}.")
        elif name == "score":
            scores = row(t.scores)
            best = int(np.argmax(scores))
            body = (f"The query of '{token}' is compared with every key by a dot product "
                    f"q&middot;k<sub>j</sub>: {_per_token(self.tokens, scores)}. "
                    f"The best match is '{html.escape(self.tokens[best])}' ({scores[best]:.2f}).")
        elif name == "scale":
            root = np.sqrt(t.d_k)
            body = (f"The scores are divided by &radic;d<sub>k</sub> = &radic;{t.d_k} = {root:.2f}, so that "
                    f"their spread does not grow with the width of the vectors and the softmax does not "
                    f"saturate: {_per_token(self.tokens, row(t.scaled_scores))}.")
        elif name == "softmax":
            weights = row(t.weights)
            best = int(np.argmax(weights))
            body = (f"The softmax turns the scaled scores of '{token}' into weights that are positive and "
                    f"sum to 1: {_per_token(self.tokens, weights)}. "
                    f"'{html.escape(self.tokens[best])}' gets the most weight ({weights[best]:.2f}).")
        elif name == "weight":
            weights = row(t.weights)
            best = int(np.argmax(weights))
            body = (f"Each value vector v<sub>j</sub> is multiplied by its weight &alpha;<sub>j</sub>, so keys "
                    f"with small weights contribute little. The largest share comes from "
                    f"'{html.escape(self.tokens[best])}': {weights[best]:.2f} &times; v = "
                    f"{_vector(row(t.weighted_values)[best])}.")
        else:
            body = (f"The weighted values are added up: z = &Sigma;<sub>j</sub> &alpha;<sub>j</sub> "
                    f"v<sub>j</sub> = {_vector(row(t.output))} is the new vector of '{token}', "
                    f"a blend of the values of all {n} tokens.")
        return head + body
