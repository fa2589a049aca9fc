"""The settings of a training run of :func:`~attncourse.train.fit.fit`: :class:`FitConfig`.

They are written once, here: :class:`~attncourse.recipes.experiment.Experiment`
derives its :class:`FitConfig` from its fields of the same names
(:func:`fit_config_from`), and so does the command line from its options.

References
----------
Pascanu, Mikolov, Bengio (2013), section 3.2 (gradient norm clipping).
Bengio, Vinyals, Jaitly, Shazeer (2015) (scheduled sampling).
Prechelt (1998), "Early Stopping - But When?".
Vaswani et al. (2017), sections 5.3 (optimizer) and 5.4 (label smoothing).
Loshchilov, Hutter (2019), "Decoupled Weight Decay Regularization" (AdamW).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

from attncourse.train.loop import AMP_DTYPES
from attncourse.train.schedule import SCHEDULES

MONITORS = ("exact_match", "loss")
OPTIMIZERS = ("adam", "adamw")


@dataclass
class FitConfig:
    """How :func:`fit` trains.

    Attributes
    ----------
    epochs : int
        Total number of epochs (passes over the training batches). A resumed
        run continues up to this number, so raise it to train longer.
    lr : float
        Adam's learning rate.
    batch_size : int
        Examples per batch, as used to build ``train_batches`` (e.g. with
        :func:`~attncourse.data.batching.make_batches`); :func:`fit` does not
        re-batch, it checks that no batch is larger and records the value.
    clip_norm : float or None
        Rescale the gradient whenever its global L2 norm exceeds this
        (Pascanu et al. 2013); ``None`` turns clipping off. RNNs occasionally
        produce huge gradients ("exploding gradients"); one such step can undo
        an epoch of training.
    teacher_forcing : float in [0, 1]
        Probability of feeding the gold previous token y_{i-1} to the decoder.
        1.0 (the default, and what Bahdanau et al. 2015 do) is pure teacher
        forcing: fast, because the whole target is scored in one call. Below 1,
        at every step after the first and for every sentence independently,
        the decoder is fed its own most probable previous token instead with
        probability ``1 - teacher_forcing``: a constant-rate form of *scheduled
        sampling* (Bengio et al. 2015, who lower the probability over training
        and sample the model's token). It narrows the gap between training,
        where the decoder always sees correct prefixes, and decoding, where it
        sees its own mistakes. It needs a model with ``encode``,
        ``init_state`` and ``decode_step`` and runs step by step (slower).
    patience : int or None
        Early stopping: stop after this many epochs in a row without a new
        best validation score (see ``monitor``). ``None`` trains all epochs.
    monitor : {"exact_match", "loss"}
        What "best" means. ``"exact_match"`` (default): the highest greedy
        exact match on the validation set, ties broken by the lower validation
        loss. Exact match is what the course's tasks are judged by, and the
        tie-break matters: early in training exact match sits at 0 for several
        epochs while the loss is still falling, and those epochs count as
        progress instead of running out the patience. The loss alone can
        rise (the model grows over-confident on a few tokens) while exact
        match still improves. ``"loss"``: the lowest validation loss.
    restore_best : bool
        At the end, load the weights of the best epoch into the model (they are
        also in ``out_dir/best.pt``). If False the model keeps its last weights.
    seed : int
        Seeds the order of the batches in each epoch (a :class:`torch.Generator`)
        and torch's global generator (dropout). Initialise the model yourself
        after ``torch.manual_seed`` for a fully repeatable run.
    device : str or None
        ``"cpu"``, ``"cuda"``, ``"mps"`` ...; ``None`` picks CUDA, then MPS,
        then the CPU (:func:`~attncourse.runtime.pick_device`).
    num_threads : int or None
        CPU threads for torch during the run (restored afterwards); ``None``
        leaves the setting as it is. The course's models are small: their
        matrix products are too small to gain from several threads, and the
        threads' synchronisation costs more than it saves. On a shared 2-core machine
        one thread trained a 0.1M- to 1.6M-parameter model 3 to 10 times faster
        than two, so ``python -m attncourse train`` uses 1 by default.
    label_smoothing : float in [0, 1)
        epsilon of label smoothing (Vaswani et al. 2017, section 5.4, who use
        0.1; Szegedy et al. 2016): the training target is ``1 - eps`` on the
        gold token plus ``eps / V`` on each of the V tokens of the vocabulary
        (:func:`torch.nn.functional.cross_entropy` with ``label_smoothing``);
        padding positions are ignored. 0 (the default) is the plain
        cross-entropy. The loss is computed in float32 from logits shifted to a
        maximum of 0 and floored at -1e4, so it stays finite even for logits of
        -inf or of any float32 magnitude (a token with probability 0 would
        otherwise make the smoothed loss infinite). The history's
        ``train_loss`` and ``valid_loss`` stay the plain cross-entropy either way.
    optimizer : {"adam", "adamw"}
        :class:`torch.optim.Adam` (``weight_decay`` is an L2 penalty added to the
        gradient) or :class:`torch.optim.AdamW` (decoupled weight decay,
        Loshchilov and Hutter 2019). With ``weight_decay=0`` they are the same
        algorithm; the paper uses Adam without decay.
    betas : (float, float)
        Adam's decay rates of the first and second moment estimates; the paper's
        Transformer uses (0.9, 0.98).
    eps : float
        Adam's epsilon (the paper: 1e-9).
    weight_decay : float
        0 by default, also for AdamW (whose own default is 0.01).
    schedule : {None, "noam"}
        None: the constant rate ``lr``. ``"noam"``: the rate of eq. (3),
        ``lr_scale * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)`` set
        before every optimizer step (:func:`~attncourse.train.schedule.noam_lambda`);
        ``lr`` is then not used.
    warmup : int
        warmup_steps of the ``"noam"`` schedule, in optimizer steps (batches):
        the rate rises linearly up to this step and decays as ``step^-0.5`` after.
    d_model_for_schedule : int or None
        d_model of eq. (3); None takes ``model.config["d_model"]``, so it is
        needed only for models without one (the RNNs).
    lr_scale : float
        Multiplies the ``"noam"`` rate (1.0 in the paper).
    fused : bool
        Use the fused (single-kernel) Adam/AdamW implementation. CUDA only: on
        other devices it is ignored (the result is the same, only slower).
    amp : {None, "bf16"}
        Automatic mixed precision: run the training forward passes under
        :func:`torch.autocast` with bfloat16, on CUDA or on the CPU. bfloat16
        has float32's exponent range, so no loss scaling is needed; weights,
        optimizer state and the loss stay float32, and validation runs in
        float32, so that its scores compare across settings. On CUDA
        GPUs with bfloat16 units (A100, H100) it is about twice as fast; on
        most CPUs it is slower than float32 and is there to try the code path.
        float16 is not offered (it would need a gradient scaler).
    compile : bool
        Compile the training forward pass with :func:`torch.compile` (first
        epoch slower, then faster on GPUs; needs a C++ compiler on the CPU,
        where it rarely pays off). Batches of new shapes trigger recompiles
        until torch marks the lengths dynamic. Validation and decoding run the
        plain model.
    length_buckets : int or None
        Pad the training batches to at most this many fixed shapes, filling
        every batch up to ``batch_size`` rows with rows that count for nothing
        (:func:`~attncourse.data.batching.pad_to_buckets`), and compile for
        exact shapes: ``compile`` then compiles one graph per bucket instead of
        one per batch length. None (default): the batches as given.
    time_budget : float or None
        Stop training after this many seconds of wall-clock time (validation
        included), counted from the start of this call: the epoch under way stops
        after its current step, is validated and checkpointed, and the run ends
        (``FitResult.out_of_time``). The learning rate cools down linearly to 0
        over the budget's last fifth (:class:`~attncourse.train.schedule.TimeBudget`),
        so that the run ends with settled weights whatever the number of steps
        it managed. None (default): no budget. With several processes the budget
        is checked between epochs only, and without the cool-down.

    Raises
    ------
    ValueError
        If a value is out of range (``epochs < 1``, ``lr <= 0``, ...).
    """

    epochs: int = 10
    lr: float = 1e-3
    batch_size: int = 64
    clip_norm: float | None = 1.0
    teacher_forcing: float = 1.0
    patience: int | None = None
    monitor: str = "exact_match"
    restore_best: bool = True
    seed: int = 0
    device: str | None = None
    num_threads: int | None = None
    label_smoothing: float = 0.0
    optimizer: str = "adam"
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    schedule: str | None = None
    warmup: int = 4000
    d_model_for_schedule: int | None = None
    lr_scale: float = 1.0
    fused: bool = False
    amp: str | None = None
    compile: bool = False
    length_buckets: int | None = None
    time_budget: float | None = None

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
        self.betas = betas
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
    """The :class:`FitConfig` whose every field takes ``source``'s attribute of the same name.

    Fields ``source`` lacks keep their defaults; ``overrides`` win over both. One
    place maps a run's description (an :class:`~attncourse.recipes.experiment.Experiment`,
    the command line's options) to the engine's settings, so a setting added to
    :class:`FitConfig` reaches every caller that names it.

    Raises
    ------
    ValueError
        From :class:`FitConfig` for a value out of range.
    """
    values = {f.name: getattr(source, f.name) for f in fields(FitConfig) if hasattr(source, f.name)}
    return FitConfig(**{**values, **overrides})
