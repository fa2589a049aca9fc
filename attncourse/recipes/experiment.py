"""Named, repeatable training runs (:class:`Experiment`) for chapters and command line.

:func:`run_experiment` trains one into its store folder, checkpointing every epoch, and
resumes or loads it when called again. Presets: :func:`transformer_preset`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from attncourse.data.batching import build_vocabs, make_batches
from attncourse.data.dates import date_task
from attncourse.data.numbers import number_task
from attncourse.data.pairs import PairDataset, Splits
from attncourse.data.vocab import Vocabulary
from attncourse.nn.luong import LuongSeq2Seq
from attncourse.nn.rnn import Seq2Seq
from attncourse.nn.transformer import Transformer
from attncourse.runtime import data_seed, training_seed
from attncourse.train import store
from attncourse.train.config import (
    FFN_WIDTH,
    HEADS,
    LAYERS,
    WIDTH,
    FitConfig,
    Limit,
    TrainingSettings,
    fit_config_from,
    redefault,
    setting,
)
from attncourse.train.fit import FitResult, fit

#: Generated tasks, by the names the command line uses.
TASKS: tuple[str, ...] = ("numbers-en-fr", "numbers-en-de", "dates")
#: Model families an Experiment can train.
MODEL_KINDS: tuple[str, ...] = ("rnn", "transformer", "luong")
#: Source length the ``"location"`` score is built for (its W_a has one row per source position).
LOCATION_MAX_SRC_LEN = 64
#: Positions of the Transformers :func:`build_model` makes (sources with <eos>, targets with <bos>):
#: at most 511 tokens a side.
TRANSFORMER_MAX_LEN = 512
#: Names of the Transformer presets (:func:`transformer_preset`).
PRESETS: tuple[str, ...] = ("cpu", "gpu")
#: The gpu preset's batch in target tokens: Vaswani et al. (2017), section 5.1, "approximately 25000".
GPU_BATCH_TOKENS = 25_000
#: Mean target tokens per pair (y_1..y_T and <eos>) of each task's training split (default seed),
#: measured; the gpu preset's batch holds GPU_BATCH_TOKENS // this many pairs.
GPU_TARGET_TOKENS: dict[str, int] = {"numbers-en-fr": 10, "numbers-en-de": 11, "dates": 11}
#: The gpu preset's wall-clock training budget, seconds: the train stage of an 8-minute GPU report
#: (book/running.md's plan; about 1,700 steps at the 14.1 steps/s an H200 measured).
GPU_TIME_BUDGET = 120.0
#: sqrt(400 / 4000): the gpu preset's warm-up of 400 steps peaks at the paper's rate (warm-up 4000).
GPU_LR_SCALE = 0.316
_PAIRS = Limit(0, 1_000_000, "generated pairs are held in memory")


def load_task(task: str, *, n_train: int | None = None, n_valid: int | None = None,
              n_test: int | None = None, seed: int = 0, max_value: int | None = None) -> Splits:
    """Disjoint, deterministic train, validation, test splits of a :data:`TASKS` task.

    Sizes default to the task's; ``max_value`` bounds a numbers task's values. Raises
    ``ValueError`` for an unknown task or ``max_value`` with ``"dates"``.
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
    """Pairs with at most ``max_src_len`` source tokens (Bahdanau's "-30" models)."""
    kept = tuple(pair for pair in dataset.pairs if len(pair[0]) <= max_src_len)
    return PairDataset(kept, level=dataset.level, name=f"{dataset.name}-upto{max_src_len}")


