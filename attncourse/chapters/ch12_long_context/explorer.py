"""An explorer of RoPE stretched past its training length: the frequencies and the loss.

:class:`RopeScalingExplorer` takes a RoPE model trained on ``original_len`` positions and
lets the learner pick a method (position interpolation, NTK-aware, YaRN;
:class:`~attncourse.nn.rope.RopeScaling`) and a scale factor s. Left: each feature pair's
frequency theta'_i against the unscaled theta_i, on a log scale (PI moves every pair down
by s, NTK the slow ones most, YaRN only the pairs that turn less than 32 times within the
training length). Right: the model's held-out loss at each position of windows of
``eval_len``, zero-shot (the same weights), with the unscaled model's loss for comparison.

References
----------
Chen et al. (2023), section 2.2; Peng et al. (2023), sections 3.1-3.4.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np

from attncourse.nn.gpt import GPT
from attncourse.nn.rope import ROPE_SCALINGS, RopeScaling, rope_frequencies
from attncourse.nn.spec import PositionSpec
from attncourse.widgets.base import Explorer
from attncourse.widgets.static import BookAxis

#: Labels of the method dropdown.
METHOD_LABELS: dict[str, str] = {"pi": "position interpolation (PI)", "ntk": "NTK-aware", "yarn": "YaRN"}


def smooth(curve: np.ndarray, width: int = 16) -> np.ndarray:
    """Means over consecutive blocks of ``width`` positions (the last block may be shorter)."""
    return np.array([curve[i:i + width].mean() for i in range(0, len(curve), width)])


class RopeScalingExplorer(Explorer):
    """A menu over PI, NTK-aware and YaRN and a slider over the scale factor, for a trained RoPE model.

    Display the explorer by making it the last expression of a notebook cell.

    Parameters
    ----------
    model : GPT
        Trained with RoPE (no scaling) on windows of ``original_len``.
    score : callable
        ``score(model) -> (eval_len,)`` array: the loss (bits/char) at each position of
        windows of ``eval_len`` of held-out text (e.g. from
        :func:`~attncourse.recipes.lm.heldout_loss` with ``per_position=True``).
    original_len : int
        L, the training length.
    eval_len : int
        Length of the windows scored (e.g. 8 L).
    factors : sequence of float
        The slider's values (each >= 1).

    Attributes
    ----------
    method : ipywidgets.Dropdown
    factor : ipywidgets.SelectionSlider
    shown : dict
        ``"method"``, ``"factor"``, ``"theta"`` and ``"scaled_theta"`` (d_k/2,),
        ``"loss"`` (eval_len,) bits/char by position, ``"unscaled_loss"`` (eval_len,),
        ``"far_bits"`` (mean over positions L .. eval_len - 1) and ``"unscaled_far_bits"``.

    Notes
    -----
    The book (no kernel) shows every method at every factor, drawn in advance.

    Raises
    ------
    ValueError
        If the model does not use RoPE, a factor is below 1, or ``eval_len`` is not longer
        than ``original_len``.
    """

    book_title = "RoPE scaling explorer"

    def __init__(self, model: GPT, score: Callable[[GPT], np.ndarray], original_len: int = 64,
                 eval_len: int = 512, factors: Sequence[float] = (1.0, 2.0, 4.0, 8.0)) -> None:
        if model.spec.positions.kind != "rope" or model.spec.positions.rope_scaling is not None:
            raise ValueError(f"the explorer stretches an unscaled RoPE model, got positions {model.spec.positions}")
        if min(factors) < 1:
            raise ValueError(f"scale factors must be >= 1, got {list(factors)}")
        if eval_len <= original_len:
            raise ValueError(f"eval_len={eval_len} must exceed the training length original_len={original_len}")
        self.model, self.score = model, score
        self.original_len, self.eval_len = int(original_len), int(eval_len)
        self.d_k = model.d_model // model.spec.num_heads
        self._losses: dict[tuple[str, float], np.ndarray] = {}
        self.method = widgets.Dropdown(options=[(METHOD_LABELS[m], m) for m in ROPE_SCALINGS], value="yarn",
                                       description="method")
        self.factor = widgets.SelectionSlider(options=[float(f) for f in factors], value=float(factors[-1]),
                                              description="factor s", continuous_update=False)
        super().__init__(widgets.HBox([self.method, self.factor]))
        self.method.observe(self._on_change, names="value")
        self.factor.observe(self._on_change, names="value")
        self._update()

    def _book_axes(self) -> list[BookAxis]:
        return [BookAxis(self.method, label="method"),
                BookAxis(self.factor, values=list(self.factor.options), label="scale factor s")]

    def _book_note(self, n_states: int) -> str:
        return f"{n_states} states (every method at every factor), drawn in advance."

    def loss(self, method: str, factor: float) -> np.ndarray:
        """Bits/char at each position of windows of ``eval_len`` with ``method`` at ``factor`` (cached)."""
        key = ("none", 1.0) if factor == 1.0 else (method, float(factor))
        if key not in self._losses:
            model = self.model
            if key[0] != "none":  # the same weights: a scaling changes no parameter
                positions = PositionSpec("rope", model.spec.positions.base, method, factor, self.original_len)
                stretched = GPT(spec=dataclasses.replace(model.spec, positions=positions))
                stretched.load_state_dict(model.state_dict())
                model = stretched.to(next(self.model.parameters()).device).eval()
            self._losses[key] = np.asarray(self.score(model), dtype=float)
        return self._losses[key]

    def _update(self) -> None:
        method, factor = self.method.value, float(self.factor.value)
        theta = rope_frequencies(self.d_k, self.model.spec.positions.base).numpy()
        scaled = RopeScaling(method, factor, self.original_len).frequencies(self.d_k,
                                                                            self.model.spec.positions.base).numpy()
        loss, unscaled = self.loss(method, factor), self.loss(method, 1.0)
        far = slice(self.original_len, self.eval_len)
        self.shown = {"method": method, "factor": factor, "theta": theta, "scaled_theta": scaled,
                      "loss": loss, "unscaled_loss": unscaled, "far_bits": float(loss[far].mean()),
                      "unscaled_far_bits": float(unscaled[far].mean())}
        fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.4))
        pairs = np.arange(len(theta))
        left.plot(pairs, theta, "o--", color="gray", label="unscaled θ_i")
        left.plot(pairs, scaled, "o-", label=f"{method}, s = {factor:g}")
        left.set(yscale="log", xlabel="feature pair i", ylabel="radians per position",
                 title="rotation frequencies")
        left.legend()
        width = 16
        centres = np.arange(0, self.eval_len, width) + width / 2
        right.plot(centres, smooth(unscaled, width), color="gray", label="unscaled")
        right.plot(centres, smooth(loss, width), label=f"{method}, s = {factor:g}")
        right.axvline(self.original_len, color="k", linestyle=":")
        right.set(xlabel="position in the window", ylabel="bits/char", title="held-out loss, zero-shot")
        right.legend()
        fig.tight_layout()
        self.caption.value = (
            f"<b>{METHOD_LABELS[method]}, s = {factor:g}</b>: held-out loss at positions "
            f"{self.original_len}-{self.eval_len - 1} <b>{self.shown['far_bits']:.3f}</b> bits/char, "
            f"unscaled {self.shown['unscaled_far_bits']:.3f}. The dotted line is the training length "
            f"{self.original_len}.")
        self._render(fig)


__all__ = ["METHOD_LABELS", "RopeScalingExplorer", "smooth"]
