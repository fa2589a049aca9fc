"""The Transformer's learning-rate schedule: linear warmup, then inverse square-root decay.

Vaswani et al. (2017, section 5.3, eq. 3) change the learning rate at every
training step (every batch):

    lrate = d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5)

For ``step_num < warmup_steps`` the second term is the smaller one: the rate
grows linearly from almost 0. At ``step_num == warmup_steps`` the two terms are
equal, and the rate peaks at ``(d_model * warmup_steps)^-0.5`` (about 7.0e-4 for
the base model, d_model = 512 and warmup_steps = 4000). After that it falls as
``step_num^-0.5``. Why warm up at all: Adam's second-moment estimates are
poor during the first steps, and a post-norm Transformer trained with a large
rate from the start often diverges; a slow start lets those estimates settle.

The factor ``d_model^-0.5`` makes wider models take smaller steps. The course
adds a ``scale`` (1.0 in the paper) to move the whole curve up or down.

Use with :class:`torch.optim.lr_scheduler.LambdaLR`, stepping once per batch::

    optimizer = torch.optim.Adam(model.parameters(), lr=1.0, betas=(0.9, 0.98), eps=1e-9)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, noam_lambda(d_model=512, warmup=4000))
    for batch in batches:
        ...; optimizer.step(); scheduler.step()

``LambdaLR`` multiplies the optimizer's base ``lr`` by the lambda, so the base
``lr`` must be 1.0 (or the scale). The lambda is called with the number of
scheduler steps taken so far, 0 before the first batch; it adds 1, so the
first optimizer step runs with ``step_num = 1`` as in the paper, never with a
rate of 0.

References
----------
Vaswani et al. (2017), "Attention Is All You Need", section 5.3, eq. (3).
Popel, Bojar (2018), "Training Tips for the Transformer Model", section 4.6
(warmup and learning rate).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

#: Schedules :class:`~attncourse.train.fit.FitConfig` understands (None: a constant rate).
SCHEDULES: tuple[str, ...] = ("noam",)


def _check(d_model: int, warmup: int, scale: float) -> None:
    if int(d_model) < 1:
        raise ValueError(f"d_model must be a positive int, got {d_model}")
    if int(warmup) < 1:
        raise ValueError(f"warmup must be a positive int (steps), got {warmup}")
    if not (scale > 0 and math.isfinite(scale)):
        raise ValueError(f"scale must be a finite number > 0, got {scale}")


def warmup_inverse_sqrt(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """Learning rate at training step ``step``, Vaswani et al.'s eq. (3).

    ``scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)``

    Parameters
    ----------
    step : int
        step_num, counted from 1 (the first optimizer step); ``step = 0`` gives 0.
    d_model : int
        Model width; the rate is proportional to ``d_model^-0.5``.
    warmup : int
        warmup_steps: the rate rises linearly up to this step, where it peaks at
        ``scale * (d_model * warmup)^-0.5``, then decays as ``step^-0.5``.
    scale : float
        Multiplies the whole curve (1.0 in the paper).

    Returns
    -------
    float
        The learning rate.

    Raises
    ------
    ValueError
        If ``step`` is negative, or ``d_model``, ``warmup`` or ``scale`` is not positive.

    References
    ----------
    Vaswani et al. (2017), section 5.3, eq. (3).
    """
    if int(step) < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    _check(d_model, warmup, scale)
    if step == 0:
        return 0.0
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@dataclass(frozen=True)
class NoamLambda:
    """The multiplier ``LambdaLR`` calls with the number of scheduler steps taken (0, 1, 2, ...).

    Returns ``warmup_inverse_sqrt(i + 1, d_model, warmup, scale)``: call ``i``
    sets the rate of optimizer step ``i + 1``. A small class rather than a
    closure so that ``LambdaLR.state_dict()`` records its settings (a checkpoint
    shows which schedule it was trained with).

    Attributes
    ----------
    d_model, warmup : int
    scale : float
    """

    d_model: int
    warmup: int
    scale: float = 1.0

    def __post_init__(self) -> None:
        _check(self.d_model, self.warmup, self.scale)

    def __call__(self, i: int) -> float:
        return warmup_inverse_sqrt(i + 1, self.d_model, self.warmup, self.scale)


def noam_lambda(d_model: int, warmup: int, scale: float = 1.0) -> NoamLambda:
    """Eq. (3) as a ``lr_lambda`` for :class:`torch.optim.lr_scheduler.LambdaLR` (step it every batch).

    Parameters
    ----------
    d_model : int
    warmup : int
        Optimizer steps of linear warmup; the rate peaks at step ``warmup``.
    scale : float
        Multiplies the curve; leave the optimizer's base ``lr`` at 1.0.

    Returns
    -------
    NoamLambda
        ``f(i) = warmup_inverse_sqrt(i + 1, d_model, warmup, scale)``, where ``i``
        is the number of ``scheduler.step()`` calls so far.

    Raises
    ------
    ValueError
        If ``d_model``, ``warmup`` or ``scale`` is not positive.

    References
    ----------
    Vaswani et al. (2017), section 5.3, eq. (3); "Noam" after Noam Shazeer, who
    designed it (the name used by tensor2tensor and the Annotated Transformer).
    """
    return NoamLambda(int(d_model), int(warmup), float(scale))


def peak_lr(d_model: int, warmup: int, scale: float = 1.0) -> float:
    """The highest rate of the schedule, reached at step ``warmup``: ``scale * (d_model * warmup)^-0.5``."""
    _check(d_model, warmup, scale)
    return scale * (d_model * warmup) ** -0.5


@dataclass
class TimeBudget:
    """A training run's wall-clock budget, and the learning-rate cool-down that ends it.

    A run that must stop after ``seconds`` cannot know in advance how many steps
    it will take, so the end of its schedule is set in time, not in steps: the
    rate follows its own schedule (eq. (3)) until ``1 - cooldown`` of the budget
    has passed, and is then multiplied by a factor falling linearly to 0 at the
    end of the budget (the "decay" phase of warmup-stable-decay schedules, Hu et
    al. 2024). The last weights are then taken at a small rate, where they have
    settled, instead of in the middle of the decay of eq. (3).

    Attributes
    ----------
    seconds : float
        The budget, > 0: wall-clock seconds from :meth:`start`.
    cooldown : float in [0, 1)
        Fraction of the budget at its end over which the rate falls to 0
        (0: no cool-down, the run just stops).
    started : float or None
        ``time.perf_counter()`` at :meth:`start`.

    Raises
    ------
    ValueError
        If ``seconds`` is not a positive finite number or ``cooldown`` is out of range.

    References
    ----------
    Hu et al. (2024), "MiniCPM: Unveiling the Potential of Small Language Models
    with Scalable Training Strategies", section 4 (warmup-stable-decay).
    """

    seconds: float
    cooldown: float = 0.2
    started: float | None = None

    def __post_init__(self) -> None:
        if not (self.seconds > 0 and math.isfinite(self.seconds)):
            raise ValueError(f"time budget must be a positive number of seconds, got {self.seconds!r}")
        if not 0.0 <= self.cooldown < 1.0:
            raise ValueError(f"cooldown must lie in [0, 1), got {self.cooldown!r}")

    def start(self) -> None:
        """Start the clock (the training loop calls it when training begins)."""
        self.started = time.perf_counter()

    def fraction(self) -> float:
        """Fraction of the budget spent, >= 0 (0 before :meth:`start`)."""
        if self.started is None:
            return 0.0
        return (time.perf_counter() - self.started) / self.seconds

    def expired(self) -> bool:
        """True once the budget is spent."""
        return self.fraction() >= 1.0

    def factor(self) -> float:
        """The cool-down's multiplier of the learning rate: 1, then linearly down to 0 over the last ``cooldown``."""
        if self.cooldown == 0:
            return 1.0
        return min(1.0, max(0.0, (1.0 - self.fraction()) / self.cooldown))


__all__ = ["SCHEDULES", "NoamLambda", "TimeBudget", "noam_lambda", "peak_lr", "warmup_inverse_sqrt"]