@dataclass(frozen=True)
class Experiment(TrainingSettings):
    """One training run, fully described; its fields are its key in the store.

    Fields without ``--help``: ``task`` (:data:`TASKS`), ``model``
    (:data:`MODEL_KINDS`), ``attention`` (RNN: ``"bahdanau"`` or None),
    ``max_train_src_len`` (a training-source filter) and Luong's ``score``, ``mode``,
    ``window`` (half-width D), ``input_feeding``, ``bidirectional``. Raises
    ``ValueError`` for an unknown ``model``. Source: Luong et al. (2015), "Effective
    Approaches to Attention-based NMT", sections 3.1-3.3.
    """

    task: str = "numbers-en-fr"
    attention: str | None = "bahdanau"
    n_train: int = setting(3000, "training pairs to generate (default: the task's, 3000 numbers or 10000 dates)",
                           check="nonnegative_int", limit=_PAIRS, group="data", metavar="N", preset=True)
    n_valid: int = setting(300, "validation pairs to generate (default: the task's, 500 or 1000)",
                           check="nonnegative_int", limit=_PAIRS, group="data", metavar="N", preset=True)
    n_test: int = setting(1000, "test pairs to generate and write to OUT/test.tsv (default: the task's, 1000 or "
                          "2000)", check="nonnegative_int", limit=_PAIRS, group="data", metavar="N", preset=True)
    max_train_src_len: int | None = None
    emb_dim: int = setting(64, "rnn/bahdanau: width of the token embeddings (default 64)", check="positive_int",
                           limit=WIDTH, group="model", metavar="D", preset=True, only="rnn")
    hidden_dim: int = setting(
        128, "rnn/bahdanau: width of the GRU states and of the attention MLP (default 128)", check="positive_int",
        limit=WIDTH, group="model", metavar="D", preset=True, only="rnn")
    epochs: int = redefault(TrainingSettings, "epochs", 12)
    lr: float = redefault(TrainingSettings, "lr", 3e-3)
    data_seed: int = setting(
        0, "seed of the generated data and of how pairs are grouped into batches (default 0)", check="seed",
        group="data", metavar="S")
    model: str = "rnn"
    d_model: int = setting(
        128, "transformer: width of embeddings and of every sub-layer's output (cpu 128, gpu 512)",
        check="positive_int", limit=WIDTH, group="model", metavar="D", preset=True,
        only="transformer")
    num_heads: int = setting(
        4, "transformer: attention heads; must divide --d-model (cpu 4, gpu 8)", check="positive_int",
        limit=HEADS, group="model", flag="--heads", metavar="H", preset=True, only="transformer")
    num_layers: int = setting(
        2, "transformer: layers of the encoder and of the decoder, each (cpu 2, gpu 6)", check="positive_int",
        limit=LAYERS, group="model", flag="--layers", metavar="N", preset=True, only="transformer")
    d_ff: int = setting(
        512, "transformer: inner width of the position-wise feed-forward layers (cpu 512, gpu 2048)",
        check="positive_int", limit=FFN_WIDTH, group="model", metavar="D", preset=True,
        only="transformer")
    norm_first: bool = setting(
        False, "transformer: layer norm before each sub-layer (pre-norm) instead of after it (post-norm, the "
        "paper's; the default)", group="model", preset=True, only="transformer")
    positional: str = setting(
        "sinusoidal", "transformer: fixed sinusoidal position encodings (default) or learned ones",
        choices=("sinusoidal", "learned"), group="model", preset=True, only="transformer")
    tie_embeddings: bool = setting(
        True, "transformer: share the target embedding and output weights (default: shared)", group="model",
        preset=True, only="transformer")
    dropout: float = setting(
        0.0, "dropout (rnn: on embeddings and before the output layer, default 0; transformer: the paper's "
        "P_drop, presets 0.1)", check="dropout", group="model", metavar="P", preset=True)
    score: str = "general"
    mode: str = "global"
    window: int = 4
    input_feeding: bool = True
    bidirectional: bool = True

    def __post_init__(self) -> None:
        if self.model not in MODEL_KINDS:
            raise ValueError(f"model must be one of {MODEL_KINDS}, got {self.model!r}")
        object.__setattr__(self, "betas", tuple(float(b) for b in self.betas))

    @property
    def name(self) -> str:
        """The run's store folder: a readable prefix, then its fields' key."""
        described = {**asdict(self), "betas": list(self.betas)}
        span = "all" if self.max_train_src_len is None else f"upto{self.max_train_src_len}"
        if self.model == "transformer":
            prefix = f"{self.task}/transformer-{span}-d{self.d_model}"
        elif self.model == "luong":
            prefix = f"{self.task}/luong-{self.score}-{self.mode}-{span}-h{self.hidden_dim}"
        else:
            prefix = f"{self.task}/{self.attention or 'rnn'}-{span}-h{self.hidden_dim}"
        return store.run_name(prefix, described)

    def fit_config(self, device: str | None = None, num_threads: int | None = None) -> FitConfig:
        """Its :class:`FitConfig`: its same-named fields, defaults elsewhere."""
        return fit_config_from(self, device=device, num_threads=num_threads)


def _size(vocab: Vocabulary | int) -> int:
    return vocab if isinstance(vocab, int) else len(vocab)


def max_tokens_per_side(experiment: Experiment) -> int | None:
    """Tokens a side :func:`build_model`'s model takes; None if unlimited (RNNs)."""
    return TRANSFORMER_MAX_LEN - 1 if experiment.model == "transformer" else None


def build_model(experiment: Experiment, src_vocab: Vocabulary | int, tgt_vocab: Vocabulary | int) -> torch.nn.Module:
    """The untrained model ``experiment`` describes (seed torch first to repeat it).

    Raises ``ValueError`` for an unknown ``model`` or sizes the model rejects.
    """
    e = experiment
    n_src, n_tgt = _size(src_vocab), _size(tgt_vocab)
    if e.model == "rnn":
        return Seq2Seq(n_src, n_tgt, emb_dim=e.emb_dim, hidden_dim=e.hidden_dim, attention=e.attention,
                       dropout=e.dropout)
    if e.model == "transformer":
        return Transformer(n_src, n_tgt, d_model=e.d_model, num_heads=e.num_heads, num_encoder_layers=e.num_layers,
                           num_decoder_layers=e.num_layers, d_ff=e.d_ff, dropout=e.dropout, norm_first=e.norm_first,
                           positional=e.positional, tie_embeddings=e.tie_embeddings, max_len=TRANSFORMER_MAX_LEN)
    if e.model == "luong":
        return LuongSeq2Seq(n_src, n_tgt, emb_dim=e.emb_dim, hidden_dim=e.hidden_dim, score=e.score, mode=e.mode,
                            window=e.window, input_feeding=e.input_feeding, bidirectional=e.bidirectional,
                            dropout=e.dropout,
                            max_src_len=LOCATION_MAX_SRC_LEN if e.score == "location" else None)
    raise ValueError(f"model must be one of {MODEL_KINDS}, got {e.model!r}")


