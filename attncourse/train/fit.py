"""Training an encoder-decoder: the loop, validation, early stopping, checkpoints and resuming.

One epoch of :func:`fit` does, for every training batch (in an order drawn afresh
each epoch):

1. **Forward with teacher forcing**: the decoder reads the gold previous token
   y_{i-1} at every step (``Batch.tgt_in`` = ``<bos>`` y_1..y_T) and scores the
   next one; logits have shape (batch, tgt_len, tgt_vocab).
2. **Loss**: the cross-entropy -log p(y_i | y_<i, x) averaged over the real
   target tokens (``Batch.tgt_out`` = y_1..y_T ``<eos>``); padding is ignored.
   This is the negative log-likelihood that Bahdanau et al. (2015, section 2)
   and Sutskever et al. (2014, section 3.1) maximise.
3. **Update**: backpropagate, clip the gradient's global norm, take an Adam step.

After each epoch it measures the model on the validation batches: the same
loss and token accuracy under teacher forcing, and the exact match of greedy
decoding, where the model reads its *own* previous outputs as it must on new
data. It then writes a checkpoint, so that a run can stop at any moment and
continue later with ``resume=True`` along exactly the same path: the optimizer's
moments, the learning-rate schedule and the random generators are saved with
the weights.

The Transformer's recipe (Vaswani et al. 2017, sections 5.3-5.4) is a set of
:class:`FitConfig` options, all off by default so that the RNN chapters train
as before:

* ``label_smoothing=0.1``: the target distribution puts 1 - eps on the gold
  token and spreads eps evenly over the whole vocabulary (section 5.4). It
  makes the model less sure of itself: perplexity gets worse, BLEU better.
* ``schedule="noam"``, ``warmup=4000``: the learning rate of eq. (3), changed
  after every batch (:mod:`attncourse.train.schedule`).
* ``betas=(0.9, 0.98)``, ``eps=1e-9``: the paper's Adam settings.
* ``amp="bf16"``, ``fused=True``, ``compile=True``: speed on a GPU (bfloat16
  autocast, the fused AdamW kernel, ``torch.compile``); the numbers they give
  are not bit-for-bit those of float32.

Whatever the options, the history reports the *plain* cross-entropy (no
smoothing) and the token accuracy, so that learning curves of runs with and
without label smoothing can be put side by side.

Several processes (GPUs) train one model together when a process group is
initialised, e.g. under ``torchrun``: see :mod:`attncourse.train.distributed`.

References
----------
Kingma, Ba (2015), "Adam: A Method for Stochastic Optimization".
Pascanu, Mikolov, Bengio (2013), "On the difficulty of training recurrent neural
networks", section 3.2 (gradient norm clipping).
Bengio, Vinyals, Jaitly, Shazeer (2015), "Scheduled Sampling for Sequence
Prediction with Recurrent Neural Networks".
Prechelt (1998), "Early Stopping - But When?".
Vaswani et al. (2017), "Attention Is All You Need", sections 5.3 (optimizer) and
5.4 (label smoothing).
Szegedy et al. (2016), "Rethinking the Inception Architecture for Computer
Vision", section 7 (label smoothing).
Loshchilov, Hutter (2019), "Decoupled Weight Decay Regularization" (AdamW).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from attncourse.data.batching import Batch, make_batches
from attncourse.data.pairs import PairDataset, detokenize
from attncourse.data.vocab import Vocabulary
from attncourse.train import distributed as dist_utils
from attncourse.train.checkpoint import check_compatible, differences, load_checkpoint, save_checkpoint
from attncourse.decode.search import beam_search, greedy_decode
from attncourse.train.metrics import evaluate_by_bucket
from attncourse.runtime import pick_device, progress_bar
from attncourse.train.schedule import SCHEDULES, noam_lambda

PAD_ID = Vocabulary.pad_id
CHECKPOINT_NAME = "checkpoint.pt"
BEST_NAME = "best.pt"
MONITORS = ("exact_match", "loss")
OPTIMIZERS = ("adam", "adamw")
AMP_DTYPES = ("bf16",)

#: FitConfig fields that shape the training path; a resumed run must keep them. The first ones are
#: in every checkpoint; the later ones (with the Transformer's recipe) count as their defaults when absent.
_FIRST_REPLAY_FIELDS = ("lr", "batch_size", "clip_norm", "teacher_forcing", "seed", "monitor")
_REPLAY_FIELDS = _FIRST_REPLAY_FIELDS + ("label_smoothing", "optimizer", "betas", "eps", "weight_decay", "schedule",
                                         "warmup", "d_model_for_schedule", "lr_scale", "amp")

#: Below this, relative to the row's largest logit, logits are floored in the smoothed loss
#: (exp(-1e4) is 0 in float32 already, so no probability changes).
_LOGIT_FLOOR = 1e4


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
        if self.amp is not None and self.amp not in AMP_DTYPES:
            raise ValueError(f"amp must be None or one of {AMP_DTYPES} (float16 would need a gradient scaler), "
                             f"got {self.amp!r}")


@dataclass
class FitResult:
    """What :func:`fit` returns.

    Attributes
    ----------
    history : list of dict
        One dict per epoch (a resumed run includes the earlier epochs):
        ``epoch`` (1-based), ``train_loss`` and ``valid_loss`` (mean plain
        cross-entropy per target token, nats, even when training with label
        smoothing; ``train_loss`` is averaged over the epoch's updates, on all
        ranks), ``train_acc`` and ``valid_acc`` (token accuracy under teacher
        forcing, in [0, 1]), ``valid_exact_match`` (fraction of validation
        sentences that greedy decoding gets exactly right), ``seconds``
        (wall-clock time of the epoch's training and validation),
        ``train_tokens`` (target tokens trained on, all processes) and
        ``train_seconds`` (time of the training steps alone, on rank 0).
        Checkpoints written before the last two existed lack them. Timings
        (``seconds``, ``train_seconds``) are not replayed by a resume.
    best_epoch : int
        The epoch whose weights ``out_dir/best.pt`` holds (and the model, if
        ``restore_best``); 0 if no epoch ran.
    wall_time : float
        Seconds this call took, checkpoints included.
    device : str
        Where it ran, e.g. ``"cpu"`` or ``"cuda"``.
    stopped_early : bool
        True if the patience ran out before ``epochs``.
    train_tokens : int
        Target tokens (y_1..y_T and ``<eos>`` of every sentence) trained on in
        this call, summed over all processes.
    train_seconds : float
        Seconds this call spent in training steps (validation and checkpoints excluded).
    world_size : int
        Number of processes that trained together (1 without DDP).
    """

    history: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = 0
    wall_time: float = 0.0
    device: str = "cpu"
    stopped_early: bool = False
    train_tokens: int = 0
    train_seconds: float = 0.0
    world_size: int = 1

    @property
    def tokens_per_second(self) -> float:
        """Training throughput of this call: target tokens per second of training steps (0 if none ran)."""
        return self.train_tokens / self.train_seconds if self.train_seconds > 0 else 0.0


def _loss_terms(
    logits: torch.Tensor, tgt_out: torch.Tensor, pad_id: int = PAD_ID, label_smoothing: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(objective, plain cross-entropy (detached), n_correct, n_tokens), the counts as 0-dim tensors.

    Tensors, not Python numbers, so that a GPU training step does not wait for the GPU.
    """
    if logits.dim() != 3 or logits.shape[:2] != tgt_out.shape:
        raise ValueError(
            f"logits (batch, tgt_len, tgt_vocab) {tuple(logits.shape)} do not fit "
            f"tgt_out (batch, tgt_len) {tuple(tgt_out.shape)}"
        )
    if not 0.0 <= label_smoothing < 1.0:
        raise ValueError(f"label_smoothing must lie in [0, 1), got {label_smoothing}")
    # float32 even under bf16 autocast: log-softmax over a large vocabulary needs the precision.
    flat = logits.float().reshape(-1, logits.shape[-1])
    gold = tgt_out.reshape(-1)
    if label_smoothing > 0:
        # Smoothing gives every token eps / V of the target, so one logit of -inf (or any row whose
        # range overflows float32) would make the loss infinite. Shift each row to a maximum of 0
        # (softmax does not change; the max is detached because the loss is shift-invariant) and
        # floor at -1e4, where exp() is already 0 in float32.
        flat = (flat - flat.amax(dim=-1, keepdim=True).detach()).clamp(min=-_LOGIT_FLOOR)
        loss = F.cross_entropy(flat, gold, ignore_index=pad_id, label_smoothing=label_smoothing)
        with torch.no_grad():
            plain = F.cross_entropy(flat, gold, ignore_index=pad_id)
    else:
        loss = F.cross_entropy(flat, gold, ignore_index=pad_id)
        plain = loss.detach()
    real = tgt_out != pad_id
    n_correct = ((logits.argmax(dim=-1) == tgt_out) & real).sum()
    return loss, plain, n_correct, real.sum()


def sequence_loss(
    logits: torch.Tensor, tgt_out: torch.Tensor, pad_id: int = PAD_ID, label_smoothing: float = 0.0
) -> tuple[torch.Tensor, int, int]:
    """Mean token cross-entropy, ignoring padding, and the counts behind token accuracy.

    Parameters
    ----------
    logits : (batch, tgt_len, tgt_vocab)
        Unnormalised scores of y_i for every step (any float dtype; the loss is
        computed in float32).
    tgt_out : (batch, tgt_len) long
        Gold next tokens y_1..y_T ``<eos>``, ``pad_id`` at padding.
    pad_id : int
    label_smoothing : float in [0, 1)
        epsilon: the target puts ``1 - eps + eps / V`` on the gold token and
        ``eps / V`` on every other of the V tokens (Vaswani et al. 2017,
        section 5.4). The loss is then
        ``(1 - eps) * (-log p(y_i)) + eps * mean_k(-log p(k))``, averaged over
        the real tokens; it is finite for any logits, -inf included (see
        :class:`FitConfig`).

    Returns
    -------
    loss : scalar tensor
        -(1/N) sum log p(y_i | ...) over the N real target tokens (nats per
        token), smoothed if ``label_smoothing > 0``.
    n_correct : int
        Real positions where the argmax of ``logits`` is the gold token.
    n_tokens : int
        N.

    Raises
    ------
    ValueError
        If the shapes do not fit together or ``label_smoothing`` is out of range.

    References
    ----------
    Vaswani et al. (2017), section 5.4; Szegedy et al. (2016), section 7.
    """
    loss, _, n_correct, n_tokens = _loss_terms(logits, tgt_out, pad_id, label_smoothing)
    return loss, int(n_correct), int(n_tokens)


def _scheduled_sampling_logits(
    model: Any, batch: Batch, teacher_forcing: float, generator: torch.Generator
) -> torch.Tensor:
    """Decoder logits (batch, tgt_len, vocab) when each input token is gold with probability p."""
    for name in ("encode", "init_state", "decode_step"):
        if not hasattr(model, name):
            raise TypeError(f"teacher_forcing < 1 needs a model with encode, init_state and decode_step; "
                            f"{type(model).__name__} has no {name}")
    tgt_in = batch.tgt_in
    enc = model.encode(batch.src, batch.src_mask)
    state = model.init_state(enc)
    prev = tgt_in[:, 0]  # <bos>
    steps = []
    for i in range(tgt_in.shape[1]):
        if i > 0:
            # Coin flips on the CPU generator, so they replay identically on resume and on any device.
            gold = torch.rand(tgt_in.shape[0], generator=generator) < teacher_forcing
            prev = torch.where(gold.to(tgt_in.device), tgt_in[:, i], steps[-1].argmax(dim=-1))
        logits, state, _ = model.decode_step(prev, state, enc)
        steps.append(logits)
    return torch.stack(steps, dim=1)


def _autocast(device: torch.device, amp: str | None) -> contextlib.AbstractContextManager:
    """bfloat16 autocast on CUDA or the CPU for ``amp="bf16"``; a no-op for None."""
    if amp is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def _check_amp(device: torch.device, amp: str | None) -> None:
    if amp is None:
        return
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"amp={amp!r} runs on CUDA or the CPU, not on {device.type!r}; set amp=None")
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError(f"amp={amp!r}: this GPU ({torch.cuda.get_device_name(device)}) has no bfloat16 support")


