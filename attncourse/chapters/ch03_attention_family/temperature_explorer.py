"""An explorer of the softmax temperature: from uniform weights to a hard choice.

:class:`TemperatureExplorer` fixes a score vector over a few tokens and lets the
learner turn the temperature tau on a log scale: weights = softmax(e / tau)
(:func:`attncourse.functional.softmax_with_temperature`). A large tau spreads
the weight evenly; tau -> 0 puts all of it on the largest score, the hardmax,
which is what "hard" attention picks. The figure is
:func:`attncourse.chapters.ch03_attention_family.figures.plot_tempered_weights`.

References
----------
Hinton, Vinyals, Dean (2015), "Distilling the Knowledge in a Neural Network", section 2.
Luong, Pham, Manning (2015), section 3.2 (local attention as a blend of soft and hard attention).
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets
import numpy as np

from attncourse.chapters.ch03_attention_family.figures import plot_tempered_weights
from attncourse.functional.temperature import entropy, hardmax, softmax_with_temperature
from attncourse.widgets.base import Explorer
from attncourse.widgets.static import BookAxis

#: Tokens and scores shown when none are given: two close winners ("cat", "mat").
DEFAULT_TOKENS: tuple[str, ...] = ("the", "cat", "sat", "on", "the", "mat")
DEFAULT_SCORES: tuple[float, ...] = (0.5, 2.0, 1.0, -0.5, 0.3, 1.8)


class TemperatureExplorer(Explorer):
    """A log-scale slider for the temperature tau of softmax(e / tau) over fixed scores.

    Display the explorer by making it the last expression of a notebook cell.

    Parameters
    ----------
    scores : array-like, (n,), optional
        The scores e_j, at least 2; six example scores by default.
    tokens : sequence of str, length n, optional
        Labels of the scores; the default tokens with the default scores,
        positions 0..n-1 otherwise.
    tau : float
        Starting temperature, inside the slider's range.
    log10_range : (float, float)
        The slider runs over tau = 10^a .. 10^b; (-2, 2), i.e. 0.01..100, by default.

    Attributes
    ----------
    scores : ndarray, (n,)
    tokens : list of str, length n
    tau : ipywidgets.FloatLogSlider
        The temperature.
    caption : ipywidgets.HTML
        The largest weight and the entropy in nats, against their limits.
    out : ipywidgets.Output
        Holds the figure.
    widget : ipywidgets.VBox
        The whole explorer.
    figure : matplotlib.figure.Figure
        The figure on display; closed in pyplot once shown.
    shown : dict
        What is on display: ``"tau"``, ``"weights"`` (n,), ``"max_weight"``,
        ``"argmax"`` (index of the largest weight), ``"entropy"`` (nats),
        ``"max_entropy"`` (ln n, the uniform limit) and ``"hardmax"`` (n,), the tau -> 0 limit.

    Notes
    -----
    The book (no kernel) shows :meth:`to_html`: ten temperatures per factor
    of 10 over the slider's range, and the starting one, drawn in advance.

    Raises
    ------
    ValueError
        If there are fewer than 2 scores, the tokens do not fit them (both
        lengths are named), the range is empty, or tau lies outside it.

    References
    ----------
    Hinton et al. (2015), section 2.

    Examples
    --------
    >>> explorer = TemperatureExplorer()
    >>> explorer.tau.value = 100.0
    >>> explorer.shown["entropy"] > 0.99 * explorer.shown["max_entropy"]
    True
    """

    def __init__(
        self,
        scores: Any = None,
        tokens: Sequence[str] | None = None,
        tau: float = 1.0,
        log10_range: tuple[float, float] = (-2.0, 2.0),
    ) -> None:
        if scores is None:
            scores = DEFAULT_SCORES
            tokens = DEFAULT_TOKENS if tokens is None else tokens
        self.scores = np.asarray(scores, dtype=float)
        if self.scores.ndim != 1 or self.scores.size < 2:
            raise ValueError(f"scores must be one vector of at least 2 scores (n,), got shape {self.scores.shape}")
        n = self.scores.size
        self.tokens = [str(j) for j in range(n)] if tokens is None else [str(tok) for tok in tokens]
        if len(self.tokens) != n:
            raise ValueError(f"{len(self.tokens)} tokens were given for {n} scores; pass one token per score")
        low, high = (float(v) for v in log10_range)
        if not low < high:
            raise ValueError(f"log10_range must be (low, high) with low < high, got {log10_range}")
        if not 10**low <= tau <= 10**high:
            raise ValueError(f"tau must lie in 10^{low:g}..10^{high:g}, got {tau}")

        self.tau = widgets.FloatLogSlider(value=float(tau), base=10, min=low, max=high, step=0.05,
                                          description="τ", readout_format=".3g", continuous_update=False)
        super().__init__(self.tau)
        self.tau.observe(self._on_change, names="value")
        self._update()

    book_title = "Softmax temperature explorer"

    def _book_axes(self) -> list[BookAxis]:
        # Ten temperatures per decade, on the slider's log scale, and the starting one.
        exponents = np.arange(self.tau.min, self.tau.max + 1e-9, 0.1)
        taus = sorted({*(float(f"{10.0**a:.3g}") for a in exponents), float(self.tau.value)})
        return [BookAxis(self.tau, values=taus, label="temperature τ")]

    def _book_note(self, n_states: int) -> str:
        return (f"{n_states} temperatures, ten per factor of 10, drawn in advance. In JupyterLab the slider "
                "moves in finer steps.")

    def _update(self) -> None:
        tau = float(self.tau.value)
        weights = softmax_with_temperature(self.scores, tau)
        best = int(np.argmax(weights))
        self.shown = {
            "tau": tau,
            "weights": weights,
            "max_weight": float(weights[best]),
            "argmax": best,
            "entropy": entropy(weights),
            "max_entropy": math.log(self.scores.size),
            "hardmax": hardmax(self.scores),
        }
        self.caption.value = self._caption()
        self._render(plot_tempered_weights(self.scores, tau, self.tokens).figure)

    def _caption(self) -> str:
        s, n = self.shown, self.scores.size
        token = html.escape(self.tokens[s["argmax"]])
        return (
            f"<b>&tau; = {s['tau']:.3g}</b>: the weights softmax(e / &tau;) put at most <b>{s['max_weight']:.3f}</b> "
            f"on one token ('{token}', position {s['argmax']}); their entropy is <b>{s['entropy']:.3f} nats</b>. "
            f"Limits: &tau; &rarr; &infin; gives uniform weights 1/{n} = {1 / n:.3f} (entropy ln {n} = "
            f"{s['max_entropy']:.3f} nats); &tau; &rarr; 0 gives the hardmax, weight 1 on the largest score "
            "(entropy 0). The order of the weights never changes."
        )


__all__ = ["DEFAULT_SCORES", "DEFAULT_TOKENS", "TemperatureExplorer"]
