"""Named, repeatable training runs for the chapters and the command line.

An :class:`Experiment` is a frozen description of one run (task, data size,
model, optimisation). :func:`run_experiment` trains it into its own folder under
:func:`~attncourse.train.runtime.runs_dir`, checkpointing every epoch; called
again with the same description it resumes that run, so a finished run loads in
a second and an interrupted one continues where it stopped. Two chapters that
need the same model therefore train it once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from attncourse.data.batching import build_vocabs, make_batches
from attncourse.data.dates import date_task
from attncourse.data.numbers import number_task
from attncourse.data.pairs import PairDataset, Splits
from attncourse.data.vocab import Vocabulary
from attncourse.nn.rnn import Seq2Seq
from attncourse.train.fit import CHECKPOINT_NAME, FitConfig, FitResult, fit
from attncourse.train.runtime import runs_dir

#: Generated tasks, by the names the command line uses.
TASKS: tuple[str, ...] = ("numbers-en-fr", "numbers-en-de", "dates")


def load_task(task: str, *, n_train: int | None = None, n_valid: int | None = None,
              n_test: int | None = None, seed: int = 0, max_value: int | None = None) -> Splits:
    """Generate a task's train, validation and test splits (disjoint, deterministic).

    Parameters
    ----------
    task : {"numbers-en-fr", "numbers-en-de", "dates"}
        English number words to French or German number words (word level), or
        dates in many locales to ISO 8601 (character level).
    n_train, n_valid, n_test : int, optional
        Number of pairs in each split; by default the task's own defaults
        (:func:`~attncourse.data.numbers.number_task`, :func:`~attncourse.data.dates.date_task`).
    seed : int
        Data seed.
    max_value : int, optional
        Numbers tasks only: numbers are drawn below this value.

    Raises
    ------
    ValueError
        For an unknown task, or ``max_value`` with the dates task.
    """
    sizes = {k: v for k, v in dict(n_train=n_train, n_valid=n_valid, n_test=n_test).items() if v is not None}
    sizes["seed"] = seed
    if task == "dates":
        if max_value is not None:
            raise ValueError("max_value applies to the numbers tasks only")
        return date_task(**sizes)
    if task in ("numbers-en-fr", "numbers-en-de"):
        extra = {} if max_value is None else {"max_value": max_value}
        return number_task(lang=task.rsplit("-", 1)[1], **sizes, **extra)
    raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")


def shorter_than(dataset: PairDataset, max_src_len: int) -> PairDataset:
    """The pairs whose source has at most ``max_src_len`` tokens (Bahdanau et al.'s "-30" models)."""
    kept = tuple(pair for pair in dataset.pairs if len(pair[0]) <= max_src_len)
    return PairDataset(kept, level=dataset.level, name=f"{dataset.name}-upto{max_src_len}")


@dataclass(frozen=True)
class Experiment:
    """One training run, fully described (and hashed into its folder name).

    Attributes
    ----------
    task : str
        One of :data:`TASKS`.
    attention : {"bahdanau", None}
        The decoder: Bahdanau attention, or the plain encoder-decoder whose only
        context is the final encoder state.
    n_train, n_valid, n_test : int
        Split sizes before any length filter.
    max_train_src_len : int or None
        Train only on pairs with at most this many source tokens (the test split
        keeps every length).
    emb_dim, hidden_dim : int
        Embedding and GRU widths.
    epochs, lr, batch_size, patience, seed, data_seed
        Optimisation settings, see :class:`~attncourse.train.fit.FitConfig`.
    """

    task: str = "numbers-en-fr"
    attention: str | None = "bahdanau"
    n_train: int = 3000
    n_valid: int = 300
    n_test: int = 1000
    max_train_src_len: int | None = None
    emb_dim: int = 64
    hidden_dim: int = 128
    epochs: int = 12
    lr: float = 3e-3
    batch_size: int = 64
    patience: int | None = None
    seed: int = 0
    data_seed: int = 0

    @property
    def name(self) -> str:
        """Folder name: readable prefix plus a hash of every field."""
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:10]
        kind = self.attention or "rnn"
        span = "all" if self.max_train_src_len is None else f"upto{self.max_train_src_len}"
        return f"{self.task}/{kind}-{span}-h{self.hidden_dim}-{digest}"


@dataclass
class TrainedModel:
    """What :func:`run_experiment` returns: the model and everything needed to use it."""

    experiment: Experiment
    model: Seq2Seq
    src_vocab: Vocabulary
    tgt_vocab: Vocabulary
    splits: Splits
    train_data: PairDataset
    result: FitResult
    out_dir: Path


def run_experiment(experiment: Experiment, *, progress: bool = True, out_dir: str | Path | None = None,
                   device: str | None = None) -> TrainedModel:
    """Train an experiment, or resume / load it if its folder already holds the run.

    Parameters
    ----------
    experiment : Experiment
    progress : bool
        tqdm progress bars while training.
    out_dir : path, optional
        Defaults to ``runs_dir(experiment.name)``.
    device : str, optional
        Force a device; default: the best available.

    Returns
    -------
    TrainedModel
        The model holds the best epoch's weights (by validation exact match).
    """
    e = experiment
    splits = load_task(e.task, n_train=e.n_train, n_valid=e.n_valid, n_test=e.n_test, seed=e.data_seed)
    train = splits.train if e.max_train_src_len is None else shorter_than(splits.train, e.max_train_src_len)
    src_vocab, tgt_vocab = build_vocabs(train)
    torch.manual_seed(e.seed)
    model = Seq2Seq(len(src_vocab), len(tgt_vocab), emb_dim=e.emb_dim, hidden_dim=e.hidden_dim,
                    attention=e.attention)
    out = Path(out_dir) if out_dir is not None else runs_dir(e.name)
    config = FitConfig(epochs=e.epochs, lr=e.lr, batch_size=e.batch_size, patience=e.patience,
                       seed=e.seed, device=device)
    result = fit(
        model,
        make_batches(train, src_vocab, tgt_vocab, e.batch_size, shuffle=True, seed=e.data_seed),
        make_batches(splits.valid, src_vocab, tgt_vocab, 256, shuffle=False),
        config,
        out_dir=out,
        resume=(out / CHECKPOINT_NAME).is_file(),
        progress=progress,
        extra={"src_vocab": src_vocab.to_dict(), "tgt_vocab": tgt_vocab.to_dict(), "level": train.level,
               "task": e.task},
    )
    return TrainedModel(e, model, src_vocab, tgt_vocab, splits, train, result, out)


def seconds_to_reach(history: list[dict], threshold: float, key: str = "valid_exact_match") -> float | None:
    """Training seconds (summed over epochs) until ``history[key]`` first reaches ``threshold``; None if never."""
    total = 0.0
    for row in history:
        total += row["seconds"]
        if row[key] >= threshold:
            return total
    return None


__all__ = ["TASKS", "Experiment", "TrainedModel", "load_task", "run_experiment", "seconds_to_reach", "shorter_than"]
