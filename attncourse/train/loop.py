"""The training engine's one loop: epochs, validation, best epoch, early stopping, checkpoints.

:func:`run_epochs` runs a ``train_epoch(epoch)`` function (one epoch, given an
:class:`Epoch`) and a validation function each epoch, keeps the best epoch, stops
early and calls a ``save`` function. :func:`~attncourse.train.fit.fit` and
:func:`train_epochs` (every other model; its runs live in
:mod:`~attncourse.train.store`) are its two front ends.

References
----------
Prechelt (1998), "Early Stopping - But When?".
"""

from __future__ import annotations

import contextlib
import numbers
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from attncourse.runtime import (
    announce_loaded,
    book_build,
    pick_device,
    progress_bar,
    training_seed,
)
from attncourse.train import distributed as dist_utils
from attncourse.train import store
from attncourse.train.checkpoint import validate_compatible
from attncourse.train.schedule import TimeBudget

AMP_DTYPES = ("bf16",)
#: Where rank 0's training time travels with the validation scores (not a metric).
_TRAIN_SECONDS = "train_seconds"


@dataclass
class Epoch:
    """One epoch's tools, handed by the loop to a ``train_epoch`` function.

    ``number`` is 1-based; ``forward`` is ``model`` as called for training (wrapped by
    DDP and/or :func:`torch.compile`); ``state`` holds plain values carried from epoch to
    epoch (checkpointed); ``budget`` is the run's wall-clock budget (:meth:`out_of_time`);
    ``on_step`` is called after every :meth:`step`.
    """

    number: int
    model: torch.nn.Module
    forward: Callable[..., Any]
    optimizer: torch.optim.Optimizer
    state: dict
    device: torch.device
    scheduler: Any = None
    amp: str | None = None
    clip_norm: float | None = None
    progress: bool = False
    world: dist_utils.DistInfo = field(default_factory=dist_utils.DistInfo)
    budget: TimeBudget | None = None
    on_step: Callable[[], Any] | None = None

    def out_of_time(self) -> bool:
        """True once the run's time budget is spent (a host clock read: no device sync)."""
        return self.budget is not None and self.budget.expired()

    def autocast(self) -> contextlib.AbstractContextManager:
        """bfloat16 autocast for ``amp="bf16"``; else a no-op."""
        return autocast(self.device, self.amp)

    def step(self, loss: torch.Tensor) -> None:
        """One update: zero the gradients, backpropagate ``loss``, clip, step optimizer and scheduler."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.clip_norm is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip_norm)
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        if self.budget is not None and self.budget.cooldown > 0:
            # after the scheduler, which sets every rate afresh from its base: the factor never compounds
            factor = self.budget.factor()
            for group in self.optimizer.param_groups:
                group["lr"] *= factor
        if self.on_step is not None:
            self.on_step()


TrainEpoch = Callable[[Epoch], Mapping[str, float]]
Evaluate = Callable[[torch.nn.Module], Mapping[str, float]]
Build = Callable[[torch.device], tuple[torch.nn.Module, torch.optim.Optimizer]]
Score = Callable[[Mapping[str, float]], tuple[float, ...]]


@dataclass
class Loop:
    """What the loop offers, set per run.

    ``epochs`` in all (a resumed run continues up to it); ``score(row)`` larger is better,
    keeping the best epoch's weights; ``patience`` epochs without a new best stop the run;
    ``time_budget`` seconds from the start of the call end the run after the epoch that
    spends them, the rate cooling down over its last ``cooldown`` fraction
    (:class:`~attncourse.train.schedule.TimeBudget`); ``static_shapes`` compiles with
    ``dynamic=False``; ``steps_per_epoch`` makes the bar count steps; ``seconds`` is what a
    row's ``seconds`` counts (``"epoch"``: validation included, ``"training"``: the steps
    alone); ``postfix(row, best_epoch)`` is what the bar shows; ``callback(history)`` runs
    on rank 0 after each epoch's checkpoint.

    Raises
    ------
    ValueError
        If ``epochs`` is not a positive int, ``patience`` has no ``score``, or ``amp``
        is not None or ``"bf16"``.
    """


    epochs: int
    score: Score | None = None
    patience: int | None = None
    restore_best: bool = False
    amp: str | None = None
    compile: bool = False
    static_shapes: bool = False
    time_budget: float | None = None
    cooldown: float = 0.2
    clip_norm: float | None = None
    progress: bool = True
    steps_per_epoch: int | None = None
    desc: str = "epochs"
    leave: bool = True
    seconds: str = "epoch"
    postfix: Callable[[dict, int], dict] | None = None
    callback: Callable[[list[dict]], None] | None = None

    def __post_init__(self) -> None:
        if int(self.epochs) != self.epochs or self.epochs < 1:
            raise ValueError(f"epochs must be a positive int, got {self.epochs!r}")
        if self.patience is not None and self.score is None:
            raise ValueError("patience needs a score: early stopping stops when the score no longer improves")
        if self.amp is not None and self.amp not in AMP_DTYPES:
            raise ValueError(f"amp must be None or one of {AMP_DTYPES} (float16 would need a gradient scaler), "
                             f"got {self.amp!r}")


@dataclass
class Record:
    """The run so far: history, best epoch, whether it stopped early."""

    history: list[dict] = field(default_factory=list)
    best_epoch: int = 0
    best_state: dict[str, torch.Tensor] | None = None
    stopped_early: bool = False
    out_of_time: bool = False

    def add(self, row: dict, score: Score | None, model: torch.nn.Module) -> bool:
        """Append ``row``; True if it is a new best epoch (then its weights are kept, on the CPU)."""
        self.history.append(row)
        if score is None:
            return False
        if self.best_epoch and not score(row) > score(self.history[self.best_epoch - 1]):
            return False
        self.best_epoch, self.best_state = int(row["epoch"]), cpu_state(model)
        return True

    def out_of_patience(self, epoch: int, patience: int | None) -> bool:
        return patience is not None and bool(self.best_epoch) and epoch - 1 - self.best_epoch >= patience


def autocast(device: torch.device, amp: str | None) -> contextlib.AbstractContextManager:
    """bfloat16 autocast on CUDA or the CPU for ``amp="bf16"``; a no-op for None."""
    if amp is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16)


def validate_amp(device: torch.device, amp: str | None) -> None:
    """Raise ValueError if ``device`` cannot run ``amp``."""
    if amp is None:
        return
    if device.type not in ("cuda", "cpu"):
        raise ValueError(f"amp={amp!r} runs on CUDA or the CPU, not on {device.type!r}; set amp=None")
    if device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise ValueError(f"amp={amp!r}: this GPU ({torch.cuda.get_device_name(device)}) has no bfloat16 support")


def cpu_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """A copy of the model's weights on the CPU."""
    return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}


