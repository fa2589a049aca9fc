"""An explorer of Luong's local attention: move the aligned position and resize the window.

:class:`LocalWindow` shows one target step of local attention over a source
sentence with fixed scores: the window [p_t - D, p_t + D], the softmax of the
scores inside it, and for local-p the Gaussian exp(-(s - p_t)^2 / (2 sigma^2)),
sigma = D / 2, that multiplies the weights. The figure is
:func:`attncourse.chapters.ch03_attention_family.figures.plot_local_window`, the one the chapter prints, and
the numbers come from :func:`attncourse.chapters.ch03_attention_family.figures.local_weights`, built on
:mod:`attncourse.functional.luong`.

References
----------
Luong, Pham, Manning (2015), "Effective Approaches to Attention-based Neural
Machine Translation", EMNLP, section 3.2, eqs. (10)-(11) (arXiv 1508.04025v5).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import ipywidgets as widgets
import numpy as np

from attncourse.chapters.ch03_attention_family.figures import (
    LOCAL_MODES,
    LocalWeights,
    local_weights,
    plot_local_window,
)
from attncourse.widgets.base import Explorer
from attncourse.widgets.static import BookAxis

#: Source tokens shown when none are given.
DEFAULT_TOKENS: tuple[str, ...] = ("le", "petit", "chat", "noir", "dort", "sur", "le", "tapis", "rouge", "de",
                                   "la", "cuisine")


class LocalWindow(Explorer):
    """Sliders for the aligned position p_t and the half-width D of a local-attention window.

    In local-p mode the slider ``p_t`` sets the (real-valued) aligned position,
    as the model would predict it with eq. (10); in local-m mode p_t is the
    target step t, set by the slider ``t`` instead, and there is no Gaussian.
    Display the explorer by making it the last expression of a notebook cell.

    Parameters
    ----------
    tokens : sequence of str, optional
        Source tokens (src_len of them, at least 2); a 12-word French sentence by default.
    D : int
        Starting window half-width, 1..src_len-1.
    p_t : float, optional
        Starting aligned position for local-p, in [0, src_len - 1]; the middle by default.
    t : int, optional
        Starting target step for local-m, 0..src_len-1; 0 by default.
    mode : {"local-p", "local-m"}
        Starting mode.
    scores : "random", None or array-like (src_len,)
        The alignment scores score(h_t, h̄_s), fixed while exploring:
        ``"random"`` draws them from N(0, 1) with ``seed``; ``None`` takes them
        all equal, so the softmax is uniform over the window and only the window
        and the Gaussian shape the weights.
    seed : int
        Seed of the random scores.

    Attributes
    ----------
    tokens : list of str, length src_len
    scores : ndarray, (src_len,)
    mode : ipywidgets.ToggleButtons
        ``"local-m"`` or ``"local-p"``.
    p_t : ipywidgets.FloatSlider
        Aligned position of local-p, 0..src_len-1 in steps of 0.1; hidden in local-m.
    t : ipywidgets.IntSlider
        Target step of local-m, 0..src_len-1 (p_t = t); hidden in local-p.
    D : ipywidgets.IntSlider
        Window half-width, 1..src_len-1.
    caption : ipywidgets.HTML
        The window's bounds and positions, sigma and the sum of the weights.
    out : ipywidgets.Output
        Holds the figure.
    widget : ipywidgets.VBox
        The whole explorer.
    figure : matplotlib.figure.Figure
        The figure on display; closed in pyplot once shown.
    shown : dict
        What is on display: ``"mode"``, ``"p_t"`` (float), ``"D"``, ``"lo"`` and
        ``"hi"`` (first and last position in the window, or None if it is
        empty), ``"window"`` (src_len,) bool, ``"sigma"`` (None for local-m),
        ``"align"``, ``"gaussian"`` (None for local-m), ``"weights"`` (each
        (src_len,)) and ``"weight_sum"``.

    Notes
    -----
    The book (no kernel) shows :meth:`to_html`: both modes, every D, p_t in
    steps of 0.5 (local-p) and every t (local-m), drawn in advance.

    Raises
    ------
    ValueError
        If there are fewer than 2 tokens, ``scores`` does not have one entry
        per token (both lengths are named), ``scores`` is an unknown string,
        ``mode`` is unknown, or a starting value is out of range.

    References
    ----------
    Luong et al. (2015), section 3.2, eqs. (10)-(11).

    Examples
    --------
    >>> explorer = LocalWindow(D=2, p_t=3.4)
    >>> explorer.shown["lo"], explorer.shown["hi"], explorer.shown["sigma"]
    (2, 5, 1.0)
    >>> explorer.mode.value = "local-m"
    >>> explorer.t.value = 0
    >>> explorer.shown["lo"], explorer.shown["hi"], round(explorer.shown["weight_sum"], 6)
    (0, 2, 1.0)
    """

    def __init__(
        self,
        tokens: Sequence[str] | None = None,
        D: int = 2,
        p_t: float | None = None,
        t: int | None = None,
        mode: str = "local-p",
        scores: Any = "random",
        seed: int = 0,
    ) -> None:
        self.tokens = [str(tok) for tok in (DEFAULT_TOKENS if tokens is None else tokens)]
        src_len = len(self.tokens)
        if src_len < 2:
            raise ValueError(f"give at least 2 source tokens, got {src_len}")
        if isinstance(scores, str):
            if scores != "random":
                raise ValueError(f"scores must be 'random', None or an array (src_len,), got {scores!r}")
            self.scores = np.random.default_rng(seed).normal(size=src_len)
        elif scores is None:
            self.scores = np.zeros(src_len)
        else:
            self.scores = np.asarray(scores, dtype=float)
            if self.scores.shape != (src_len,):
                raise ValueError(
                    f"scores must be (src_len,) = ({src_len},) to fit the {src_len} tokens, "
                    f"got shape {self.scores.shape}"
                )
        if mode not in LOCAL_MODES:
            raise ValueError(f"mode must be one of {LOCAL_MODES}, got {mode!r}")
        p_t = (src_len - 1) / 2 if p_t is None else float(p_t)
        t = 0 if t is None else t
        if not 1 <= int(D) <= src_len - 1:
            raise ValueError(f"D must lie in 1..src_len-1 = 1..{src_len - 1}, got {D}")
        if not 0.0 <= p_t <= src_len - 1:
            raise ValueError(f"p_t must lie in [0, src_len - 1] = [0, {src_len - 1}], got {p_t}")
        if not 0 <= int(t) <= src_len - 1:
            raise ValueError(f"t must lie in 0..src_len-1 = 0..{src_len - 1}, got {t}")

        self.mode = widgets.ToggleButtons(options=LOCAL_MODES, value=mode, description="Mode")
        self.p_t = widgets.FloatSlider(value=p_t, min=0.0, max=float(src_len - 1), step=0.1, readout_format=".1f",
                                       description="p_t", continuous_update=False)
        self.t = widgets.IntSlider(value=int(t), min=0, max=src_len - 1, description="Step t",
                                   continuous_update=False)
        self.D = widgets.IntSlider(value=int(D), min=1, max=src_len - 1, description="D", continuous_update=False)
        super().__init__(self.mode, widgets.HBox([self.p_t, self.t, self.D]))

        for control in (self.mode, self.p_t, self.t, self.D):
            control.observe(self._on_change, names="value")
        self._update()

    book_title = "Local attention window explorer"

    def _book_axes(self) -> list[BookAxis]:
        # p_t on a grid of half positions: a window's content changes only when
        # p_t - D or p_t + D crosses an integer, and the Gaussian moves smoothly.
        grid = np.arange(0.0, self.p_t.max + 0.25, 0.5).round(1)
        p_values = sorted({*grid.tolist(), round(float(self.p_t.value), 1)})
        return [BookAxis(self.mode),
                BookAxis(self.p_t, values=p_values, applies=lambda: self.mode.value == "local-p"),
                BookAxis(self.t, applies=lambda: self.mode.value == "local-m"),
                BookAxis(self.D)]

    def _book_note(self, n_states: int) -> str:
        return (f"Both modes, every window half-width D, p<sub>t</sub> in steps of 0.5 (local-p) and every "
                f"step t (local-m): {n_states} settings drawn in advance. In JupyterLab p<sub>t</sub> moves "
                "in steps of 0.1.")

    def _update(self) -> None:
        mode = self.mode.value
        local_m = mode == "local-m"
        # Only the slider that sets p_t in this mode is shown.
        self.t.layout.display = None if local_m else "none"
        self.p_t.layout.display = "none" if local_m else None
        # local-m: p_t = t (the slider never passes S - 1, so min(t, S - 1) = t).
        position = float(self.t.value) if local_m else float(self.p_t.value)
        step = local_weights(self.scores, position, self.D.value, mode)
        inside = step.positions
        self.shown = {
            "mode": mode,
            "p_t": step.p_t,
            "D": step.D,
            "lo": int(inside[0]) if inside.size else None,
            "hi": int(inside[-1]) if inside.size else None,
            "window": step.window,
            "sigma": step.sigma,
            "align": step.align,
            "gaussian": step.gaussian,
            "weights": step.weights,
            "weight_sum": float(step.weights.sum()),
        }
        self.caption.value = self._caption(step)
        self._render(plot_local_window(self.tokens, step.p_t, step.D, self.scores, mode).figure)

    def _caption(self, step: LocalWeights) -> str:
        s, src_len = self.shown, len(self.tokens)
        where = (f"p<sub>t</sub> = t = {step.p_t:g} (local-m: the window moves one source position per target "
                 "step)" if step.mode == "local-m" else f"p<sub>t</sub> = {step.p_t:.1f} (local-p)")
        if s["lo"] is None:
            inside = "holds no source position"
        else:
            inside = (f"holds the source positions s = {s['lo']}..{s['hi']} with |s - p<sub>t</sub>| &le; D "
                      f"({s['hi'] - s['lo'] + 1} of {src_len})")
        text = (f"{where}, D = {step.D}: the window [p<sub>t</sub> - D, p<sub>t</sub> + D] = "
                f"[{step.p_t - step.D:g}, {step.p_t + step.D:g}] {inside}; every other weight is 0. ")
        if step.mode == "local-p":
            text += (f"&sigma; = D/2 = {step.sigma:g}. The softmax over the window sums to 1; times the Gaussian, "
                     f"the weights sum to <b>{s['weight_sum']:.3f}</b> (Luong et al. do not renormalise).")
        else:
            text += ("No Gaussian in local-m: the weights are the softmax over the window and sum to "
                     f"<b>{s['weight_sum']:.3f}</b>.")
        return text


__all__ = ["DEFAULT_TOKENS", "LocalWindow"]
