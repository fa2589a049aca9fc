"""Where a :func:`~attncourse.train.fit.fit` without a folder keeps its run while a course is graded.

Some chapters call ``fit`` in a code cell with no ``out_dir`` (chapter 5's small
Transformer, chapter 6's copying model): for a reader the model is trained in memory, in a
minute. Grading must not spend that minute on every submission. So while a chapter is
prepared (``python -m attncourse prepare`` sets :data:`FIT_CACHE_ENV`) or graded
(:data:`~attncourse.runtime.NO_TRAINING_ENV`, set for ``nbgrader autograde``), such a fit
gets a folder in the trained-model cache, named by a digest of everything that decides the
run: the model's class, its ``config`` and its initial weights (so its seed), the training
and validation batches, the settings that shape the training path, and the epochs,
patience and monitor. ``prepare`` trains and saves it; a submission resumes the finished
run, which trains nothing and gives the same history and weights (fit's resume replays a
run bit for bit on the CPU). An unprepared one is refused at once while grading. A reader's
or a learner's fit, with neither variable set, stays in memory as before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from attncourse.data.batching import Batch
from attncourse.runtime import NO_TRAINING_ENV, env_flag, runs_dir

#: Set to 1 by ``python -m attncourse prepare``: fits without a folder keep their runs.
FIT_CACHE_ENV = "ATTNCOURSE_CACHE_FITS"


def batches_fingerprint(batches: Sequence[Batch]) -> str:
    """SHA-256 (hex) of the batches' token ids and shapes, in order.

    Parameters
    ----------
    batches : sequence of Batch
        Each with ``src`` (batch, src_len) and ``tgt`` (batch, tgt_len) token ids.
    """
    digest = hashlib.sha256()
    for batch in batches:
        for tensor in (batch.src, batch.tgt):
            t = tensor.detach().to("cpu", torch.int64).contiguous()
            digest.update(str(tuple(t.shape)).encode())
            digest.update(t.numpy().tobytes())
    return digest.hexdigest()


def _weights_digest(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in model.state_dict().items():
        digest.update(name.encode())
        digest.update(tensor.detach().to("cpu").contiguous().view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def graded_fit_dir(model: torch.nn.Module, train_fingerprint: str, valid_batches: Sequence[Batch],
                   settings: Mapping[str, Any], extra: Mapping[str, Any]) -> Path | None:
    """The cache folder of a fit without ``out_dir``, while preparing or grading; else None.

    Parameters
    ----------
    model : torch.nn.Module
        As built, before training: its class, ``config`` and weights enter the digest.
    train_fingerprint : str
        :func:`batches_fingerprint` of the training batches.
    valid_batches : sequence of Batch
    settings : mapping
        JSON-able settings that decide the run (fit's replay settings, epochs, patience, ...).
    extra : mapping
        fit's ``extra`` (vocabularies, ...).

    Returns
    -------
    pathlib.Path or None
        ``runs_dir("fits/<class>-<digest>")``, created; None when neither
        :data:`FIT_CACHE_ENV` nor :data:`~attncourse.runtime.NO_TRAINING_ENV` is set.
    """
    if not (env_flag(FIT_CACHE_ENV) or env_flag(NO_TRAINING_ENV)):
        return None
    described = {"class": type(model).__name__, "config": getattr(model, "config", None),
                 "weights": _weights_digest(model), "train": train_fingerprint,
                 "valid": batches_fingerprint(valid_batches), "settings": dict(settings),
                 "extra": dict(extra)}
    digest = hashlib.sha256(json.dumps(described, sort_keys=True, default=str).encode()).hexdigest()
    return runs_dir(f"fits/{type(model).__name__}-{digest[:12]}")


__all__ = ["FIT_CACHE_ENV", "batches_fingerprint", "graded_fit_dir"]