def make_optimizer(model: torch.nn.Module, config: FitConfig, device: torch.device | str) -> torch.optim.Optimizer:
    """The optimizer :func:`fit` uses: Adam or AdamW with ``config``'s betas, eps and weight decay.

    Parameters
    ----------
    model : torch.nn.Module
        Already on ``device``.
    config : FitConfig
    device : torch.device or str
        ``config.fused`` takes effect on CUDA only.

    Returns
    -------
    torch.optim.Optimizer
        Its learning rate is ``config.lr``, or 1.0 with ``schedule="noam"``
        (the scheduler's multiplier is then the whole rate).
    """
    cls = torch.optim.AdamW if config.optimizer == "adamw" else torch.optim.Adam
    kwargs: dict[str, Any] = {
        "lr": 1.0 if config.schedule is not None else config.lr,
        "betas": tuple(config.betas),
        "eps": config.eps,
        "weight_decay": config.weight_decay,
    }
    if config.fused and torch.device(device).type == "cuda":
        kwargs["fused"] = True
    return cls(model.parameters(), **kwargs)


def make_scheduler(
    optimizer: torch.optim.Optimizer, config: FitConfig, model: torch.nn.Module | None = None
) -> torch.optim.lr_scheduler.LambdaLR | None:
    """The per-batch learning-rate scheduler of ``config.schedule`` (None for a constant rate).

    Raises
    ------
    ValueError
        If ``schedule="noam"`` and neither ``config.d_model_for_schedule`` nor
        ``model.config["d_model"]`` gives d_model.
    """
    if config.schedule is None:
        return None
    d_model = config.d_model_for_schedule
    if d_model is None:
        d_model = (getattr(model, "config", None) or {}).get("d_model")
    if d_model is None:
        raise ValueError(
            f"schedule={config.schedule!r} needs d_model: set FitConfig.d_model_for_schedule "
            f"({type(model).__name__} has no config['d_model'])"
        )
    return torch.optim.lr_scheduler.LambdaLR(optimizer, noam_lambda(int(d_model), config.warmup, config.lr_scale))