def training_forward(model: torch.nn.Module, device: torch.device, compile: bool = False,
                     static_shapes: bool = False) -> Any:
    """The model as called for training: DDP-wrapped with several processes, compiled on request."""
    forward: Any = model
    if dist_utils.current().distributed:
        from torch.nn.parallel import DistributedDataParallel

        forward = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    if compile:
        forward = torch.compile(forward, dynamic=False) if static_shapes else torch.compile(forward)
    return forward


def _plain_row(row: dict) -> dict:
    for key, value in row.items():
        if not isinstance(value, numbers.Real):
            raise ValueError(f"metric {key!r} must be a number, got {type(value).__name__}: {value!r}")
        is_count = isinstance(value, int) and not isinstance(value, bool)
        row[key] = value if is_count else float(value)
    return row


def _epoch_row(epoch: Epoch, train_epoch: TrainEpoch, evaluate: Evaluate, seconds: str) -> dict:
    """Train one epoch, validate on rank 0, and return the epoch's history row (the same on every rank)."""
    start = time.perf_counter()
    epoch.model.train()
    train_metrics = dict(train_epoch(epoch))
    scores = None
    if epoch.world.is_main:
        train_seconds = time.perf_counter() - start
        epoch.model.eval()
        with torch.no_grad():
            scores = {**evaluate(epoch.model), _TRAIN_SECONDS: train_seconds}
    scores = dict(dist_utils.broadcast_object(scores))
    train_seconds = scores.pop(_TRAIN_SECONDS)
    row = {"epoch": epoch.number, **train_metrics, **scores}
    if seconds == "training":
        row["seconds"] = train_seconds
    else:
        row.update({_TRAIN_SECONDS: train_seconds, "seconds": time.perf_counter() - start})
    return _plain_row(row)


def _postfix(row: dict, best_epoch: int) -> dict:
    return {k: f"{v:.3g}" for k, v in row.items() if k not in ("epoch", "seconds", _TRAIN_SECONDS)}


