"""Checkpoints written whole or not at all, and loaded without running code.

Layout (``version`` 1), tensors and plain values only: ``format``, ``version``,
``epoch``, ``model_class``, ``model_config``, ``model_state``, ``optimizer_state``,
``scheduler_state``, ``history``, ``extra``, ``trainer``, ``torch_version``.
"""

from __future__ import annotations

import glob
import importlib
import os
import pickle
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any

import torch

from attncourse.train.atomic import (
    TEMPORARY_SUFFIX,
    atomic_write,
    temporary_prefix,
)
from attncourse.train.checkpoint_checks import (  # differences: callers import it from here
    config_problem,
    differences,
    state_problems,
    structure_problem,
)
from attncourse.train.runfiles import (
    note_written,
    validate_run_digest,
    validate_run_file,
)

FORMAT = "attncourse-checkpoint"
VERSION = 1

#: The classes :func:`load_model` rebuilds, by the checkpoint's ``model_class``: (module, class name).
#: Imported only when a checkpoint needs them.
MODEL_CLASSES: dict[str, tuple[str, str]] = {
    "Seq2Seq": ("attncourse.nn.rnn", "Seq2Seq"),
    "Transformer": ("attncourse.nn.transformer", "Transformer"),
    "LuongSeq2Seq": ("attncourse.nn.luong", "LuongSeq2Seq"),
    "GPT": ("attncourse.nn.gpt", "GPT"),
}


def _validate_plain(obj: Any, where: str) -> None:
    """Raise TypeError unless ``obj`` holds only tensors and plain Python values."""
    # Exact types: a str or float subclass (numpy.float64, torch's TorchVersion) pickles as
    # its own class, which weights_only=True refuses to load.
    if obj is None or type(obj) in (bool, int, float, str) or isinstance(obj, torch.Tensor):
        return
    if isinstance(obj, Mapping):
        for key, value in obj.items():
            if not isinstance(key, (str, int)):
                raise TypeError(f"{where} has a key of type {type(key).__name__}; use str or int keys")
            _validate_plain(value, f"{where}[{key!r}]")
        return
    if isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            _validate_plain(value, f"{where}[{i}]")
        return
    raise TypeError(
        f"{where} is a {type(obj).__name__}; a checkpoint holds only tensors, numbers, strings, "
        "None, lists and dicts (save objects as dicts, e.g. Vocabulary.to_dict())"
    )


def _atomic_write(path: Path, write: Any, by_name: bool = False) -> Path:
    """:func:`~attncourse.train.atomic.atomic_write`, recorded in a run folder's manifest."""
    atomic_write(path, write, by_name)
    # a run folder's manifest records what the tool wrote: --overwrite trusts only it
    note_written(path)
    return path


def atomic_torch_save(obj: Any, path: str | PathLike) -> Path:
    """``torch.save`` to a temporary beside ``path``, fsync, rename it over ``path``.

    Raises ``OSError`` naming ``path`` if it cannot be written; no temporary is left.
    """
    # By name, not through a Python file object: torch's zip writer then writes in C++
    # alone. Given a file object, it calls its write() from C++, where a Ctrl-C can
    # land; the writer, left unfinished, writes its end when it is destroyed, into the
    # file closed meanwhile: "ValueError: write to closed file" raised inside a C++
    # destructor, and the process aborts (status -6) after printing "interrupted".
    return _atomic_write(Path(path), lambda name: torch.save(obj, name), by_name=True)


def atomic_write_text(text: str, path: str | PathLike) -> Path:
    """UTF-8 ``text`` to ``path`` whole or not at all; ``OSError`` names ``path``."""
    return _atomic_write(Path(path), lambda f: f.write(text.encode("utf-8")))


