"""Where a run happens and how it is made repeatable: device choice, seeding, progress bars."""

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
    """The best available device: CUDA, then Apple's MPS, then the CPU.

    Parameters
    ----------
    prefer : str, optional
        Force a device such as ``"cpu"``, ``"cuda"``, ``"cuda:1"`` or ``"mps"``.

    Raises
    ------
    ValueError
        If ``prefer`` is not a device string torch understands (``"gpu"``,
        ``"cuda:x"``), names a device type other than those of
        :data:`DEVICE_TYPES` (``"meta"``, ``"xla"``), gives the CPU an index
        (``"cpu:5"``), or names a device this machine does not have (CUDA or
        MPS missing, ``"cuda:3"`` on a machine with fewer GPUs).
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
    """A one-line description such as ``"cuda (NVIDIA H100 80GB HBM3)"`` or ``"cpu (2 threads)"``."""
    if device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(device)})"
    if device.type == "cpu":
        threads = torch.get_num_threads()
        return f"cpu ({threads} thread{'s' if threads != 1 else ''})"
    return device.type


#: Added to every training seed (:func:`training_seed`); unset or 0 in normal use.
SEED_OFFSET_ENV = "ATTNCOURSE_SEED_OFFSET"


def seed_offset() -> int:
    """The integer in ``$ATTNCOURSE_SEED_OFFSET`` (default 0), added to every seed drawn from.

    Why: a chapter's claims about trained models (a loss below a bound, a head found at a
    step) hold for the seeds the chapter uses; ``tools/claims.py``'s ``other-seeds`` variant
    (``make claims``) runs every chapter again with every model trained from another seed,
    on other drawn data, without editing the chapters, to see by how much each claim still
    holds. This is the one place that reads the variable. :func:`seed_everything`, the
    training loops (:func:`attncourse.train.loop.train_epochs`,
    :func:`attncourse.train.fit.fit`) and the recipes take their model seeds through
    :func:`training_seed`; the recipes take the seeds of the data they draw (tasks, batches,
    evaluation contexts, closed-form draws) through :func:`data_seed`; :func:`runs_dir`
    keeps such runs apart from the cached runs of the chapters' own seeds. What a chapter's
    cell draws itself with a literal seed (a toy example the prose walks through) stays.

    Raises
    ------
    ValueError
        If the variable is set to something other than a non-negative integer.
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
    """``seed`` plus :func:`seed_offset`, refusing a seed the offset would not keep apart."""
    offset = seed_offset()
    if offset and not 0 <= int(seed) < offset:
        # seeds in [0, offset) shift to [offset, 2 offset): disjoint from every seed the
        # chapters use themselves, which is what the variant is for
        raise ValueError(f"{what} {seed} is outside [0, {SEED_OFFSET_ENV}={offset}): "
                         "its shifted seed could be one the chapters use themselves")
    return int(seed) + offset


def training_seed(seed: int) -> int:
    """``seed`` plus :func:`seed_offset`: the seed a model is initialised and trained with.

    Raises
    ------
    ValueError
        If an offset is set and ``seed`` is not in ``[0, offset)``.
    """
    return _shifted(seed, "training seed")


def data_seed(seed: int) -> int:
    """``seed`` plus :func:`seed_offset`: the seed a recipe draws its data with.

    Tasks, batches' contexts, evaluation sets and closed-form draws; the same number as
    ``seed`` in normal use (offset 0).

    Raises
    ------
    ValueError
        If an offset is set and ``seed`` is not in ``[0, offset)``.
    """
    return _shifted(seed, "data seed")


def seed_everything(seed: int = 0) -> None:
    """Seed Python's, NumPy's and torch's global generators (with :func:`training_seed`).

    Library code takes explicit ``seed`` arguments; this is for notebooks and
    scripts, so that a whole run is repeatable.
    """
    seed = training_seed(seed)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def env_flag(name: str) -> bool:
    """Whether the environment variable ``name`` is set to something other than off.

    Unset, empty, ``0``, ``false``, ``no`` and ``off`` (any case, spaces ignored) are off;
    anything else is on. The one reader of the course's on/off variables
    (``ATTNCOURSE_NO_TRAINING``, ``ATTNCOURSE_STATIC_EXPLORERS``, ``ATTNCOURSE_CACHE_FITS``).
    """
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


#: Set to 1 while grading: a run of the trained-model cache must be there, finished.
NO_TRAINING_ENV = "ATTNCOURSE_NO_TRAINING"


class UnpreparedRun(RuntimeError):
    """A cached run would have to train while :data:`NO_TRAINING_ENV` forbids it."""


def refuse_cached_training(name: str, done: int, total: int) -> None:
    """Raise :class:`UnpreparedRun` if ``$ATTNCOURSE_NO_TRAINING`` is 1; else return.

    Why: grading must never train. ``python -m attncourse prepare`` trains every cached model
    of the chapters once, before any submission; a submission's grading (the course's
    ``nbgrader_config.py`` sets the variable for ``nbgrader autograde``) then only loads
    them. A run the cache lacks, or holds unfinished (an interrupted training), fails at
    once, naming itself, rather than costing minutes of every submission's time limit.
    Called by the training loops for runs they keep on disk (``train_epochs``, ``fit``
    with an ``out_dir``); a model trained in memory only (a chapter's small in-notebook
    model, a learner's own loop) is not a cached run and trains as usual.

    Parameters
    ----------
    name : str
        The run (its folder).
    done, total : int
        Epochs its checkpoint holds, and epochs it is to have.
    """
    if env_flag(NO_TRAINING_ENV):
        raise UnpreparedRun(f"{name} holds {done} of the run's {total} epochs, and ${NO_TRAINING_ENV} "
                            "says grading does not train: prepare the "
                            "chapter first (python -m attncourse prepare CHAPTER, with the same "
                            "$ATTNCOURSE_RUNS)")