def _train_step(
    model: Any,
    forward: Callable[..., Any],
    batch: Batch,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    config: FitConfig,
    generator: torch.Generator,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One update; returns the batch's plain mean cross-entropy and its number of correct tokens (tensors).

    ``forward`` is the model as called for training (possibly wrapped by DDP or
    torch.compile); ``model`` is the plain module (for scheduled sampling and clipping).
    """
    with _autocast(device, config.amp):
        if config.teacher_forcing >= 1.0:
            logits = forward(batch.src, batch.src_mask, batch.tgt_in).logits
        else:
            logits = _scheduled_sampling_logits(model, batch, config.teacher_forcing, generator)
    loss, plain, n_correct, _ = _loss_terms(logits, batch.tgt_out, label_smoothing=config.label_smoothing)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if config.clip_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.clip_norm)
    optimizer.step()
    if scheduler is not None:
        scheduler.step()
    return plain, n_correct


def validate(model: Any, batches: Sequence[Batch], device: torch.device | str | None = None) -> dict[str, float]:
    """Validation loss and token accuracy under teacher forcing, and greedy exact match.

    Parameters
    ----------
    model
        A sequence-to-sequence model: ``model(src, src_mask, tgt_in).logits``
        and the decoding interface of :mod:`attncourse.decode.search`.
    batches : sequence of Batch
    device : torch.device or str, optional
        Where the model is; default: where its first parameter is.

    Returns
    -------
    dict
        ``valid_loss`` (nats per target token), ``valid_acc`` and
        ``valid_exact_match`` (fractions in [0, 1]).

    Raises
    ------
    ValueError
        If ``batches`` is empty.
    """
    if len(batches) == 0:
        raise ValueError("no validation batches: give at least one")
    if device is None:
        device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    loss_sum = 0.0
    correct = tokens = exact = sentences = 0
    try:
        with torch.no_grad():
            for batch in batches:
                batch = batch.to(device)
                logits = model(batch.src, batch.src_mask, batch.tgt_in).logits
                loss, n_correct, n_tokens = sequence_loss(logits, batch.tgt_out)
                loss_sum += float(loss) * n_tokens
                correct += n_correct
                tokens += n_tokens
                # max_len = T_max + 2 > T + 1 tokens (eos included) of any gold target: an output
                # cut at max_len is longer than every reference, so it is never counted as exact.
                # A model with P positions trains on targets of T <= P - 1 tokens, so the cap P
                # still exceeds every reference.
                max_len = decoding_limit(model, batch.tgt.shape[1])
                hyps, _ = greedy_decode(model, batch.src, batch.src_mask, max_len=max_len)
                lengths = batch.tgt_mask.sum(dim=1).tolist()
                gold_rows = batch.tgt.tolist()
                for hyp, row, length in zip(hyps, gold_rows, lengths):
                    exact += hyp == row[1 : length - 1]  # strip <bos> and <eos>
                sentences += len(hyps)
    finally:
        model.train(was_training)
    return {
        "valid_loss": loss_sum / max(tokens, 1),
        "valid_acc": correct / max(tokens, 1),
        "valid_exact_match": exact / max(sentences, 1),
    }


def _fingerprint(batches: Sequence[Batch]) -> str:
    """A hash of the training batches' token ids, so a resumed run can tell it has the same data."""
    digest = hashlib.sha256()
    for batch in batches:
        for tensor in (batch.src, batch.tgt):
            t = tensor.detach().to("cpu", torch.int64).contiguous()
            digest.update(str(tuple(t.shape)).encode())
            digest.update(t.numpy().tobytes())
    return digest.hexdigest()


def _replay_settings(config: FitConfig, world_size: int = 1) -> dict[str, Any]:
    settings = {name: getattr(config, name) for name in _REPLAY_FIELDS}
    settings["betas"] = list(settings["betas"])
    settings["world_size"] = int(world_size)  # it decides which batches each update sees
    return settings


def _saved_replay_settings(trainer: dict[str, Any]) -> dict[str, Any]:
    """The saved settings; a setting added after the checkpoint was written takes its default."""
    saved = trainer.get("fit_config", {})
    defaults = _replay_settings(FitConfig())
    return {**{k: v for k, v in defaults.items() if k not in _FIRST_REPLAY_FIELDS}, **saved}


def check_resume(
    out_dir: str | PathLike,
    model: torch.nn.Module,
    train_batches: Sequence[Batch],
    config: FitConfig,
    extra: dict[str, Any] | None = None,
    fingerprint: str | None = None,
) -> dict[str, Any]:
    """Check that ``out_dir/checkpoint.pt`` can be resumed by this run, and return it.

    :func:`fit` calls it when ``resume=True``; call it yourself to find out
    before anything else is written.

    Parameters
    ----------
    out_dir : str or path-like
    model : torch.nn.Module
        The model to resume; its ``config`` must match the saved one.
    train_batches : sequence of Batch
        Must hold the same token ids, in the same batches, as in the saved run.
    config : FitConfig
        The settings that shape the path (``lr``, ``batch_size``,
        ``clip_norm``, ``teacher_forcing``, ``seed``, ``monitor``,
        ``label_smoothing``, the optimizer's and the schedule's settings,
        ``amp``) and the number of processes must be the saved ones
        (``epochs``, ``patience``, ``restore_best``, ``device``,
        ``num_threads``, ``fused`` and ``compile`` may change). A checkpoint
        written before a setting existed counts as having its default.
    extra : dict, optional
        Must equal the saved ``extra`` (vocabularies, level, ...).
    fingerprint : str, optional
        Hash of ``train_batches`` if already computed.

    Returns
    -------
    dict
        The checkpoint, loaded on the CPU.

    Raises
    ------
    FileNotFoundError
        If there is no ``checkpoint.pt`` in ``out_dir``.
    ValueError
        If it is unreadable, or naming everything that differs from this run.
    """
    path = Path(out_dir) / CHECKPOINT_NAME
    if not path.is_file():
        raise FileNotFoundError(f"nothing to resume: no {CHECKPOINT_NAME} in {str(out_dir)!r}")
    saved = load_checkpoint(path, map_location="cpu")
    check_compatible(saved, model, {} if extra is None else extra, path)
    trainer = saved["trainer"]
    world_size = dist_utils.current().world_size
    problems = differences(_saved_replay_settings(trainer), _replay_settings(config, world_size), "setting")
    if fingerprint is None:
        fingerprint = _fingerprint(train_batches)
    if trainer.get("data_fingerprint") != fingerprint:
        problems.append("the training batches differ (other data, batch size or data seed)")
    if saved.get("optimizer_state") is None or "generator_state" not in trainer:
        problems.append("it holds no optimizer or generator state (is it a best.pt?)")
    elif config.schedule is not None and saved.get("scheduler_state") is None:
        problems.append("it holds no learning-rate scheduler state")
    if problems:
        raise ValueError(f"checkpoint {path} does not match this run: " + "; ".join(problems))
    return saved


def _score(row: dict[str, float], monitor: str) -> tuple[float, ...]:
    """Larger is better; NaN never counts as an improvement."""
    loss = row["valid_loss"]
    neg_loss = -loss if not math.isnan(loss) else -math.inf
    if monitor == "loss":
        return (neg_loss,)
    return (row["valid_exact_match"], neg_loss)


def best_epoch(history: Sequence[dict[str, float]], monitor: str = "exact_match") -> int:
    """The epoch :func:`fit` counts as best in ``history``: the first with the highest score; 0 if empty.

    ``monitor`` as in :class:`FitConfig`. For a run still in progress, e.g. in
    ``fit``'s callback, where :class:`FitResult` is not there yet.
    """
    best, best_score = 0, None
    for row in history:
        score = _score(row, monitor)
        if best_score is None or score > best_score:
            best, best_score = int(row["epoch"]), score
    return best


def _cpu_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def _rng_snapshot(device: torch.device) -> dict[str, torch.Tensor | None]:
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
    }


