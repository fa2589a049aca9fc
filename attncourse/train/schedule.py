"""Learning-rate warmup and decay (Vaswani et al. 2017, eq. (3)) and a time budget."""

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
    """Eq. (3)'s rate at 1-based ``step`` (0 at 0); ``ValueError`` if out of range."""
    if int(step) < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    _check(d_model, warmup, scale)
    if step == 0:
        return 0.0
    return scale * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


@dataclass(frozen=True)
class NoamLambda:
    """``LambdaLR`` multiplier (in its ``state_dict``): call ``i`` -> step ``i + 1``."""

    d_model: int
    warmup: int
    scale: float = 1.0

    def __post_init__(self) -> None:
        _check(self.d_model, self.warmup, self.scale)

    def __call__(self, i: int) -> float:
        return warmup_inverse_sqrt(i + 1, self.d_model, self.warmup, self.scale)


def noam_lambda(d_model: int, warmup: int, scale: float = 1.0) -> NoamLambda:
    """Eq. (3) for ``LambdaLR`` (base lr 1.0); ``ValueError`` if an argument is <= 0."""
    return NoamLambda(int(d_model), int(warmup), float(scale))


def peak_lr(d_model: int, warmup: int, scale: float = 1.0) -> float:
    """The rate at step ``warmup``, the highest: ``scale * (d_model * warmup)^-0.5``."""
    _check(d_model, warmup, scale)
    return scale * (d_model * warmup) ** -0.5


@dataclass
class TimeBudget:
    """Wall-clock ``seconds``; the rate decays linearly to 0 over the last ``cooldown``.

    Raises ``ValueError`` if ``seconds`` <= 0 or ``cooldown`` is not in [0, 1). Source:
    Hu et al. (2024), "MiniCPM", section 4 (warmup-stable-decay).
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
        self.started = time.perf_counter()

    def fraction(self) -> float:
        """Fraction of the budget spent, >= 0 (0 before :meth:`start`)."""
        if self.started is None:
            return 0.0
        return (time.perf_counter() - self.started) / self.seconds

    def expired(self) -> bool:
        return self.fraction() >= 1.0

    def factor(self) -> float:
        """The rate's multiplier: 1, then down to 0 over the last ``cooldown``."""
        if self.cooldown == 0:
            return 1.0
        return min(1.0, max(0.0, (1.0 - self.fraction()) / self.cooldown))


__all__ = ["SCHEDULES", "NoamLambda", "TimeBudget", "noam_lambda", "peak_lr", "warmup_inverse_sqrt"]