def temporaries(directory: str | PathLike, names: Sequence[str]) -> list[Path]:
    """Sorted plain files ``.<name>.<8 random chars>.tmp`` that killed writes left."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = set()
    for name in names:
        prefix = temporary_prefix(directory / name)
        pattern = glob.escape(prefix) + "*.tmp"
        found |= {p for p in directory.glob(pattern) if p.is_file() and not p.is_symlink()
                  and TEMPORARY_SUFFIX.fullmatch(p.name[len(prefix):])}
    return sorted(found)


def remove_temporaries(directory: str | PathLike, names: Sequence[str]) -> list[Path]:
    """Delete :func:`temporaries` of ``directory`` and return them."""
    removed = temporaries(directory, names)
    for path in removed:
        path.unlink(missing_ok=True)
    return removed


def save_checkpoint(
    path: str | PathLike,
    *,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    epoch: int = 0,
    history: Sequence[Mapping[str, Any]] = (),
    extra: Mapping[str, Any] | None = None,
    trainer: Mapping[str, Any] | None = None,
    scheduler: Any = None,
) -> Path:
    """Write ``model``'s (and the training state's) checkpoint at ``path`` atomically.

    Raises ``TypeError`` if ``extra``, ``trainer`` or ``history`` is not plain data,
    ``OSError`` if it cannot be written (the old file is kept).
    """
    config = getattr(model, "config", None)
    payload = {
        "format": FORMAT,
        "version": VERSION,
        "epoch": int(epoch),
        "model_class": type(model).__name__,
        "model_config": None if config is None else dict(config),
        "model_state": model.state_dict(),
        "optimizer_state": None if optimizer is None else optimizer.state_dict(),
        "scheduler_state": None if scheduler is None else scheduler.state_dict(),
        "history": [dict(row) for row in history],
        "extra": {} if extra is None else dict(extra),
        "trainer": {} if trainer is None else dict(trainer),
        "torch_version": str(torch.__version__),
    }
    for key in ("model_config", "history", "extra", "trainer", "optimizer_state", "scheduler_state"):
        _validate_plain(payload[key], key)
    return atomic_torch_save(payload, path)


def _reason(err: BaseException) -> str:
    """Why ``torch.load`` failed, in a few words instead of its page-long message."""
    text = " ".join(str(err).split()) or type(err).__name__
    refused = re.search(r"GLOBAL ([\w.]+)", text)
    if refused:  # weights_only=True met a class or function: loading it could run code
        return (f"it holds Python objects ({refused.group(1)}), which are refused: only tensors and plain "
                "values are loaded, as unpickling other objects could run code")
    if "WeightsUnpickler" in text or isinstance(err, pickle.UnpicklingError):
        return "its bytes are not a file written by torch.save (a corrupt file, or another kind of file)"
    if isinstance(err, EOFError) or "central directory" in text or "Invalid argument" in text:
        return "the file is empty or cut short (truncated or corrupt)"
    if isinstance(err, (KeyError, IndexError, TypeError, AttributeError)) or re.fullmatch(r"-?\d+", text):
        return "its bytes are not a file written by torch.save (a corrupt file, or another kind of file)"
    return text if len(text) <= 300 else text[:297] + "..."


def load_checkpoint(path: str | PathLike, map_location: str | torch.device | None = "cpu") -> dict[str, Any]:
    """The checkpoint dict at ``path``, read with ``weights_only=True`` and checked.

    Raises ``FileNotFoundError`` if missing, ``ValueError`` if it is not a regular file,
    is too large, changed since written, or is not a readable checkpoint of this format.
    """
    path = Path(path)
    if not os.path.lexists(path):
        raise FileNotFoundError(f"no such checkpoint file: {str(path)!r}")
    validate_run_file(path)  # a FIFO would block torch.load, a device read forever
    validate_run_digest(path)  # bytes changed since the run wrote them: refused before unpickling
    try:
        with warnings.catch_warnings():  # torch warns about some files before refusing them: the error says it
            warnings.simplefilter("ignore")
            data = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises RuntimeError, UnpicklingError, EOFError, ... by cause
        raise ValueError(f"{path} is not a readable attncourse checkpoint: {_reason(err)}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ValueError(
            f"{path} is not a readable attncourse checkpoint: it loads, but has no "
            f"'format': {FORMAT!r} entry (was it written by save_checkpoint?)"
        )
    if data.get("version") != VERSION:
        raise ValueError(
            f"{path} is not a readable attncourse checkpoint: format version {data.get('version')!r}, "
            f"this attncourse reads version {VERSION}"
        )
    # every entry, type and tensor checked here, once, for every command that loads a checkpoint
    problem = structure_problem(data)
    if problem:
        raise ValueError(f"{path} is not a readable attncourse checkpoint: {problem}")
    return data


def validate_compatible(
    checkpoint: Mapping[str, Any],
    model: torch.nn.Module,
    extra: Mapping[str, Any] | None = None,
    path: str | PathLike | None = None,
) -> None:
    """Raise ``ValueError`` naming how ``checkpoint`` misfits ``model``, ``extra``."""
    problems: list[str] = []
    config = getattr(model, "config", None)
    saved_config = checkpoint.get("model_config")
    if checkpoint.get("model_class") not in (None, type(model).__name__):
        problems.append(f"model class: {checkpoint['model_class']} in the checkpoint, {type(model).__name__} here")
    if isinstance(config, Mapping) and isinstance(saved_config, Mapping):
        problems += differences(saved_config, config, "model config")
    elif config is not None and saved_config is None and checkpoint.get("model_class") is not None:
        problems.append("model config: absent in the checkpoint")
    if not problems:
        problems += state_problems(checkpoint["model_state"], model.state_dict())
    if extra is not None:
        problems += differences(checkpoint.get("extra", {}), extra, "extra")
    if problems:
        where = "" if path is None else f" {path}"
        raise ValueError(f"checkpoint{where} does not match this run: " + "; ".join(problems))


def model_class(name: str) -> type[torch.nn.Module]:
    """The class a checkpoint's ``model_class`` names; ``ValueError`` if unknown."""
    if name not in MODEL_CLASSES:
        raise ValueError(f"a {name!r} model; load_model rebuilds {', '.join(sorted(MODEL_CLASSES))} models only")
    module_name, class_name = MODEL_CLASSES[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"a {name!r} model, but {module_name} cannot be imported: {err}") from None
    return getattr(module, class_name)


