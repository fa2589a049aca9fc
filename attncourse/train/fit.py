"""Training an encoder-decoder: :func:`fit`, early stopping, checkpoints and exact resume.

One epoch is :func:`~attncourse.train.seq2seq.seq2seq_epoch` (teacher-forced
cross-entropy, a clipped Adam step per batch) run by
:func:`~attncourse.train.loop.run_epochs`; each epoch is validated (loss, token
accuracy, greedy exact match) and checkpointed with the optimizer, scheduler and
random generator states, so ``resume=True`` continues along the same path (bit for
bit on the CPU). Under ``torchrun`` the model is wrapped in
:class:`~torch.nn.parallel.DistributedDataParallel`, each rank trains on its share of
the batches (:func:`~attncourse.train.distributed.rank_batch_order`) and rank 0
validates and writes; dropout draws from ``seed + rank``. Vaswani et al.'s recipe is
a set of :class:`~attncourse.train.config.FitConfig` options (label smoothing, the
schedule of eq. 3, Adam's betas); the history reports the plain cross-entropy.

References
----------
Vaswani et al. (2017), "Attention Is All You Need", sections 5.3-5.4.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

import torch

from attncourse.data.batching import Batch, pad_to_buckets
from attncourse.runtime import pick_device, training_seed
from attncourse.train import distributed as dist_utils
from attncourse.train import store
from attncourse.train.checkpoint import (
    differences,
    load_checkpoint,
    save_checkpoint,
    validate_compatible,
)
from attncourse.train.config import FitConfig
from attncourse.train.loop import Loop, Record, run_epochs, validate_amp
from attncourse.train.schedule import noam_lambda
from attncourse.train.seq2seq import seq2seq_epoch, validate
from attncourse.train.store import batches_fingerprint

CHECKPOINT_NAME = store.CHECKPOINT
BEST_NAME = "best.pt"

#: FitConfig fields that shape the training path; a resumed run must keep them. The first ones are
#: in every checkpoint; the later ones (with the Transformer's recipe) count as their defaults when absent.
_FIRST_REPLAY_FIELDS = ("lr", "batch_size", "clip_norm", "teacher_forcing", "seed", "monitor")
_REPLAY_FIELDS = _FIRST_REPLAY_FIELDS + ("label_smoothing", "optimizer", "betas", "eps", "weight_decay", "schedule",
                                         "warmup", "d_model_for_schedule", "lr_scale", "amp", "length_buckets")


@dataclass
class FitResult:
    """What :func:`fit` returns.

    Attributes
    ----------
    history : list of dict
        One row per epoch, earlier epochs of a resumed run included: ``epoch``
        (1-based), ``train_loss`` and ``valid_loss`` (plain cross-entropy per target
        token, nats), ``train_acc`` and ``valid_acc`` (teacher-forced token accuracy,
        [0, 1]), ``valid_exact_match`` (greedy, [0, 1]), ``seconds`` (epoch, validation
        included), ``train_tokens`` (all ranks) and ``train_seconds`` (rank 0's steps).
    best_epoch : int
        The epoch ``best.pt`` (and, with ``restore_best``, the model) holds; 0 if none ran.
    wall_time, train_seconds : float
        Seconds this call took, and of them its training steps.
    device : str
    stopped_early, out_of_time : bool
        Whether the patience, or ``config.time_budget``, ended the run.
    train_tokens : int
        Target tokens (y_1..y_T and ``<eos>``) trained on in this call, all ranks.
    world_size : int
        Processes that trained together.
    """


    history: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = 0
    wall_time: float = 0.0
    device: str = "cpu"
    stopped_early: bool = False
    train_tokens: int = 0
    train_seconds: float = 0.0
    world_size: int = 1
    out_of_time: bool = False

    @property
    def tokens_per_second(self) -> float:
        """Target tokens per second of training steps: this call's epochs, else the history's; 0 if none."""
        tokens, seconds = self.train_tokens, self.train_seconds
        if seconds <= 0:
            rows = [row for row in self.history if "train_tokens" in row and "train_seconds" in row]
            tokens = sum(int(row["train_tokens"]) for row in rows)
            seconds = sum(float(row["train_seconds"]) for row in rows)
        return tokens / seconds if seconds > 0 else 0.0


#: Where torch has a fused Adam/AdamW kernel (the CPU's since torch 2.4).
FUSED_DEVICES = ("cuda", "cpu")


def make_optimizer(model: torch.nn.Module, config: FitConfig, device: torch.device | str) -> torch.optim.Optimizer:
    """The optimizer :func:`fit` uses: Adam or AdamW with ``config``'s betas, eps and weight decay.

    ``config.fused`` takes effect on :data:`FUSED_DEVICES`. The rate is ``config.lr``, or 1.0
    with a schedule (whose multiplier is then the whole rate). Kingma, Ba (2015);
    Loshchilov, Hutter (2019) for AdamW.
    """
    cls = torch.optim.AdamW if config.optimizer == "adamw" else torch.optim.Adam
    kwargs: dict[str, Any] = {
        "lr": 1.0 if config.schedule is not None else config.lr,
        "betas": tuple(config.betas),
        "eps": config.eps,
        "weight_decay": config.weight_decay,
    }
    if config.fused and torch.device(device).type in FUSED_DEVICES:
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
        ``model.config["d_model"]`` nor ``model.d_model`` gives d_model.
    """
    if config.schedule is None:
        return None
    d_model = config.d_model_for_schedule
    if d_model is None:
        d_model = (getattr(model, "config", None) or {}).get("d_model")
    if d_model is None:  # a GPT built from a spec keeps d_model in its spec, not its config
        d_model = getattr(model, "d_model", None)
    if d_model is None:
        raise ValueError(
            f"schedule={config.schedule!r} needs d_model: set FitConfig.d_model_for_schedule "
            f"({type(model).__name__} has no config['d_model'])"
        )
    return torch.optim.lr_scheduler.LambdaLR(optimizer, noam_lambda(int(d_model), config.warmup, config.lr_scale))


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


def validate_resume(
    out_dir: str | PathLike,
    model: torch.nn.Module,
    train_batches: Sequence[Batch],
    config: FitConfig,
    extra: dict[str, Any] | None = None,
    fingerprint: str | None = None,
) -> dict[str, Any]:
    """Check that ``out_dir/checkpoint.pt`` can be resumed by this run, and return it.

    Parameters
    ----------
    out_dir : str or path-like
    model : torch.nn.Module
        Its class, ``config`` and weight shapes must match the saved ones.
    train_batches : sequence of Batch
        The same token ids in the same batches.
    config : FitConfig
        The fields that shape the path (:data:`_REPLAY_FIELDS`) and the number of
        processes must be the saved ones; ``epochs``, ``patience``, ``device``,
        ``fused``, ``compile`` may change.
    extra : dict, optional
        Must equal the saved ``extra``.
    fingerprint : str, optional
        :func:`~attncourse.train.store.batches_fingerprint` of ``train_batches``.

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
    validate_compatible(saved, model, {} if extra is None else extra, path)
    trainer = saved["trainer"]
    world_size = dist_utils.current().world_size
    problems = differences(_saved_replay_settings(trainer), _replay_settings(config, world_size), "setting")
    if fingerprint is None:
        fingerprint = batches_fingerprint(train_batches)
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


def _training_device(config: FitConfig, world: dist_utils.DistInfo) -> torch.device:
    device = pick_device(config.device)
    if world.distributed and device.type == "cuda" and device.index is None:
        device = torch.device("cuda", world.local_rank % torch.cuda.device_count())
    return device


def _validate_fit_args(train_batches: Sequence[Batch], valid_batches: Sequence[Batch], config: FitConfig,
                    out_dir: str | PathLike | None, resume: bool) -> None:
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
    if dist_utils.current().distributed and config.teacher_forcing < 1.0:
        raise ValueError("teacher_forcing < 1 calls the decoder step by step, which DistributedDataParallel "
                         "cannot synchronise; use teacher_forcing=1.0 with several processes")


def _rng_snapshot(device: torch.device) -> dict[str, torch.Tensor | None]:
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
    }


def _restore_rng(trainer: dict[str, Any], device: torch.device) -> None:
    """The random generators' states saved at the end of the last epoch (this rank's, under DDP)."""
    world = dist_utils.current()
    rng = {"torch": trainer["torch_rng_state"], "cuda": trainer.get("cuda_rng_state")}
    by_rank = trainer.get("rank_rng_states")
    if isinstance(by_rank, list) and len(by_rank) == world.world_size:
        rng = by_rank[world.rank]
    torch.set_rng_state(rng["torch"])
    if device.type == "cuda" and rng.get("cuda") is not None:
        torch.cuda.set_rng_state(rng["cuda"], device)


def _resume(saved: dict[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
            generator: torch.Generator, device: torch.device) -> Record:
    """Load a checked checkpoint (:func:`validate_resume`) into the run's objects; the run so far."""
    trainer = saved["trainer"]
    model.load_state_dict(saved["model_state"])
    optimizer.load_state_dict(saved["optimizer_state"])
    if scheduler is not None:
        scheduler.load_state_dict(saved["scheduler_state"])
    generator.set_state(trainer["generator_state"])
    _restore_rng(trainer, device)
    return Record([dict(row) for row in saved["history"]], int(trainer["best_epoch"]),
                  trainer["best_model_state"])


