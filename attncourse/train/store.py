"""Trained runs: one folder ``{prefix}-{key}`` each, under ``runs_dir``."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from attncourse.runtime import (
    NO_TRAINING_ENV,
    env_flag,
    refuse_cached_training,
    run_lock,
    runs_dir,
)
from attncourse.train.checkpoint import differences, load_checkpoint, save_checkpoint

#: The run's checkpoint, in its folder.
CHECKPOINT = "checkpoint.pt"
#: Set to 1 by ``python -m attncourse prepare``: a fit without ``out_dir`` is stored.
FIT_CACHE_ENV = "ATTNCOURSE_CACHE_FITS"
#: Hex digits of a run's key in its folder name.
KEY_DIGITS = 12

refuse_while_grading = refuse_cached_training


def tensor_digest(tensors: Iterable[torch.Tensor]) -> str:
    """SHA-256 (hex) of the tensors' shapes and bytes, in order."""
    digest = hashlib.sha256()
    for tensor in tensors:
        t = tensor.detach().to("cpu").contiguous()
        digest.update(str(tuple(t.shape)).encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def batches_fingerprint(batches: Sequence[Any]) -> str:
    """:func:`tensor_digest` of the batches' ``src`` and ``tgt`` as int64."""
    return tensor_digest(t.to(torch.int64) for b in batches for t in (b.src, b.tgt))


def run_key(spec: Mapping[str, Any], *, weights: torch.nn.Module | None = None,
            data: Sequence[str | torch.Tensor] = (), settings: Mapping[str, Any] | None = None) -> str:
    """The first :data:`KEY_DIGITS` hex digits of the SHA-256 of a run's description.

    Raises ``TypeError`` if ``spec`` or ``settings`` is not JSON-able.
    """
    described: dict[str, Any] = {"spec": dict(spec)}
    if weights is not None:
        state = weights.state_dict()
        described["weights"] = [list(state), tensor_digest(state.values())]
    if data:
        described["data"] = [d if isinstance(d, str) else tensor_digest([d]) for d in data]
    if settings is not None:
        described["settings"] = dict(settings)
    text = json.dumps(described, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:KEY_DIGITS]


def run_name(prefix: str, spec: Mapping[str, Any], **parts: Any) -> str:
    """``f"{prefix}-{run_key(spec, **parts)}"``: the run's folder under ``runs_dir``."""
    return f"{prefix}-{run_key(spec, **parts)}"


def keeps_fits() -> bool:
    """Whether a fit without ``out_dir`` is stored (preparing or grading a course)."""
    return env_flag(FIT_CACHE_ENV) or env_flag(NO_TRAINING_ENV)


@contextlib.contextmanager
def open_run(name: str, out_dir: str | Path | None = None) -> Iterator[Path]:
    """``runs_dir(name)`` locked (``flock``) for the block, or ``out_dir`` as given."""
    if out_dir is not None:
        yield Path(out_dir)
        return
    folder = runs_dir(name)
    with run_lock(folder):
        yield folder


def load_run(folder: Path, spec: Mapping[str, Any], extendable: Collection[str] = (),
             map_location: str | torch.device | None = "cpu") -> dict[str, Any] | None:
    """The checkpoint in ``folder``, or None if there is none.

    Raises ``ValueError`` if unreadable or its spec differs outside ``extendable``.
    """
    path = folder / CHECKPOINT
    if not path.is_file():
        return None
    saved = load_checkpoint(path, map_location=map_location)
    saved_spec = saved["extra"].get("config")
    saved_spec = saved_spec if isinstance(saved_spec, dict) else {}
    current = json.loads(json.dumps(dict(spec)))
    problems = differences({k: v for k, v in saved_spec.items() if k not in extendable},
                           {k: v for k, v in current.items() if k not in extendable}, "config")
    if problems:
        raise ValueError(f"{path} holds a run of another config ({'; '.join(problems)}); "
                         "delete the folder to train this one afresh")
    return saved


def save_run(folder: Path, spec: Mapping[str, Any], *, model: torch.nn.Module,
             extra: Mapping[str, Any] | None = None, **fields: Any) -> Path:
    """Save ``folder/checkpoint.pt`` atomically with ``spec`` in ``extra["config"]``."""
    extra = {"config": dict(spec), **(extra or {})}
    return save_checkpoint(folder / CHECKPOINT, model=model, extra=extra, **fields)


def train_once(name: str, spec: Mapping[str, Any], model: torch.nn.Module,
               train: Callable[[torch.nn.Module], None], announce: bool = True) -> torch.nn.Module:
    """Train ``model`` in place with ``train(model)`` once; later calls load it.

    Raises ``UnpreparedRun`` while grading, ``ValueError`` as :func:`load_run`.
    """
    with open_run(run_name(name, spec)) as folder:
        saved = load_run(folder, spec)
        if saved is None:
            refuse_while_grading(str(folder), 0, 1)
            train(model)
            save_run(folder, spec, model=model, epoch=1)
            return model
        model.load_state_dict(saved["model_state"])
        if announce:
            print(f"{name}: trained already, loaded from {folder / CHECKPOINT}", flush=True)
        return model


__all__ = ["CHECKPOINT", "FIT_CACHE_ENV", "batches_fingerprint", "keeps_fits", "load_run",
           "open_run", "refuse_while_grading", "run_key", "run_name", "save_run", "tensor_digest",
           "train_once"]
