"""A training run's settings, declared once as fields made with :func:`setting`.

:class:`TrainingSettings` (shared with :class:`~attncourse.recipes.Experiment`),
:class:`FitConfig` (how :func:`~attncourse.train.fit.fit` trains) and the command lines'
options (:func:`attncourse.cli.parsing.add_fields`) all derive from these fields.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import Field, dataclass, field, fields
from typing import Any

from attncourse.train.loop import AMP_DTYPES
from attncourse.train.schedule import SCHEDULES

MONITORS = ("exact_match", "loss")
OPTIMIZERS = ("adam", "adamw")


@dataclass(frozen=True)
class Limit:
    """A setting's range ``low <= value <= high`` (``low`` excluded if ``open_low``)."""

    low: float
    high: float
    why: str
    open_low: bool = False

    def problem(self, value: float) -> str | None:
        """Why ``value`` is out of range, or None."""
        if isinstance(value, float) and not math.isfinite(value):
            return "must be a finite number"
        below = value <= self.low if self.open_low else value < self.low
        if below or value > self.high:
            lo = "above" if self.open_low else "at least"
            return f"must be {lo} {format_number(self.low)} and at most {format_number(self.high)} ({self.why})"
        return None


def format_number(value: float) -> str:
    """``4,096`` for whole numbers, ``1e-06`` otherwise (messages and ``--help``)."""
    if isinstance(value, int) or float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:g}"


#: Why a limit is where it is (the ceilings are at least eight times the gpu preset's values).
SIZE = "memory grows with it"
FLOAT32 = "float32 overflows or the optimiser diverges at once beyond it"
TIME = "a run that long would not end"
#: Ranges that several settings (of several commands) share, declared once.
WIDTH = Limit(1, 4096, SIZE)
HEADS = Limit(1, 64, SIZE)
LAYERS = Limit(1, 48, SIZE)
FFN_WIDTH = Limit(1, 16384, SIZE)
BATCH = Limit(1, 4096, SIZE)
STEPS = Limit(1, 100_000_000, TIME)
LEARNING_RATE = Limit(0.0, 10.0, FLOAT32, open_low=True)
WEIGHT_DECAY = Limit(0.0, 10.0, FLOAT32)
CLIP_NORM = Limit(0.0, 1e6, FLOAT32, open_low=True)
SECONDS = Limit(0.0, 10_000_000.0, "seconds; about four months", open_low=True)
#: RoPE's scale factor (chapter 12): target length / training length.
ROPE_FACTOR = Limit(1.0, 1024.0, "a factor below 1 shrinks the positions")
#: RoPE's base (10,000; SmolLM2 100,000; Llama 3 500,000) and a norm's epsilon: no
#: option sets them, but a checkpoint's spec does, and is held to these ranges.
ROPE_BASE = Limit(1.0, 1e9, "RoPE's base; float32 angles lose all precision beyond it", open_low=True)
NORM_EPS = Limit(0.0, 1.0, "a norm's epsilon; beyond it the norm no longer normalises", open_low=True)


def setting(default: Any, help: str, *, check: str | None = None, limit: Limit | None = None,
            group: str = "training", flag: str | None = None, metavar: str | tuple[str, ...] | None = None,
            choices: tuple[str, ...] | None = None, nargs: int | str | None = None, preset: bool = False,
            only: str | None = None, positional: bool = False, required: bool = False,
            negatable: bool = True, repeat: bool = False) -> Any:
    """A dataclass field that is also a command's option; its metadata drive the parser.

    ``help`` is the ``--help`` text (``limit``'s range appended); ``check`` names the
    reader in :data:`attncourse.cli.parsing.CHECKS` (``"switch"``: a boolean unset by
    default); ``limit`` is checked after parsing; ``group`` is the ``--help`` section;
    ``flag``, ``metavar``, ``choices``, ``nargs`` are argparse's; ``preset``: filled in
    from a preset when not given; ``only``: ``"rnn"`` or ``"transformer"``;
    ``positional``: no flag, in field order; ``negatable``: ``--x/--no-x``; ``repeat``:
    may be given several times (a list).
    """
    metadata = {"help": help, "check": check, "limit": limit, "group": group, "flag": flag,
                "metavar": metavar, "choices": choices, "nargs": nargs, "preset": preset, "only": only,
                "positional": positional, "required": required, "negatable": negatable}
    if repeat:  # only when set: the other fields' metadata stay as they were
        metadata["repeat"] = True
    return field(default=default, metadata=metadata)