def runs_dir(name: str | None = None) -> Path:
    """Folder where chapters keep their trained models, so a run is never lost.

    ``$ATTNCOURSE_RUNS`` if set (``make`` sets it to ``_build/runs`` of the
    repository, and ``make test`` empties it first so that every test run trains
    afresh); otherwise ``_build/runs`` next to the package in a source checkout,
    or ``~/.cache/attncourse/runs`` for an installed package. With a
    :func:`seed_offset` k other than 0, the runs live in its sub-folder
    ``seed-offset-k``.

    Parameters
    ----------
    name : str, optional
        A sub-folder for one run, e.g. ``"numbers-en-fr/bahdanau-all"``.

    Returns
    -------
    pathlib.Path
        The folder, created if missing.
    """
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
    """Hold an exclusive lock on a cached run's folder while it trains.

    Two notebooks may ask for the same run at once: two chapters open side by side
    in JupyterLab, or the book's chapters executed in parallel. Without a lock both
    would train it and write the same checkpoint; with it the second waits, then
    finds the finished run and loads it. The lock is ``out_dir/.lock``
    (``fcntl.flock``, released when the process ends, even if it is killed).
    Where ``fcntl`` does not exist (Windows), no lock is taken.

    Parameters
    ----------
    out_dir : path
        The run's folder, created if missing.
    """
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
    """Whether this process executes a chapter for the static book (``ATTNCOURSE_STATIC_EXPLORERS=1``)."""
    return env_flag(BOOK_ENV)


class _Nowhere:
    """A file that drops what is written: where a book-build bar draws while it runs."""

    def write(self, text: str) -> None:
        pass

    def flush(self) -> None:
        pass


class _CellLoops:
    """The training loops one notebook cell ran in a book build, shown as one line.

    A cell that trains 18 models would leave 18 lines of finished bars above its results;
    the page needs one: how many loops, how many steps in how long, how many loaded from
    their checkpoints. Each loop's line is kept here while the cell runs and printed, one
    line for all of them, when the cell ends (IPython's ``post_run_cell`` event, on which
    the output still belongs to the cell). Outside IPython (a script) each line is printed
    at once.
    """

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
    """One line for a cell's loops: a loop's own line when alone, else what they did.

    Each entry has ``line`` (what the loop alone would print), ``desc``, ``loaded`` (bool),
    ``n`` (steps), ``unit`` and ``elapsed`` (seconds; 0 for a loaded run).
    """
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
    """Say that a cached run was loaded, not trained: a line, or its part of the cell's line."""
    line = f"{desc}: trained already ({steps} {unit}), loaded from its checkpoint"
    if book_build():
        _CELL_LOOPS.add({"line": line, "desc": desc, "loaded": True, "n": steps,
                         "unit": unit, "elapsed": 0.0})
    else:
        print(line, flush=True)


class BookBar(text_tqdm):
    """A text bar that draws nothing while it runs and prints its final state once, on stdout.

    A static page keeps a cell's outputs as they were when the cell ended. A widget bar
    leaves only its first frame there (its text fallback, ``0/300 [00:00<?, ?step/s]``),
    and a text bar's redraws would each become a line; this bar's one line is the state
    the reader needs: the steps done, the time taken and the rate. Several bars of one cell
    (a cell that trains many models) share one line, printed when the cell ends
    (:func:`summary_line`). A bar that would vanish when done (``leave=False``) prints
    nothing.
    """

    def __init__(self, *args, **kwargs) -> None:
        kwargs["file"] = _Nowhere()
        kwargs.setdefault("ascii", False)    # a page shows the blocks of a terminal's bar
        super().__init__(*args, **kwargs)

    def close(self) -> None:
        """Close the bar, giving its final state to the cell's line if it is left on the page."""
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
    """A ``tqdm.auto`` bar (a widget in a notebook, text in a terminal), off when ``progress`` is False.

    With ``progress=True`` the environment still decides: ``TQDM_DISABLE=1``
    turns every bar of the course off, and ``TQDM_MININTERVAL`` sets how often
    they redraw (tqdm reads both, when it is imported). ``make test`` sets
    ``TQDM_DISABLE=1`` for the notebooks: nobody watches the bars there. While the
    static book is built (:func:`book_build`) the bar is a :class:`BookBar`, whose
    one line of final state is what the page shows.

    Parameters
    ----------
    iterable : iterable, optional
        What to iterate over, as for ``tqdm``.
    progress : bool
        False: no bar, whatever the environment says.
    **kwargs
        Passed to ``tqdm`` (``total``, ``desc``, ``unit``, ``leave``, ...).
    """
    if not progress:
        kwargs["disable"] = True
    bar = BookBar if book_build() else tqdm
    return bar(iterable, **kwargs)


#: Seconds a loop runs before :func:`quiet_progress` shows its bar.
QUIET_PROGRESS_DELAY_S = 5.0


def quiet_progress(iterable=None, **kwargs) -> tqdm:
    """A :func:`progress_bar` that appears only once the loop has run ``QUIET_PROGRESS_DELAY_S``.

    For work that takes a moment on a fast machine and minutes on a slow one (reading a
    model, generating tokens): a learner on a laptop sees steps, rate and time left, and
    a fast machine prints nothing. The bar goes when the loop ends (``leave=False``),
    since such loops run many times in one cell.

    Parameters
    ----------
    iterable : iterable, optional
        What to iterate over, as for ``tqdm``.
    **kwargs
        Passed to ``tqdm`` (``total``, ``desc``, ``unit``, ...).
    """
    kwargs.setdefault("leave", False)
    return progress_bar(iterable, delay=QUIET_PROGRESS_DELAY_S, **kwargs)
