"""Train a small model once and keep its weights, for a chapter's own training loop.

Most of the course's trained models go through :func:`~attncourse.train.loop.train_epochs`,
whose run folder caches them. A few chapters write their loop out in a recipe, short and
plain, for the reader (chapter 12's passkey models); :func:`train_once` gives such a loop
the same cache without changing it: the loop runs exactly as before the first time, and
later runs (a second run of the chapter, every submission a grader autogrades after
``python -m attncourse prepare``) load the weights it left.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from attncourse.runtime import refuse_cached_training, run_lock, runs_dir
from attncourse.train.checkpoint import load_checkpoint, save_checkpoint
from attncourse.train.fit import CHECKPOINT_NAME
from attncourse.train.loop import config_digest


def train_once(name: str, config: Mapping[str, Any], model: torch.nn.Module,
               train: Callable[[torch.nn.Module], None], announce: bool = True) -> torch.nn.Module:
    """Train ``model`` in place with ``train`` the first time; afterwards load what it learned.

    The weights go to ``runs_dir(f"{name}-{config_digest(config)}")/checkpoint.pt``,
    written atomically once training has ended, so an interrupted training leaves
    nothing, and read back with ``weights_only=True``. Two processes that ask for the same
    run wait for each other (:func:`~attncourse.runtime.run_lock`): one trains, the other
    loads.

    Parameters
    ----------
    name : str
        The run's folder prefix, e.g. ``"passkey/rope-seed0"``.
    config : mapping
        JSON-able description of everything that shapes the training; its digest names
        the folder, and a saved file with another config is refused.
    model : torch.nn.Module
        Freshly built (seeded): trained in place, or given the saved weights.
    train : callable
        ``train(model)``: the training loop.
    announce : bool
        Print one line when the weights are loaded rather than trained.

    Returns
    -------
    torch.nn.Module
        ``model``.

    Raises
    ------
    attncourse.runtime.UnpreparedRun
        If the run is not saved and ``$ATTNCOURSE_NO_TRAINING`` says grading does not train.
    ValueError
        If the saved file is not a checkpoint, or was written for another config.
    """
    out = runs_dir(f"{name}-{config_digest(config)}")
    path = out / CHECKPOINT_NAME
    with run_lock(out):
        if not path.is_file():
            refuse_cached_training(str(out), 0, 1)
            train(model)
            save_checkpoint(path, model=model, epoch=1, extra={"config": dict(config)})
            return model
        saved = load_checkpoint(path)
        if saved.get("extra", {}).get("config") != dict(config):
            raise ValueError(f"{path} was trained with another configuration than {name}'s: "
                             "remove its folder to train it again")
        model.load_state_dict(saved["model_state"])
        if announce:
            print(f"{name}: trained already, loaded from {path}", flush=True)
        return model


__all__ = ["train_once"]