def _training_device(config: FitConfig, world: dist_utils.DistInfo) -> torch.device:
    device = pick_device(config.device)
    if world.distributed and device.type == "cuda" and device.index is None:
        device = torch.device("cuda", world.local_rank % torch.cuda.device_count())
    return device


def fit(
    model: torch.nn.Module,
    train_batches: Sequence[Batch],
    valid_batches: Sequence[Batch],
    config: FitConfig,
    out_dir: str | PathLike | None = None,
    resume: bool = False,
    progress: bool = True,
    extra: dict[str, Any] | None = None,
    callback: Callable[[list[dict[str, float]]], None] | None = None,
) -> FitResult:
    """Train a sequence-to-sequence model with Adam(W), validating and checkpointing every epoch.

    Parameters
    ----------
    model : torch.nn.Module
        ``model(src, src_mask, tgt_in)`` returns an object with ``logits``
        (batch, tgt_len, tgt_vocab), like :class:`~attncourse.nn.rnn.Seq2Seq`
        or :class:`~attncourse.nn.transformer.Transformer`; validation also
        decodes greedily with it. Moved to the chosen device and trained in place.
    train_batches : sequence of Batch
        Built once (e.g. :func:`~attncourse.data.batching.make_batches`); each
        epoch visits all of them in a fresh order drawn from a
        :class:`torch.Generator` seeded with ``config.seed`` (with several
        processes: see Notes).
    valid_batches : sequence of Batch
        Validation data, measured after every epoch.
    config : FitConfig
    out_dir : str or path-like, optional
        If given (created if missing), every epoch writes ``checkpoint.pt``
        (everything needed to resume) and, when the epoch is the best so far,
        ``best.pt`` (its weights), both atomically; an existing run there is
        overwritten unless ``resume``.
    resume : bool
        Continue the run saved in ``out_dir/checkpoint.pt`` with the epoch
        after the saved one, restoring weights, optimizer and scheduler state,
        history, best weights and random generator states. On the CPU the
        result equals an uninterrupted run bit for bit. Raise ``config.epochs``
        to train longer.
    progress : bool
        Show progress bars (``tqdm.auto``: a widget in a notebook, text in a
        terminal): one over epochs and one over each epoch's batches, with the
        running loss and accuracy.
    extra : dict, optional
        Plain data saved in both checkpoints, e.g. the vocabularies as
        ``Vocabulary.to_dict()`` and the data level; on resume it must equal the
        saved one.
    callback : callable, optional
        Called after each epoch, once its checkpoint is written, as
        ``callback(history)`` with a copy of the history so far (the last
        dict is the epoch just finished): to print, plot live curves or log.

    Returns
    -------
    FitResult
        Per-epoch history, best epoch, wall time (seconds), device and
        training throughput.

    Raises
    ------
    ValueError
        If there are no training or validation batches, a batch is larger than
        ``config.batch_size``, ``resume`` is set without ``out_dir``, or the
        checkpoint is unreadable or belongs to another run: a different model
        config, vocabulary (``extra``), training data or a setting listed in
        the message (lr, batch_size, clip_norm, teacher_forcing, seed, monitor,
        ...). Also for ``schedule="noam"`` without a known d_model, ``amp`` on a
        device that cannot do it, and ``teacher_forcing < 1`` with several processes.
    FileNotFoundError
        If ``resume`` is set and ``out_dir/checkpoint.pt`` does not exist.
    KeyboardInterrupt
        Passed on; the checkpoint of the last finished epoch stays on disk, so
        call again with ``resume=True``.

    Notes
    -----
    Seeding: ``torch.manual_seed(config.seed)`` is called at the start of a
    fresh run (dropout draws from torch's global generator), so call it
    yourself *before* building the model for a repeatable initialisation.
    Exact replay after ``resume`` holds on the CPU; CUDA kernels may be
    non-deterministic unless ``torch.use_deterministic_algorithms(True)``.

    Several processes: when a :mod:`torch.distributed` process group with two
    or more processes is initialised (``torchrun``, see
    :mod:`attncourse.train.distributed`), the model is wrapped in
    :class:`~torch.nn.parallel.DistributedDataParallel`, which averages the
    gradients, and each epoch every rank trains on its share of the batches
    (:func:`~attncourse.train.distributed.rank_batch_order`). Only rank 0
    validates, writes checkpoints, shows progress bars and calls ``callback``;
    it sends the scores to the others so that every rank takes the same
    early-stopping decision. The weights stay identical on all ranks. Dropout
    draws from ``config.seed + rank``. Give every rank the same arguments
    (data, config, ``out_dir``). On CUDA, rank r uses ``cuda:<LOCAL_RANK>``.
    """
    if len(train_batches) == 0:
        raise ValueError("no training batches: give at least one")
    if len(valid_batches) == 0:
        raise ValueError("no validation batches: give at least one")
    largest = max(len(b) for b in train_batches)
    if largest > config.batch_size:
        raise ValueError(
            f"a training batch holds {largest} examples but config.batch_size is {config.batch_size}; "
            "build the batches with the same batch_size"
        )
    if resume and out_dir is None:
        raise ValueError("resume=True needs the out_dir that holds checkpoint.pt")
    world = dist_utils.current()
    if world.distributed and config.teacher_forcing < 1.0:
        raise ValueError("teacher_forcing < 1 calls the decoder step by step, which DistributedDataParallel "
                         "cannot synchronise; use teacher_forcing=1.0 with several processes")
    start_time = time.perf_counter()
    device = _training_device(config, world)
    _check_amp(device, config.amp)
    is_main = world.is_main
    progress = progress and is_main
    out = None if out_dir is None else Path(out_dir)
    if out is not None and is_main:
        out.mkdir(parents=True, exist_ok=True)
    extra = {} if extra is None else dict(extra)
    replay = _replay_settings(config, world.world_size)
    fingerprint = _fingerprint(train_batches)

    previous_threads = torch.get_num_threads()
    if config.num_threads is not None:
        torch.set_num_threads(int(config.num_threads))
    was_training = model.training
    try:
        model.to(device)
        optimizer = make_optimizer(model, config, device)
        scheduler = make_scheduler(optimizer, config, model)
        generator = torch.Generator().manual_seed(config.seed)
        history: list[dict[str, float]] = []
        best_epoch, best_state = 0, None
        if resume:
            saved = check_resume(out, model, train_batches, config, extra, fingerprint)
            trainer = saved["trainer"]
            model.load_state_dict(saved["model_state"])
            optimizer.load_state_dict(saved["optimizer_state"])
            if scheduler is not None:
                scheduler.load_state_dict(saved["scheduler_state"])
            generator.set_state(trainer["generator_state"])
            rng = {"torch": trainer["torch_rng_state"], "cuda": trainer.get("cuda_rng_state")}
            by_rank = trainer.get("rank_rng_states")
            if isinstance(by_rank, list) and len(by_rank) == world.world_size:
                rng = by_rank[world.rank]
            torch.set_rng_state(rng["torch"])
            if device.type == "cuda" and rng.get("cuda") is not None:
                torch.cuda.set_rng_state(rng["cuda"], device)
            history = [dict(row) for row in saved["history"]]
            best_epoch = int(trainer["best_epoch"])
            best_state = trainer["best_model_state"]
        else:
            torch.manual_seed(config.seed + world.rank)
        start_epoch = len(history)
        best_score = _score(history[best_epoch - 1], config.monitor) if best_epoch else None
        stopped_early = False
        train_tokens, train_seconds = 0, 0.0

        forward: Any = model
        if world.distributed:
            from torch.nn.parallel import DistributedDataParallel

            forward = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
        if config.compile:
            forward = torch.compile(forward)
        # float64 sums of the epoch's losses (MPS has no float64)
        sum_dtype = torch.float32 if device.type == "mps" else torch.float64

        epochs_bar = progress_bar(total=config.epochs, initial=min(start_epoch, config.epochs), desc="epochs",
                                  unit="epoch", progress=progress, dynamic_ncols=True)
        try:
            for epoch in range(start_epoch + 1, config.epochs + 1):
                if config.patience is not None and best_epoch and epoch - 1 - best_epoch >= config.patience:
                    stopped_early = True
                    break
                epoch_start = time.perf_counter()
                model.train()
                if world.distributed:
                    order = dist_utils.rank_batch_order(len(train_batches), epoch, config.seed, world.rank,
                                                        world.world_size)
                else:
                    order = torch.randperm(len(train_batches), generator=generator).tolist()
                loss_sum = torch.zeros((), dtype=sum_dtype, device=device)
                correct = torch.zeros((), dtype=torch.int64, device=device)
                tokens = 0
                with progress_bar(total=len(order), desc=f"epoch {epoch}", unit="batch", leave=False,
                                  progress=progress, dynamic_ncols=True) as batch_bar:
                    for step, index in enumerate(order):
                        n_tokens = train_batches[index].n_tgt_tokens  # counted on the CPU: no GPU sync
                        batch = train_batches[index].to(device)
                        loss, n_correct = _train_step(model, forward, batch, optimizer, scheduler, config,
                                                      generator, device)
                        loss_sum += loss.to(sum_dtype) * n_tokens
                        correct += n_correct
                        tokens += n_tokens
                        batch_bar.update()
                        # reading the sums waits for the GPU: only now and then
                        if progress and (device.type == "cpu" or step % 25 == 0 or step == len(order) - 1):
                            batch_bar.set_postfix(loss=f"{float(loss_sum) / tokens:.3f}",
                                                  acc=f"{int(correct) / tokens:.3f}", refresh=False)
                totals = [float(loss_sum), int(correct), tokens]
                if world.distributed:
                    summed = torch.tensor(totals, dtype=torch.float64, device=device)
                    torch.distributed.all_reduce(summed)
                    totals = [float(summed[0]), int(summed[1]), int(summed[2])]
                epoch_train_seconds = time.perf_counter() - epoch_start
                train_seconds += epoch_train_seconds
                train_tokens += totals[2]
                row = {"epoch": epoch, "train_loss": totals[0] / totals[2], "train_acc": totals[1] / totals[2]}
                scores = None
                if is_main:  # in float32 whatever config.amp: scores compare across settings
                    # rank 0's training time too, so that every rank holds the same history
                    scores = {**validate(model, valid_batches, device), "train_seconds": epoch_train_seconds}
                row.update(dist_utils.broadcast_object(scores))
                row["seconds"] = time.perf_counter() - epoch_start
                row["train_tokens"] = totals[2]
                history.append(row)
                score = _score(row, config.monitor)
                if best_score is None or score > best_score:
                    best_epoch, best_score, best_state = epoch, score, _cpu_state(model)
                    if out is not None and is_main:
                        save_checkpoint(out / BEST_NAME, model=model, epoch=epoch, history=history, extra=extra)
                if out is not None:
                    rng_states = dist_utils.gather_objects(_rng_snapshot(device)) if world.distributed else None
                    if is_main:
                        trainer = {
                            "fit_config": replay,
                            "data_fingerprint": fingerprint,
                            "generator_state": generator.get_state(),
                            "torch_rng_state": torch.get_rng_state(),
                            "cuda_rng_state": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
                            "rank_rng_states": rng_states,
                            "best_epoch": best_epoch,
                            "best_model_state": best_state,
                        }
                        save_checkpoint(out / CHECKPOINT_NAME, model=model, optimizer=optimizer, epoch=epoch,
                                        history=history, extra=extra, trainer=trainer, scheduler=scheduler)
                epochs_bar.update()
                epochs_bar.set_postfix(valid_loss=f"{row['valid_loss']:.3f}",
                                       exact=f"{row['valid_exact_match']:.3f}", best=best_epoch)
                if callback is not None and is_main:
                    callback([dict(r) for r in history])
        finally:
            epochs_bar.close()
        if config.restore_best and best_state is not None:
            model.load_state_dict(best_state)
        if world.distributed:
            torch.distributed.barrier()  # rank 0's files are written before any rank returns
    finally:
        model.train(was_training)
        if config.num_threads is not None:
            torch.set_num_threads(previous_threads)
    return FitResult(
        history=history,
        best_epoch=best_epoch,
        wall_time=time.perf_counter() - start_time,
        device=device.type,
        stopped_early=stopped_early,
        train_tokens=train_tokens,
        train_seconds=train_seconds,
        world_size=world.world_size,
    )


