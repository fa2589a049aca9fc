"""Where a run happens and how it repeats: device, seeds, progress bars, run folders."""

from __future__ import annotations

import contextlib
import os
import random
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm
from tqdm.std import tqdm as text_tqdm

#: The device types the course's training and decoding run on.
DEVICE_TYPES = ("cpu", "cuda", "mps")


def pick_device(prefer: str | None = None) -> torch.device:
    """The best available device (CUDA, then MPS, then CPU), or ``prefer`` if given.

    Raises ValueError if ``prefer`` is no :data:`DEVICE_TYPES` device this machine has.
    """
    if prefer is not None:
        try:
            device = torch.device(prefer)
        except (RuntimeError, TypeError, ValueError):
            raise ValueError(f"{prefer!r} is not a device; use 'cpu', 'cuda', 'cuda:1' or 'mps'") from None
        if device.type not in DEVICE_TYPES:
            raise ValueError(f"device {prefer!r}: attncourse runs on {', '.join(DEVICE_TYPES)}, not {device.type}")
        if device.type == "cpu" and device.index not in (None, 0):
            raise ValueError(f"device {prefer!r}: there is one CPU device; use 'cpu' (--threads sets the cores)")
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"device {prefer!r} was asked for, but CUDA is not available here")
        n_gpus = torch.cuda.device_count() if device.type == "cuda" else 0
        if device.type == "cuda" and device.index is not None and device.index >= n_gpus:
            raise ValueError(f"device {prefer!r} was asked for, but this machine has {n_gpus} CUDA device(s), "
                             f"cuda:0 to cuda:{n_gpus - 1}")
        if device.type == "mps" and not torch.backends.mps.is_available():
            raise ValueError(f"device {prefer!r} was asked for, but MPS is not available here")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def describe_device(device: torch.device) -> str:
    """One line such as ``"cuda (NVIDIA H100 80GB HBM3)"`` or ``"cpu (2 threads)"``."""
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    if device.type == "cpu":
        threads = torch.get_num_threads()
        return f"cpu ({threads} thread{'s' if threads != 1 else ''})"
    return device.type


#: Added to every training seed (:func:`training_seed`); unset or 0 in normal use.
SEED_OFFSET_ENV = "ATTNCOURSE_SEED_OFFSET"


def seed_offset() -> int:
    """``$ATTNCOURSE_SEED_OFFSET`` (default 0), added to every seed (other-seed runs).

    Raises ValueError if it is set to something other than an integer >= 0.
    """
    value = os.environ.get(SEED_OFFSET_ENV, "").strip()
    try:
        offset = int(value) if value else 0
    except ValueError:
        raise ValueError(f"{SEED_OFFSET_ENV}={value!r}: expected an integer") from None
    if offset < 0:
        raise ValueError(f"{SEED_OFFSET_ENV}={value!r}: expected an integer >= 0")
    return offset


def _shifted(seed: int, what: str) -> int:
    """``seed + offset``; with an offset, ValueError unless ``0 <= seed < offset``."""
    offset = seed_offset()
    if offset and not 0 <= int(seed) < offset:
        # seeds in [0, offset) shift to [offset, 2 offset): disjoint from every seed the
        # chapters use themselves, which is what the variant is for
        raise ValueError(f"{what} {seed} is outside [0, {SEED_OFFSET_ENV}={offset}): "
                         "its shifted seed could be one the chapters use themselves")
    return int(seed) + offset


def training_seed(seed: int) -> int:
    """The seed a model is initialised and trained with; raises as :func:`_shifted`."""
    return _shifted(seed, "training seed")


def data_seed(seed: int) -> int:
    """The seed a recipe draws its data with; raises as :func:`_shifted`."""
    return _shifted(seed, "data seed")