def redefault(cls: type, name: str, default: Any) -> Any:
    """``cls``'s setting ``name`` with another default."""
    return field(default=default, metadata=cls.__dataclass_fields__[name].metadata)


def settings(*classes: type) -> Iterator[Field]:
    """The fields of ``classes`` made with :func:`setting`, each name once."""
    seen: set[str] = set()
    for cls in classes:
        for f in fields(cls):
            if "help" in f.metadata and f.name not in seen:
                seen.add(f.name)
                yield f


@dataclass(frozen=True)
class TrainingSettings:
    """What :class:`FitConfig` and an ``Experiment`` share: the training settings."""

    epochs: int = setting(
        10, "total epochs; with --resume, training continues up to N (default 10; presets: cpu 15, gpu 40, 60 "
        "for dates)", check="positive_int", limit=Limit(1, 100_000, TIME), metavar="N", preset=True)
    batch_size: int = setting(
        64, "sentence pairs per batch, per process (default 64; gpu preset 512, 128 for dates)",
        check="positive_int", limit=BATCH, metavar="B", preset=True)
    lr: float = setting(
        1e-3, "constant learning rate (default 0.001); not with --schedule noam, use --lr-scale",
        check="positive_float", limit=LEARNING_RATE, preset=True)
    schedule: str | None = setting(
        None, "'constant': --lr throughout (rnn default); 'noam': linear warmup then 1/sqrt(step) decay, "
        "Vaswani et al. eq. (3), set every batch (transformer presets)", choices=("constant", "noam"), preset=True)
    warmup: int = setting(
        4000, "--schedule noam: optimizer steps (batches) of warmup, where the rate peaks (presets: cpu 400, "
        "gpu 4000)", check="positive_int", limit=STEPS, metavar="STEPS", preset=True)
    lr_scale: float = setting(
        1.0, "--schedule noam: multiply the rate of eq. (3) by S (default 1); for an rnn its d_model is "
        "--hidden-dim", check="positive_float", limit=Limit(0.0, 1000.0, FLOAT32, open_low=True), metavar="S",
        preset=True)
    optimizer: str = setting(
        "adam", "Adam (default) or AdamW (decoupled weight decay; the gpu preset, without decay)",
        choices=OPTIMIZERS, preset=True)
    betas: tuple[float, float] = setting(
        (0.9, 0.999), "Adam's moment decay rates (default 0.9 0.999; transformer presets 0.9 0.98)",
        check="below_one", nargs=2, metavar=("B1", "B2"), preset=True)
    eps: float = setting(
        1e-8, "Adam's epsilon (default 1e-8; transformer presets 1e-9)", check="positive_float",
        limit=Limit(0.0, 1.0, FLOAT32, open_low=True), flag="--adam-eps", metavar="E", preset=True)
    weight_decay: float = setting(
        0.0, "weight decay (default 0; with --optimizer adam an L2 penalty, with adamw decoupled)",
        check="nonnegative_float", limit=WEIGHT_DECAY, metavar="W", preset=True)
    label_smoothing: float = setting(
        0.0, "label smoothing epsilon in [0, 1) (default 0; transformer presets 0.1); the reported losses stay "
        "the plain cross-entropy", check="below_one", metavar="EPS", preset=True)
    clip_norm: float | None = setting(
        1.0, "clip the gradient's global norm to C (default 1.0; gpu preset: no clipping)",
        check="positive_float", limit=CLIP_NORM, metavar="C", preset=True)
    amp: str | None = setting(
        None, "'bf16': bfloat16 autocast of the forward passes (gpu preset; about 2x faster on recent GPUs, "
        "allowed but usually slower on CPUs); 'none': float32 (default)", choices=("bf16", "none"), preset=True)
    fused: bool = setting(
        False, "fused Adam/AdamW kernel, on CUDA and the CPU (gpu preset); ignored on other devices", preset=True)
    compile: bool = setting(
        False, "torch.compile the training forward pass (first epoch slower; off by default)", preset=True)
    time_budget: float | None = setting(
        None, "stop training after SECONDS of wall-clock time (validation included), with a checkpoint; the "
        "learning rate cools down to 0 over the last fifth (gpu preset: 360; default: none)",
        check="positive_float", limit=SECONDS,
        metavar="SECONDS", preset=True)
    #: Not an option: the presets set it (fixed batch shapes for torch.compile).
    length_buckets: int | None = field(default=None, metadata={"preset": True})
    patience: int | None = setting(
        None, "stop after N epochs without a better validation exact match (ties: lower loss); default: train "
        "all epochs", check="positive_int", limit=Limit(1, 100_000, TIME), metavar="N")
    seed: int = setting(0, "seed of the initial weights, the batch order and dropout (default 0)", check="seed",
                        metavar="S")