def _saver(out: Path | None, model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any,
           generator: torch.Generator, device: torch.device, extra: dict[str, Any],
           replay: dict[str, Any], fingerprint: str) -> Callable[[int, Record, bool], None]:
    """What fit writes after each epoch: ``best.pt`` when the epoch is the best, and ``checkpoint.pt``."""
    world = dist_utils.current()

    def save(epoch: int, record: Record, improved: bool) -> None:
        if out is None:
            return
        if improved and world.is_main:
            save_checkpoint(out / BEST_NAME, model=model, epoch=epoch, history=record.history, extra=extra)
        rng_states = dist_utils.gather_objects(_rng_snapshot(device)) if world.distributed else None
        if not world.is_main:
            return
        trainer = {
            "fit_config": replay,
            "data_fingerprint": fingerprint,
            "generator_state": generator.get_state(),
            "torch_rng_state": torch.get_rng_state(),
            "cuda_rng_state": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
            "rank_rng_states": rng_states,
            "best_epoch": record.best_epoch,
            "best_model_state": record.best_state,
        }
        save_checkpoint(out / CHECKPOINT_NAME, model=model, optimizer=optimizer, epoch=epoch,
                        history=record.history, extra=extra, trainer=trainer, scheduler=scheduler)

    return save


@contextlib.contextmanager
def _threads(num_threads: int | None) -> Iterator[None]:
    """torch's CPU threads set to ``num_threads`` for the block (None: unchanged)."""
    previous = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(int(num_threads))
    try:
        yield
    finally:
        if num_threads is not None:
            torch.set_num_threads(previous)