def run_epochs(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    train_epoch: TrainEpoch,
    evaluate: Evaluate,
    loop: Loop,
    record: Record | None = None,
    *,
    device: torch.device,
    state: dict | None = None,
    scheduler: Any = None,
    save: Callable[[int, Record, bool], None] | None = None,
    begin_epoch: Callable[[int], None] | None = None,
    cached: str | Path | None = None,
) -> Record:
    """Train ``model`` from the epoch after ``record``'s last up to ``loop.epochs``.

    Parameters
    ----------
    model : torch.nn.Module
        On ``device``, ``optimizer`` built over its parameters.
    train_epoch : callable(Epoch) -> dict
        One pass over the training data; returns training metrics (numbers).
    evaluate : callable(model) -> dict
        Validation metrics (numbers), on rank 0, in eval mode, under ``torch.no_grad()``.
    loop : Loop
    record : Record, optional
        The run so far; default a new run.
    device : torch.device
    state : dict, optional
        ``Epoch.state``, changed in place.
    scheduler : LRScheduler, optional
    save : callable(epoch, record, improved), optional
        Called on every rank after each epoch (``improved``: a new best epoch).
    begin_epoch : callable(epoch), optional
        Called before each epoch (to seed it).
    cached : path, optional
        The run's folder in the store: an unfinished one is refused while grading
        (:func:`~attncourse.train.store.refuse_while_grading`).

    Returns
    -------
    Record
        ``record``, grown; with ``loop.restore_best`` the model holds the best epoch's weights.

    Raises
    ------
    ValueError
        If ``loop.amp`` cannot run on ``device`` or a metric is not a number.
    attncourse.runtime.UnpreparedRun
        If ``cached`` is unfinished while grading.
    """

    record = Record() if record is None else record
    state = {} if state is None else state
    world = dist_utils.current()
    validate_amp(device, loop.amp)
    forward = training_forward(model, device, loop.compile, loop.static_shapes)
    budget = None
    if loop.time_budget is not None:
        # several processes: no cool-down, whose factor read from each rank's own clock would
        # give the ranks different rates (and different weights)
        budget = TimeBudget(loop.time_budget, 0.0 if world.distributed else loop.cooldown)
        budget.start()
    shown = loop.progress and world.is_main
    start = len(record.history)
    finished = start >= loop.epochs or (start > 0 and record.out_of_patience(start + 1, loop.patience))
    if cached is not None and not finished:  # grading loads prepared runs, never trains one
        store.refuse_while_grading(str(cached), start, loop.epochs)
    if shown and finished:  # a bar frozen at its end would look like a stalled run
        announce_loaded(loop.desc, start * (loop.steps_per_epoch or 1),
                        "steps" if loop.steps_per_epoch else "epochs")
    per_epoch = loop.steps_per_epoch or 1
    bar = progress_bar(total=loop.epochs * per_epoch, initial=min(start, loop.epochs) * per_epoch,
                       desc=loop.desc, unit="step" if loop.steps_per_epoch else "epoch",
                       leave=loop.leave, progress=shown and not finished, dynamic_ncols=True)
    with bar:
        for number in range(start + 1, loop.epochs + 1):
            if record.out_of_patience(number, loop.patience):
                record.stopped_early = True
                break
            if begin_epoch is not None:
                begin_epoch(number)
            epoch = Epoch(number, model, forward, optimizer, state, device, scheduler, loop.amp,
                          loop.clip_norm, shown, world, budget,
                          on_step=bar.update if loop.steps_per_epoch else None)
            row = _epoch_row(epoch, train_epoch, evaluate, loop.seconds)
            improved = record.add(row, loop.score, model)
            if save is not None:
                save(number, record, improved)
            bar.update(number * per_epoch - bar.n)  # the epoch's end, whatever its steps counted
            bar.set_postfix((loop.postfix or _postfix)(row, record.best_epoch))
            if loop.callback is not None and world.is_main:
                loop.callback([dict(r) for r in record.history])
            # every rank decides alike: rank 0's clock
            if budget is not None and dist_utils.broadcast_object(budget.expired()):
                record.out_of_time = True
                break
    if loop.restore_best and record.best_state is not None:
        model.load_state_dict(record.best_state)
    return record


@dataclass
class EpochRun:
    """What :func:`train_epochs` returns.

    ``model`` is in eval mode, with the best epoch's weights when there is a ``score``;
    ``history`` has one row per epoch (``epoch``, ``seconds`` of training, the metrics);
    ``seconds`` is their sum; ``best_epoch`` is 0 without a ``score``.
    """


    model: torch.nn.Module
    history: list[dict]
    state: dict
    out_dir: Path
    seconds: float
    best_epoch: int = 0
    stopped_early: bool = False


def _epoch_seed(seed: int, epoch: int, rank: int = 0) -> int:
    # rank 0 keeps the seeds of a single process; other ranks draw other samples. Modulo
    # 2**63: torch seeds are 64-bit; seeds below ~9.2e13 (all of the course's) are unchanged
    return (int(seed) * 100_003 + int(epoch) + 1_000_003 * int(rank)) % 2**63