def seed_everything(seed: int = 0) -> None:
    """Seed Python's, NumPy's and torch's generators with :func:`training_seed`."""
    seed = training_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def env_flag(name: str) -> bool:
    """Whether ``$name`` is set to anything but empty, 0, false, no or off."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


#: Set to 1 while grading: a run of the trained-model cache must be there, finished.
NO_TRAINING_ENV = "ATTNCOURSE_NO_TRAINING"


class UnpreparedRun(RuntimeError):
    """A cached run would have to train while :data:`NO_TRAINING_ENV` forbids it."""


def refuse_cached_training(name: str, done: int, total: int) -> None:
    """Raise :class:`UnpreparedRun` if ``$ATTNCOURSE_NO_TRAINING`` is on (grading)."""
    if env_flag(NO_TRAINING_ENV):
        raise UnpreparedRun(f"{name} holds {done} of the run's {total} epochs, and ${NO_TRAINING_ENV} "
                            "says grading does not train: prepare the "
                            "chapter first (python -m attncourse prepare CHAPTER, with the same "
                            "$ATTNCOURSE_RUNS)")


def runs_dir(name: str | None = None) -> Path:
    """``$ATTNCOURSE_RUNS``, ``_build/runs`` or ``~/.cache/attncourse/runs``; made."""
    root = os.environ.get("ATTNCOURSE_RUNS")
    if root:
        base = Path(root)
    else:
        checkout = Path(__file__).resolve().parents[1]
        is_checkout = (checkout / "pyproject.toml").exists() and (checkout / "notebooks").is_dir()
        base = checkout / "_build" / "runs" if is_checkout else Path.home() / ".cache" / "attncourse" / "runs"
    if seed_offset():  # models trained from shifted seeds are never loaded as the seeds' own
        base = base / f"seed-offset-{seed_offset()}"
    path = base / name if name else base
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def run_lock(out_dir: str | Path) -> Iterator[None]:
    """Hold an exclusive ``fcntl`` lock on ``out_dir/.lock`` while a run trains."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory file locks in the standard library
        yield
        return
    folder = Path(out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


#: Environment variable set for the kernels that execute the book's chapters (the book's
#: Sphinx extension, ``book/_ext/attncourse_book.py``, sets it): explorers then add their
#: static rendering, and progress bars print their final state instead of a widget.
BOOK_ENV = "ATTNCOURSE_STATIC_EXPLORERS"


def book_build() -> bool:
    """Whether this process executes a chapter for the static book."""
    return env_flag(BOOK_ENV)


class _Nowhere:
    """A file that drops what is written: where a book-build bar draws while it runs."""

    def write(self, text: str) -> None:
        pass

    def flush(self) -> None:
        pass


class _CellLoops:
    """The training loops of one cell in a book build, printed as one line."""

    def __init__(self) -> None:
        self.entries: list[dict] = []
        self.hooked = False

    def add(self, entry: dict) -> None:
        shell = _ipython()
        if shell is None:
            print(entry["line"], file=sys.stdout, flush=True)
            return
        if not self.hooked:
            shell.events.register("post_run_cell", self.flush)
            self.hooked = True
        self.entries.append(entry)

    def flush(self, *_result) -> None:
        entries, self.entries = self.entries, []
        if entries:
            print(summary_line(entries), file=sys.stdout, flush=True)


def _ipython():
    """The running IPython shell (a notebook's kernel), or None."""
    shell = sys.modules.get("IPython")
    shell = shell.get_ipython() if shell is not None else None
    return shell if shell is not None and hasattr(shell, "events") else None


def summary_line(entries: list[dict]) -> str:
    """One line for a cell's loops (entries: line, desc, loaded, n, unit, elapsed s)."""
    if len(entries) == 1:
        return entries[0]["line"]
    trained = [e for e in entries if not e["loaded"]]
    loaded = len(entries) - len(trained)
    parts = []
    if trained:
        seconds = text_tqdm.format_interval(sum(e["elapsed"] for e in trained))
        units = {e["unit"] for e in trained}
        steps = (f"{sum(e['n'] for e in trained):,} {units.pop()}s in " if len(units) == 1
                 else "in ")
        parts.append(f"{len(trained)} trained ({steps}{seconds})")
    if loaded:
        parts.append(f"{loaded} loaded from their checkpoints")
    names = f"{entries[0]['desc']} ... {entries[-1]['desc']}"
    return f"{len(entries)} training loops ({names}): " + ", ".join(parts)


_CELL_LOOPS = _CellLoops()


def announce_loaded(desc: str, steps: int, unit: str) -> None:
    """Say that a cached run was loaded, not trained."""
    line = f"{desc}: trained already ({steps} {unit}), loaded from its checkpoint"
    if book_build():
        _CELL_LOOPS.add({"line": line, "desc": desc, "loaded": True, "n": steps,
                         "unit": unit, "elapsed": 0.0})
    else:
        print(line, flush=True)


class BookBar(text_tqdm):
    """A text bar printing only its final state, once, on stdout (the static book)."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs["file"] = _Nowhere()
        kwargs.setdefault("ascii", False)    # a page shows the blocks of a terminal's bar
        super().__init__(*args, **kwargs)

    def close(self) -> None:
        """Close the bar, adding its final state to the cell's line if ``leave``."""
        if self.disable:
            return
        final = str(self) if self.leave else ""
        state = self.format_dict
        super().close()
        if final:
            _CELL_LOOPS.add({"line": final, "desc": self.desc.rstrip(": ") or "loop",
                             "loaded": False, "n": int(state["n"]),
                             "unit": str(state["unit"]), "elapsed": float(state["elapsed"])})


def progress_bar(iterable=None, *, progress: bool = True, **kwargs) -> tqdm:
    """A ``tqdm.auto`` bar, off when ``progress`` is False or ``TQDM_DISABLE=1``."""
    if not progress:
        kwargs["disable"] = True
    bar = BookBar if book_build() else tqdm
    return bar(iterable, **kwargs)


#: Seconds a loop runs before :func:`quiet_progress` shows its bar.
QUIET_PROGRESS_DELAY_S = 5.0


def quiet_progress(iterable=None, **kwargs) -> tqdm:
    """A :func:`progress_bar` shown only after ``QUIET_PROGRESS_DELAY_S`` seconds."""
    kwargs.setdefault("leave", False)
    return progress_bar(iterable, delay=QUIET_PROGRESS_DELAY_S, **kwargs)