def max_positions(model: Any) -> int | None:
    """Positions a model's sequences may take: ``model.max_len`` (a Transformer's), None for no limit (RNNs).

    A source of S tokens takes S + 1 positions (with ``<eos>``), a target of T
    tokens T + 1 (with ``<bos>``), so such a model takes at most
    ``max_positions - 1`` tokens per side.
    """
    value = getattr(model, "max_len", None)
    return None if value is None else int(value)


def decoding_limit(model: Any, max_len: int) -> int:
    """``max_len`` capped at the model's positions: a decoder step beyond them would fail."""
    positions = max_positions(model)
    return max_len if positions is None else min(max_len, positions)


def _default_edges(lengths: Sequence[int], n_buckets: int = 5) -> list[int]:
    lo, hi = int(min(lengths)), int(max(lengths))
    step = max(1, math.ceil((hi - lo + 1) / n_buckets))
    return list(range(lo, hi + 1, step))


def evaluate(
    model: Any,
    dataset: PairDataset,
    src_vocab: Vocabulary,
    tgt_vocab: Vocabulary,
    *,
    beam_size: int = 1,
    batch_size: int = 256,
    edges: Sequence[int] | None = None,
    max_len: int | None = None,
    length_penalty: float = 0.6,
) -> dict[str, Any]:
    """Decode a dataset and score it overall and by source length.

    Parameters
    ----------
    model
        A trained model with the decoding interface (:class:`~attncourse.nn.rnn.Seq2Seq`);
        it stays where it is (CPU or GPU).
    dataset : PairDataset
        Test pairs; their level (word or char) decides how outputs are joined into text.
    src_vocab, tgt_vocab : Vocabulary
        The vocabularies the model was trained with.
    beam_size : int
        1: greedy decoding (:func:`~attncourse.decode.search.greedy_decode`);
        more: :func:`~attncourse.decode.search.beam_search` with this many hypotheses.
    batch_size : int
        Sentences decoded at once.
    edges : sequence of int, optional
        Left edges of the source-length buckets, in tokens (see
        :func:`~attncourse.train.metrics.bucket_labels`). Default: five buckets of
        equal width from the shortest to the longest source.
    max_len : int, optional
        Most tokens generated per sentence; default twice the longest reference
        plus 5. Either way capped at the model's positions
        (:func:`decoding_limit`); an output cut there is scored as it is.
    length_penalty : float
        alpha of the beam search's length penalty (ignored when ``beam_size == 1``).

    Returns
    -------
    dict
        ``"metrics"``: :func:`~attncourse.train.metrics.evaluate_by_bucket`'s
        result, ``{"overall": row, bucket_label: row, ...}`` with exact match,
        token accuracy, BLEU and chrF (tokens are words or characters by the
        dataset's level); ``"sources"``, ``"references"`` and ``"hypotheses"``:
        lists of text in dataset order; ``"edges"``: the bucket edges used.

    Raises
    ------
    ValueError
        If ``beam_size`` or ``batch_size`` is below 1, the dataset is empty or a
        source is shorter than ``edges[0]``.
    """
    if beam_size < 1:
        raise ValueError(f"beam_size must be at least 1, got {beam_size}")
    if len(dataset) == 0:
        raise ValueError(f"dataset {dataset.name!r} is empty")
    lengths = dataset.src_lengths().tolist()
    edges = _default_edges(lengths) if edges is None else [int(e) for e in edges]
    if max_len is None:
        max_len = 2 * int(dataset.tgt_lengths().max()) + 5
    max_len = decoding_limit(model, max_len)
    outputs: list[list[str] | None] = [None] * len(dataset)
    for batch in make_batches(dataset, src_vocab, tgt_vocab, batch_size, shuffle=False):
        if beam_size == 1:
            ids, _ = greedy_decode(model, batch.src, batch.src_mask, max_len=max_len)
        else:
            ids, _ = beam_search(model, batch.src, batch.src_mask, beam_size=beam_size, max_len=max_len,
                                 length_penalty=length_penalty)
        for i, hyp in zip(batch.index.tolist(), ids):
            outputs[i] = tgt_vocab.decode(hyp)
    refs = [list(tgt) for _, tgt in dataset.pairs]
    metrics = evaluate_by_bucket(lengths, outputs, refs, edges)
    level = dataset.level
    return {
        "metrics": metrics,
        "sources": [detokenize(src, level) for src, _ in dataset.pairs],
        "references": [detokenize(tgt, level) for tgt in refs],
        "hypotheses": [detokenize(hyp, level) for hyp in outputs],
        "edges": edges,
    }