@dataclass(frozen=True)
class FitConfig(TrainingSettings):
    """How :func:`~attncourse.train.fit` trains: the training settings and more.

    Fields without help: ``monitor`` (:data:`MONITORS`) picks the best epoch,
    ``restore_best`` loads it at the end, ``num_threads`` sets torch's CPU threads,
    ``d_model_for_schedule`` is noam's d_model (default: the model's). Raises
    ``ValueError`` if a value is out of range. Source: Vaswani et al. (2017), "Attention
    Is All You Need", sections 5.3-5.4.
    """

    teacher_forcing: float = setting(
        1.0, "probability of feeding the gold previous token; below 1 the decoder is sometimes fed its own "
        "prediction (scheduled sampling; slower). Default 1.0", check="probability", metavar="P")
    monitor: str = "exact_match"
    restore_best: bool = True
    device: str | None = setting(None, "'cpu', 'cuda', 'cuda:1', 'mps'; default: CUDA, then MPS, then the CPU",
                                 check="device", metavar="DEV")
    num_threads: int | None = None
    d_model_for_schedule: int | None = None

    def __post_init__(self) -> None:
        if int(self.epochs) < 1:
            raise ValueError(f"epochs must be at least 1, got {self.epochs}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if int(self.batch_size) < 1:
            raise ValueError(f"batch_size must be at least 1, got {self.batch_size}")
        if self.clip_norm is not None and not self.clip_norm > 0:
            raise ValueError(f"clip_norm must be positive or None, got {self.clip_norm}")
        if not 0.0 <= self.teacher_forcing <= 1.0:
            raise ValueError(f"teacher_forcing is a probability in [0, 1], got {self.teacher_forcing}")
        if self.patience is not None and int(self.patience) < 1:
            raise ValueError(f"patience must be at least 1 or None, got {self.patience}")
        if self.monitor not in MONITORS:
            raise ValueError(f"monitor must be one of {MONITORS}, got {self.monitor!r}")
        if self.num_threads is not None and int(self.num_threads) < 1:
            raise ValueError(f"num_threads must be at least 1 or None, got {self.num_threads}")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"label_smoothing must lie in [0, 1), got {self.label_smoothing}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        betas = tuple(float(b) for b in self.betas)
        if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas must be two numbers in [0, 1), got {self.betas}")
        object.__setattr__(self, "betas", betas)  # frozen
        if not self.eps > 0:
            raise ValueError(f"eps must be positive, got {self.eps}")
        if not self.weight_decay >= 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if self.schedule is not None and self.schedule not in SCHEDULES:
            raise ValueError(f"schedule must be None or one of {SCHEDULES}, got {self.schedule!r}")
        if int(self.warmup) < 1:
            raise ValueError(f"warmup must be at least 1 step, got {self.warmup}")
        if self.d_model_for_schedule is not None and int(self.d_model_for_schedule) < 1:
            raise ValueError(f"d_model_for_schedule must be at least 1 or None, got {self.d_model_for_schedule}")
        if not (self.lr_scale > 0 and math.isfinite(self.lr_scale)):
            raise ValueError(f"lr_scale must be a finite number > 0, got {self.lr_scale}")
        if self.length_buckets is not None and int(self.length_buckets) < 1:
            raise ValueError(f"length_buckets must be at least 1 or None, got {self.length_buckets}")
        if self.time_budget is not None and not (self.time_budget > 0 and math.isfinite(self.time_budget)):
            raise ValueError(f"time_budget must be a positive number of seconds or None, got {self.time_budget}")
        if self.amp is not None and self.amp not in AMP_DTYPES:
            raise ValueError(f"amp must be None or one of {AMP_DTYPES} (float16 would need a gradient scaler), "
                             f"got {self.amp!r}")


def fit_config_from(source: Any, **overrides: Any) -> FitConfig:
    """A :class:`FitConfig` of ``source``'s same-named attributes and ``overrides``.

    Raises ``ValueError`` as :class:`FitConfig`.
    """
    values = {f.name: getattr(source, f.name) for f in fields(FitConfig) if hasattr(source, f.name)}
    return FitConfig(**{**values, **overrides})
