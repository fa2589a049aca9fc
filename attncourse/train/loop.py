"""A small epoch loop for models that are not sequence-to-sequence: cached, resumable runs.

:func:`~attncourse.train.fit.fit` trains the encoder-decoders of the text
chapters. The image models (soft and hard attention over digit canvases, the
CNN with self-attention) have their own losses and metrics, so they bring their
own ``train_epoch`` and ``evaluate`` functions and :func:`train_epochs` does the
rest, the same way ``fit`` does it:

* a run lives in its own folder under :func:`~attncourse.runtime.runs_dir`,
  named by the caller plus a hash of its ``config``; called again with the same
  config, a finished run loads instead of training;
* after every epoch, model, optimizer, loop ``state`` and history are written
  atomically (:func:`~attncourse.train.checkpoint.save_checkpoint`), so an
  interrupted run resumes from its last finished epoch, and checkpoints load
  with ``weights_only=True``;
* each epoch starts by seeding torch with ``seed`` and the epoch number, so a
  resumed run draws the same batches and samples as an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import numbers
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from attncourse.train.checkpoint import differences, load_checkpoint, save_checkpoint
from attncourse.runtime import pick_device, progress_bar, run_lock, runs_dir

CHECKPOINT = "checkpoint.pt"

Build = Callable[[torch.device], tuple[torch.nn.Module, torch.optim.Optimizer]]
TrainEpoch = Callable[[torch.nn.Module, torch.optim.Optimizer, int, dict], Mapping[str, float]]
Evaluate = Callable[[torch.nn.Module], Mapping[str, float]]


@dataclass
class EpochRun:
    """What :func:`train_epochs` returns.

    Attributes
    ----------
    model : torch.nn.Module
        The weights after the last epoch, in evaluation mode.
    history : list of dict
        One row per epoch: ``epoch`` (1-based), ``seconds`` (training seconds of
        that epoch, evaluation excluded, as in the history of
        :func:`~attncourse.train.fit.fit`), then the training and validation metrics.
    state : dict
        The loop state ``train_epoch`` kept (e.g. a REINFORCE baseline).
    out_dir : Path
        The run's folder.
    seconds : float
        Total training seconds.
    """

    model: torch.nn.Module
    history: list[dict]
    state: dict
    out_dir: Path
    seconds: float


def config_digest(config: Mapping[str, Any]) -> str:
    """Ten hex digits of the SHA-256 of ``config`` as sorted JSON.

    Raises
    ------
    TypeError
        If ``config`` holds something JSON cannot write.
    """
    return hashlib.sha256(json.dumps(dict(config), sort_keys=True).encode()).hexdigest()[:10]


def _epoch_seed(seed: int, epoch: int) -> int:
    # modulo 2**63: torch seeds are 64-bit; seeds below ~9.2e13 (all of the course's) are unchanged
    return (int(seed) * 100_003 + int(epoch)) % 2**63


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
    extendable: Collection[str] = (),
) -> EpochRun:
    """Train for ``epochs`` epochs, or resume / load the run if its folder holds it.

    Parameters
    ----------
    name : str
        Readable prefix of the run's folder, e.g. ``"canvases/hard-seed0"``.
    config : dict
        JSON-able description of everything that shapes the run; its hash
        completes the folder name, and it is stored in the checkpoint.
    build : callable(device) -> (model, optimizer)
        Called once, right after ``torch.manual_seed(seed)``; it puts the model
        on ``device`` before creating the optimizer.
    train_epoch : callable(model, optimizer, epoch, state) -> dict
        One pass over the training data, model in training mode; returns
        training metrics (floats). ``epoch`` is 1-based. ``state`` is a dict of
        plain values (numbers, strings, lists) the loop checkpoints with the
        weights, for anything besides weights that training carries along.
    evaluate : callable(model) -> dict
        Validation metrics (floats); called in evaluation mode under ``torch.no_grad()``.
    epochs : int
        Epochs in all (a finished run with fewer epochs continues up to this).
    seed : int
        Seeds the initial weights and every epoch's randomness.
    progress : bool
        A tqdm bar over the epochs.
    device : str or torch.device, optional
        Default: :func:`~attncourse.runtime.pick_device`.
    out_dir : path, optional
        Default: ``runs_dir(f"{name}-{config_digest(config)}")``.
    extendable : collection of str
        Keys of ``config`` that may differ from the checkpoint's (a budget such
        as ``"steps"``: the run continues up to ``epochs``).

    Returns
    -------
    EpochRun

    Raises
    ------
    ValueError
        If ``epochs`` is not a positive int, a metric is not a number, or the
        folder holds a checkpoint of a different config (or an unreadable one).
    TypeError
        If ``config`` or ``state`` holds values that are not plain data.
    """
    if int(epochs) != epochs or epochs < 1:
        raise ValueError(f"epochs must be a positive int, got {epochs!r}")
    config = dict(config)
    out = Path(out_dir) if out_dir is not None else runs_dir(f"{name}-{config_digest(config)}")
    out.mkdir(parents=True, exist_ok=True)
    # A run in the shared cache may be asked for by two notebooks at once: the second
    # waits for the first, then loads its checkpoint (see run_lock).
    with run_lock(out) if out_dir is None else contextlib.nullcontext():
        device = pick_device(None if device is None else str(device))
        torch.manual_seed(seed)
        model, optimizer = build(device)
        history: list[dict] = []
        state: dict = {}
        path = out / CHECKPOINT
        if path.is_file():
            saved = load_checkpoint(path, map_location=device)
            saved_config = saved["extra"].get("config")
            saved_config = saved_config if isinstance(saved_config, dict) else {}
            current = json.loads(json.dumps(config))
            problems = differences({k: v for k, v in saved_config.items() if k not in extendable},
                                   {k: v for k, v in current.items() if k not in extendable}, "config")
            if problems:
                raise ValueError(f"{path} holds a run of another config ({'; '.join(problems)}); "
                                 "delete the folder to train this one afresh")
            model.load_state_dict(saved["model_state"])
            optimizer.load_state_dict(saved["optimizer_state"])
            history, state = list(saved["history"]), dict(saved["trainer"].get("state", {}))
        seconds = sum(row["seconds"] for row in history)
        bar = progress_bar(range(len(history) + 1, int(epochs) + 1), desc=name, progress=progress, leave=False)
        for epoch in bar:
            torch.manual_seed(_epoch_seed(seed, epoch))
            model.train()
            start = time.perf_counter()
            train_metrics = dict(train_epoch(model, optimizer, epoch, state))
            epoch_seconds = time.perf_counter() - start
            seconds += epoch_seconds
            model.eval()
            with torch.no_grad():
                valid_metrics = dict(evaluate(model))
            row = {"epoch": epoch, "seconds": epoch_seconds, **train_metrics, **valid_metrics}
            for key, value in row.items():
                if not isinstance(value, numbers.Real):
                    raise ValueError(f"metric {key!r} must be a number, got {type(value).__name__}: {value!r}")
                row[key] = float(value) if key != "epoch" else int(value)
            history.append(row)
            save_checkpoint(path, model=model, optimizer=optimizer, epoch=epoch, history=history,
                            extra={"config": config, "name": name}, trainer={"state": state})
            bar.set_postfix({k: f"{v:.3g}" for k, v in row.items() if k not in ("epoch", "seconds")})
        model.eval()
        return EpochRun(model=model, history=history, state=state, out_dir=out, seconds=seconds)