def _validate_shapes(cls: type[torch.nn.Module], checkpoint: Mapping[str, Any], path: Any) -> None:
    """Raise ValueError if the weights misfit the config's model (built on ``meta``)."""
    try:
        with torch.device("meta"):
            skeleton = cls.from_config(checkpoint["model_config"])
    except Exception:  # a config from_config refuses: the real build below says why
        return
    state = checkpoint.get("model_state")
    if not isinstance(state, Mapping):
        return
    problems = state_problems(state, skeleton.state_dict())
    if problems:
        shown = "; ".join(p.replace(" in this run", " in its model config") for p in problems[:3])
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise ValueError(f"{path} is not a readable attncourse checkpoint: its weights do not fit its model "
                         f"config: {shown}{more}")


def load_model(
    path: str | PathLike, map_location: str | torch.device | None = "cpu",
    validate_config: Callable[[Any], None] | None = None,
) -> tuple[torch.nn.Module, dict[str, Any]]:
    """(model in eval mode on ``map_location``, checkpoint) of the file at ``path``.

    ``validate_config(model_config)`` may raise to refuse sizes before the build. Raises
    as :func:`load_checkpoint`, ``ValueError`` for an unknown class or a bad config.
    """
    checkpoint = load_checkpoint(path, map_location=map_location)
    if not isinstance(checkpoint.get("model_config"), dict):
        raise ValueError(f"{path} holds no model config; load_model cannot rebuild its model")
    try:
        cls = model_class(str(checkpoint.get("model_class")))
    except ValueError as err:
        raise ValueError(f"{path} holds {err}") from None
    # each setting's name and type against the class's constructor: a GRU given
    # bidirectional="x" fails deep inside torch, not with a message
    problem = config_problem(cls, checkpoint["model_config"])
    if problem:
        raise ValueError(f"{path} is not a readable attncourse checkpoint: {problem}")
    if validate_config is not None:
        validate_config(checkpoint["model_config"])
    _validate_shapes(cls, checkpoint, path)
    try:
        model = cls.from_config(checkpoint["model_config"])
        model.load_state_dict(checkpoint["model_state"])
    except (TypeError, ValueError, RuntimeError) as err:
        reason = " ".join(str(err).split())[:300]
        raise ValueError(f"{path} is not a readable attncourse checkpoint: {reason}") from None
    if map_location is not None:
        model.to(map_location)
    model.eval()
    return model, checkpoint
