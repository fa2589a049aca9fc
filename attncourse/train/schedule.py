"""The Transformer's learning rate (warmup, then inverse square-root decay) and a time budget.

``lrate = scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)`` rises linearly up to
step ``warmup``, peaks at ``scale * (d_model * warmup)^-0.5`` and decays as ``step^-0.5``.
Use :func:`noam_lambda` with :class:`torch.optim.lr_scheduler.LambdaLR`, a base ``lr`` of
1.0, stepped every batch.

References
----------
Vaswani et al. (2017), "Attention Is All You Need", section 5.3, eq. (3).
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
    """Learning rate at optimizer step ``step`` (1-based; 0 gives 0), Vaswani et al. (2017) eq. (3).

    Raises
    ------
    ValueError
        If ``step`` is negative, or ``d_model``, ``warmup`` or ``scale`` is not positive.
    """
    if int(step) < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    _check(d_model, warmup, scale)
    if step == 0:
        return 0.0
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@dataclass(frozen=True)
class NoamLambda:
    """``LambdaLR``'s multiplier: call ``i`` (scheduler steps so far) gives step ``i + 1``'s rate.

    A dataclass, not a closure, so that ``LambdaLR.state_dict()`` records its settings.
    """

    d_model: int
    warmup: int
    scale: float = 1.0

    def __post_init__(self) -> None:
        _check(self.d_model, self.warmup, self.scale)

    def __call__(self, i: int) -> float:
        return warmup_inverse_sqrt(i + 1, self.d_model, self.warmup, self.scale)


def noam_lambda(d_model: int, warmup: int, scale: float = 1.0) -> NoamLambda:
    """Eq. (3) as ``LambdaLR``'s ``lr_lambda`` (:class:`NoamLambda`); Vaswani et al. (2017) section 5.3.

    Raises
    ------
    ValueError
        If ``d_model``, ``warmup`` or ``scale`` is not positive.
    """
    return NoamLambda(int(d_model), int(warmup), float(scale))


def peak_lr(d_model: int, warmup: int, scale: float = 1.0) -> float:
    """The highest rate of the schedule, reached at step ``warmup``: ``scale * (d_model * warmup)^-0.5``."""
    _check(d_model, warmup, scale)
    return scale * (d_model * warmup) ** -0.5


@dataclass
class TimeBudget:
    """A run's wall-clock budget (``seconds`` from :meth:`start`) and its learning-rate cool-down.

    Over the budget's last ``cooldown`` fraction the rate is multiplied by a factor
    falling linearly to 0 (the decay of warmup-stable-decay: Hu et al. 2024, "MiniCPM",
    section 4).

    Raises
    ------
    ValueError
        If ``seconds`` is not a positive finite number or ``cooldown`` is not in [0, 1).
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
        """The rate's multiplier: 1, then linearly down to 0 over the last ``cooldown``."""
        if self.cooldown == 0:
            return 1.0
        return min(1.0, max(0.0, (1.0 - self.fraction()) / self.cooldown))


__all__ = ["SCHEDULES", "NoamLambda", "TimeBudget", "noam_lambda", "peak_lr", "warmup_inverse_sqrt"]