def transformer_preset(name: str, task: str = "numbers-en-fr", **overrides: Any) -> Experiment:
    """The Transformer :class:`Experiment` of preset ``name``, with ``overrides``.

    Preset ``"cpu"``: a small model that trains in minutes on a laptop. ``"gpu"``: the
    base model and recipe, bfloat16, for ``time_budget`` seconds on one GPU, its warmup
    shortened to the run with the paper's peak rate kept. Raises ``ValueError`` for an
    unknown preset or task, ``TypeError`` for an unknown override. Source: Vaswani et
    al. (2017), "Attention Is All You Need", sections 5.1-5.4 and table 3 (base).
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; choose one of {', '.join(TASKS)}")
    common: dict[str, Any] = dict(task=task, model="transformer", attention=None, dropout=0.1, label_smoothing=0.1,
                                  schedule="noam", betas=(0.9, 0.98), eps=1e-9)
    if name == "cpu":
        base = Experiment(**common, d_model=128, num_heads=4, num_layers=2, d_ff=512, warmup=400, batch_size=64,
                          n_train=10_000, n_valid=500, n_test=1000, epochs=12, lr_scale=0.5, clip_norm=1.0)
    elif name == "gpu":
        dates = task == "dates"  # 36,525 dates in all; character level, so longer sentences
        base = Experiment(**common, d_model=512, num_heads=8, num_layers=6, d_ff=2048, warmup=400,
                          lr_scale=GPU_LR_SCALE, optimizer="adamw", fused=True, amp="bf16", clip_norm=None,
                          batch_size=GPU_BATCH_TOKENS // GPU_TARGET_TOKENS[task],
                          n_train=33_000 if dates else 200_000, n_valid=1000, n_test=2000, epochs=200,
                          length_buckets=4, time_budget=GPU_TIME_BUDGET)
    else:
        raise ValueError(f"unknown preset {name!r}; choose one of {', '.join(PRESETS)}")
    return replace(base, **overrides)


@dataclass
class TrainedModel:
    """What :func:`run_experiment` returns: the model and all needed to use it."""

    experiment: Experiment
    model: torch.nn.Module
    src_vocab: Vocabulary
    tgt_vocab: Vocabulary
    splits: Splits
    train_data: PairDataset
    result: FitResult
    out_dir: Path


def run_experiment(experiment: Experiment, *, progress: bool = True, out_dir: str | Path | None = None,
                   device: str | None = None) -> TrainedModel:
    """Train ``experiment``, or resume or load it from its folder.

    ``out_dir`` defaults to the store's ``runs_dir(experiment.name)``, locked while it
    trains. The model holds the best epoch's weights (by validation exact match).
    """
    e = experiment
    splits = load_task(e.task, n_train=e.n_train, n_valid=e.n_valid, n_test=e.n_test,
                        seed=data_seed(e.data_seed))
    train = splits.train if e.max_train_src_len is None else shorter_than(splits.train, e.max_train_src_len)
    src_vocab, tgt_vocab = build_vocabs(train)
    torch.manual_seed(training_seed(e.seed))  # plus $ATTNCOURSE_SEED_OFFSET (make claims)
    model = build_model(e, src_vocab, tgt_vocab)
    config = e.fit_config(device=device)
    with store.open_run(e.name, out_dir) as out:
        result = fit(
            model,
            make_batches(train, src_vocab, tgt_vocab, e.batch_size, shuffle=True, seed=data_seed(e.data_seed)),
            make_batches(splits.valid, src_vocab, tgt_vocab, 256, shuffle=False),
            config,
            out_dir=out,
            resume=(out / store.CHECKPOINT).is_file(),
            progress=progress,
            extra={"src_vocab": src_vocab.to_dict(), "tgt_vocab": tgt_vocab.to_dict(), "level": train.level,
                   "task": e.task},
        )
    return TrainedModel(e, model, src_vocab, tgt_vocab, splits, train, result, out)


def seconds_to_reach(history: list[dict], threshold: float, key: str = "valid_exact_match") -> float | None:
    """Training seconds until ``history[key]`` reaches ``threshold``; None if never."""
    total = 0.0
    for row in history:
        total += row["seconds"]
        if row[key] >= threshold:
            return total
    return None


__all__ = ["MODEL_KINDS", "PRESETS", "TASKS", "Experiment", "TrainedModel", "build_model", "load_task",
           "run_experiment", "seconds_to_reach", "shorter_than", "transformer_preset"]