def _fit_postfix(row: dict, best: int) -> dict:
    return {"valid_loss": f"{row['valid_loss']:.3f}", "exact": f"{row['valid_exact_match']:.3f}", "best": best}


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
        ``model(src, src_mask, tgt_in).logits`` is (batch, tgt_len, tgt_vocab); it is
        moved to the device and trained in place.
    train_batches : sequence of Batch
        Visited in a fresh order each epoch, drawn from a generator seeded with ``config.seed``.
    valid_batches : sequence of Batch
    config : FitConfig
    out_dir : str or path-like, optional
        Created if missing; each epoch writes ``checkpoint.pt`` and, for a new best,
        ``best.pt``, atomically. Without it, while a course is prepared or graded, the
        run is kept in the store (:func:`~attncourse.train.store.keeps_fits`).
    resume : bool
        Continue ``out_dir/checkpoint.pt`` (:func:`validate_resume`).
    progress : bool
    extra : dict, optional
        Plain data saved in both checkpoints (vocabularies); compared on resume.
    callback : callable(history), optional
        Called after each epoch's checkpoint.

    Returns
    -------
    FitResult

    Raises
    ------
    ValueError
        If there are no training or validation batches, a batch exceeds
        ``config.batch_size``, ``resume`` has no ``out_dir``, the checkpoint does not
        match (:func:`validate_resume`), ``schedule="noam"`` has no d_model, ``amp``
        cannot run on the device, or ``teacher_forcing < 1`` with several processes.
    FileNotFoundError
        If ``resume`` and ``out_dir/checkpoint.pt`` does not exist.
    attncourse.runtime.UnpreparedRun
        If a stored run would train while grading.
    """

    _validate_fit_args(train_batches, valid_batches, config, out_dir, resume)
    start_time = time.perf_counter()
    world = dist_utils.current()
    device = _training_device(config, world)
    validate_amp(device, config.amp)
    out = None if out_dir is None else Path(out_dir)
    if out is not None and world.is_main:
        out.mkdir(parents=True, exist_ok=True)
    extra = {} if extra is None else dict(extra)
    fingerprint = batches_fingerprint(train_batches)
    stored = out is None and not world.distributed and store.keeps_fits()
    if stored:  # preparing or grading a course: a fit without a folder is trained once
        name = store.run_name(f"fits/{type(model).__name__}",
                              {"class": type(model).__name__, "config": getattr(model, "config", None)},
                              weights=model, data=(fingerprint, batches_fingerprint(valid_batches)),
                              settings={**_cache_settings(config), "extra": extra})
    with store.open_run(name) if stored else contextlib.nullcontext(out) as out:
        if stored:
            resume = (out / CHECKPOINT_NAME).is_file()
        was_training = model.training
        with _threads(config.num_threads):
            try:
                model.to(device)
                optimizer = make_optimizer(model, config, device)
                scheduler = make_scheduler(optimizer, config, model)
                seed = training_seed(config.seed)  # plus $ATTNCOURSE_SEED_OFFSET (make claims)
                generator = torch.Generator().manual_seed(seed)
                if resume:
                    saved = validate_resume(out, model, train_batches, config, extra, fingerprint)
                    record = _resume(saved, model, optimizer, scheduler, generator, device)
                else:
                    torch.manual_seed(seed + world.rank)
                    record = Record()
                start_epoch = len(record.history)
                epoch = seq2seq_epoch(_padded(train_batches, config), generator, config.teacher_forcing,
                                      config.label_smoothing, seed)
                save = _saver(out, model, optimizer, scheduler, generator, device, extra,
                              _replay_settings(config, world.world_size), fingerprint)
                run_epochs(model, optimizer, epoch, lambda m: validate(m, valid_batches, device),
                           _loop(config, progress, callback), record, device=device, scheduler=scheduler, save=save,
                           cached=out)
                if world.distributed:
                    torch.distributed.barrier()  # rank 0's files are written before any rank returns
            finally:
                model.train(was_training)
    return _result(record, start_epoch, time.perf_counter() - start_time, device, world)


def _cache_settings(config: FitConfig) -> dict[str, Any]:
    """What decides a fit's result besides its model and data: the key of a graded fit's folder."""
    return {**_replay_settings(config), "epochs": config.epochs, "patience": config.patience,
            "restore_best": config.restore_best, "time_budget": config.time_budget}


def _loop(config: FitConfig, progress: bool, callback: Callable[[list[dict[str, float]]], None] | None) -> Loop:
    """The settings of :func:`run_epochs` that ``config`` decides."""
    return Loop(config.epochs, score=lambda row: _score(row, config.monitor), patience=config.patience,
                restore_best=config.restore_best, amp=config.amp, compile=config.compile,
                static_shapes=config.length_buckets is not None, time_budget=config.time_budget,
                clip_norm=config.clip_norm, progress=progress, postfix=_fit_postfix, callback=callback)


def _padded(train_batches: Sequence[Batch], config: FitConfig) -> Sequence[Batch]:
    """The batches as given, or padded to ``config.length_buckets`` fixed shapes."""
    if config.length_buckets is None:
        return train_batches
    return pad_to_buckets(list(train_batches), int(config.length_buckets), config.batch_size)


def _result(record: Record, start_epoch: int, wall_time: float, device: torch.device,
            world: dist_utils.DistInfo) -> FitResult:
    """What :func:`fit` returns; tokens and seconds count this call's epochs only."""
    new_rows = record.history[start_epoch:]
    return FitResult(
        history=record.history,
        best_epoch=record.best_epoch,
        wall_time=wall_time,
        device=device.type,
        stopped_early=record.stopped_early,
        train_tokens=sum(int(row["train_tokens"]) for row in new_rows),
        train_seconds=sum(row["train_seconds"] for row in new_rows),
        world_size=world.world_size,
        out_of_time=record.out_of_time,
    )