def _resume(saved: dict | None, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
            path: Path) -> tuple[Record, dict]:
    """Load a stored run (:func:`~attncourse.train.store.load_run`) into the arguments; the run so far."""
    if saved is None:
        return Record(), {}
    # the model class, its config and every weight's name, shape and dtype, before loading any
    validate_compatible(saved, model, path=path)
    if saved["optimizer_state"] is None:
        raise ValueError(f"{path} holds no optimizer state to resume from (is it a best.pt?)")
    model.load_state_dict(saved["model_state"])
    optimizer.load_state_dict(saved["optimizer_state"])
    trainer = saved["trainer"]
    record = Record(list(saved["history"]), int(trainer.get("best_epoch", 0)), trainer.get("best_model_state"))
    return record, dict(trainer.get("state", {}))


def train_epochs(
    name: str,
    config: Mapping[str, Any],
    build: Build,
    train_epoch: TrainEpoch,
    evaluate: Evaluate,
    epochs: int,
    *,
    seed: int = 0,
    progress: bool = True,
    device: str | torch.device | None = None,
    out_dir: str | Path | None = None,
    amp: str | None = None,
    compile: bool = False,
    clip_norm: float | None = None,
    score: Score | None = None,
    patience: int | None = None,
    extendable: Collection[str] = (),
    steps_per_epoch: int | None = None,
) -> EpochRun:
    """Train for ``epochs`` epochs in the store, or resume or load the run stored there.

    Parameters
    ----------
    name : str
        The run's prefix, e.g. ``"canvases/hard-seed0"``.
    config : mapping
        JSON-able description of everything that shapes the run: the store's key
        (:func:`~attncourse.train.store.run_name`), saved with the run and compared on load.
    build : callable(device) -> (model, optimizer)
        Called once, right after ``torch.manual_seed(seed)``.
    train_epoch : callable(Epoch) -> dict
        One pass over the training data; train through ``epoch.forward`` under
        ``epoch.autocast()`` and update with ``epoch.step(loss)``.
    evaluate : callable(model) -> dict
        Validation metrics (numbers).
    epochs : int
        Epochs in all; a stored run with fewer continues up to it.
    seed : int
        Seeds the initial weights and every epoch (``seed``, epoch, rank).
    progress : bool
        A bar over epochs (or steps); a finished run prints one line instead.
    device : str or torch.device, optional
        Default :func:`~attncourse.runtime.pick_device`.
    out_dir : path, optional
        Default the store's folder, locked while it trains (:func:`~attncourse.train.store.open_run`).
    amp, compile, clip_norm, score, patience
        As in :class:`Loop`; put ``amp`` in ``config`` too.
    extendable : collection of str
        Keys of ``config`` that may differ from the stored run's (a step budget).
    steps_per_epoch : int, optional
        ``Epoch.step`` calls per epoch, for the bar.

    Returns
    -------
    EpochRun

    Raises
    ------
    ValueError
        If ``epochs`` is not a positive int, a metric is not a number, or the folder
        holds a run of another config or an unreadable one.
    TypeError
        If ``config`` or ``state`` holds values that are not plain data.
    attncourse.runtime.UnpreparedRun
        If the run would train while grading.
    """

    # a cell trains many runs: in JupyterLab each bar goes when done, on a page each stays
    # as one line of final state (attncourse.runtime.BookBar)
    loop = Loop(epochs, score=score, patience=patience, restore_best=score is not None, amp=amp,
                compile=compile, clip_norm=clip_norm, progress=progress, desc=name, leave=book_build(),
                steps_per_epoch=steps_per_epoch,
                seconds="training")
    config = dict(config)
    with store.open_run(store.run_name(name, config), out_dir) as out:
        out.mkdir(parents=True, exist_ok=True)
        device = pick_device(None if device is None else str(device))
        seed = training_seed(seed)  # plus $ATTNCOURSE_SEED_OFFSET (make claims' other-seeds)
        torch.manual_seed(seed)
        model, optimizer = build(device)
        saved = store.load_run(out, config, extendable, map_location=device)
        record, state = _resume(saved, model, optimizer, out / store.CHECKPOINT)
        is_main = dist_utils.current().is_main
        rank = dist_utils.current().rank

        def save(epoch: int, record: Record, improved: bool) -> None:
            if not is_main:
                return
            trainer: dict[str, Any] = {"state": state}
            if score is not None:
                trainer.update(best_epoch=record.best_epoch, best_model_state=record.best_state)
            store.save_run(out, config, model=model, optimizer=optimizer, epoch=epoch,
                           history=record.history, extra={"name": name}, trainer=trainer)

        run_epochs(model, optimizer, train_epoch, evaluate, loop, record, device=device, state=state,
                   save=save, begin_epoch=lambda epoch: torch.manual_seed(_epoch_seed(seed, epoch, rank)),
                   cached=out)
        model.eval()
        return EpochRun(model=model, history=record.history, state=state, out_dir=out,
                        seconds=sum(row["seconds"] for row in record.history), best_epoch=record.best_epoch,
                        stopped_early=record.stopped_early)
