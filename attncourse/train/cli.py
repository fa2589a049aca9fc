"""Command line: ``python -m attncourse train ...`` and ``python -m attncourse evaluate ...``.

Train an encoder-decoder (an RNN, with or without Bahdanau attention, or a
Transformer) on a generated task or on your own TSV files, then score the best
weights on a test file::

    python -m attncourse train --task numbers-en-fr --model bahdanau --out runs/fr --epochs 10
    python -m attncourse train --task dates --model transformer --preset cpu --out runs/dates-tf
    python -m attncourse evaluate runs/fr --test runs/fr/test.tsv --beam-size 4

Several GPUs (or CPU processes) train one model together under ``torchrun``::

    torchrun --nproc_per_node 4 -m attncourse train --task numbers-en-fr --model transformer \
        --preset gpu --out runs/base

A training run writes into ``--out``: ``checkpoint.pt`` (resume with ``--resume``),
``best.pt`` (the best epoch's weights and vocabularies), ``config.json``,
``history.json`` (updated every epoch), ``results.json`` (what ran where, how
fast, and the learning curves) and, for a generated task, ``test.tsv``.
``evaluate`` prints a table of metrics overall and by source length, writes
them to ``metrics.json`` and adds them to ``results.json``.

Any user error (a bad option, a missing file, a malformed TSV line, an
unreadable checkpoint) ends with one line ``attncourse: error: ...`` on stderr
and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import torch
from tqdm.auto import tqdm

import attncourse
from attncourse.data.batching import build_vocabs, make_batches
from attncourse.data.pairs import LEVELS, PairDataset, Splits, load_tsv, save_tsv
from attncourse.data.vocab import Vocabulary
from attncourse.nn.rnn import count_parameters
from attncourse.train.checkpoint import load_model
from attncourse.train.distributed import env_world_size, init_distributed, teardown_distributed
from attncourse.train.experiment import PRESETS, TASKS, Experiment, build_model, load_task, transformer_preset
from attncourse.train.fit import BEST_NAME, CHECKPOINT_NAME, FitConfig, check_resume, evaluate, fit
from attncourse.train.metrics import format_table
from attncourse.train.runtime import describe_device, pick_device

#: --model choices: (Experiment.model, Experiment.attention)
MODELS = {"rnn": ("rnn", None), "bahdanau": ("rnn", "bahdanau"), "transformer": ("transformer", None)}
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

#: Options whose default depends on the model: argparse leaves them None and _resolve fills them in,
#: from the preset (Transformer) or from these RNN defaults. Keys are argparse dests = Experiment fields.
RNN_DEFAULTS: dict[str, Any] = {
    "emb_dim": 64, "hidden_dim": 128, "dropout": 0.0, "epochs": 10, "batch_size": 64, "lr": 1e-3,
    "clip_norm": 1.0, "label_smoothing": 0.0, "schedule": None, "warmup": 4000, "lr_scale": 1.0,
    "optimizer": "adam", "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.0, "amp": None, "fused": False,
    "compile": False,
}
#: Options of the Transformer only, and of the RNN only.
TRANSFORMER_OPTIONS = ("d_model", "num_heads", "num_layers", "d_ff", "norm_first", "positional", "tie_embeddings")
RNN_OPTIONS = ("emb_dim", "hidden_dim")
#: What a preset sets besides the options above: the training recipe and, for --task, the split sizes.
PRESET_OPTIONS = TRANSFORMER_OPTIONS + (
    "dropout", "epochs", "batch_size", "clip_norm", "label_smoothing", "schedule", "warmup", "lr_scale",
    "optimizer", "betas", "eps", "weight_decay", "amp", "fused", "compile",
)


class _Parser(argparse.ArgumentParser):
    """argparse, but errors are one line (no usage block), in the same form as our own errors."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"attncourse: error: {message} (see '{self.prog} --help')\n")


def _parse(text: str, cast: type, what: str):
    """``cast(text)``, or the one-line argparse error that names what was expected."""
    try:
        return cast(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None


def _positive_int(text: str) -> int:
    value = _parse(text, int, "a whole number")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number >= 1, got {value}")
    return value


def _nonnegative_int(text: str) -> int:
    value = _parse(text, int, "a whole number")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = _parse(text, float, "a number")
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, got {text}")
    return value


def _probability(text: str) -> float:
    value = _parse(text, float, "a number")
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a probability in [0, 1], got {text}")
    return value


def _dropout(text: str) -> float:
    value = _probability(text)
    if value >= 1.0:
        raise argparse.ArgumentTypeError(f"dropout must be below 1, got {text}")
    return value


def _below_one(text: str) -> float:
    value = _probability(text)
    if value >= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text}")
    return value


def _nonnegative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value >= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text}")
    return value


TRAIN_EPILOG = """\
presets (--model transformer; every option you do not give comes from the preset):
  cpu  d_model 128, 4 heads, 2+2 layers, d_ff 512, dropout 0.1, label smoothing 0.1,
       Adam(0.9, 0.98, 1e-9), warmup schedule (warmup 400, rate x0.5), batches of 64, 12 epochs,
       10,000 generated training pairs: minutes on a laptop (the default preset)
  gpu  the base model of Vaswani et al. (2017): d_model 512, 8 heads, 6+6 layers,
       d_ff 2048, dropout 0.1, label smoothing 0.1, fused AdamW(0.9, 0.98, 1e-9) without
       weight decay, warmup 4000, no clipping, bf16 autocast, batches of 512 sentences
       (128 for dates), 200,000 generated training pairs (33,000 for dates)

several GPUs or processes (data parallel, gradients averaged by DistributedDataParallel):
  torchrun --nproc_per_node 4 -m attncourse train --task numbers-en-fr \\
      --model transformer --preset gpu --out runs/base
  Each process trains on its share of the batches (--batch-size is per process); rank 0
  validates, prints and writes the files. Without GPUs the processes use the CPU ('gloo').

examples:
  python -m attncourse train --task numbers-en-fr --model bahdanau --out runs/fr
  python -m attncourse train --task dates --model transformer --preset cpu --epochs 5 --out runs/tf
"""


def build_parser() -> argparse.ArgumentParser:
    """The ``attncourse`` argument parser, with ``train`` and ``evaluate`` sub-commands."""
    parser = _Parser(
        prog="attncourse",
        description="Train and evaluate the course's encoder-decoders: RNNs (with or without Bahdanau "
                    "attention) and the Transformer.",
    )
    parser.add_argument("--version", action="version", version=f"attncourse {attncourse.__version__}",
                        help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    train = commands.add_parser(
        "train", help="train a model on a generated task or on TSV files",
        description="Train a sequence-to-sequence model; give either --task, or --train and --valid.",
        epilog=TRAIN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    data = train.add_argument_group("data")
    data.add_argument("--task", choices=TASKS,
                      help="generate a task: English number words to French or German words "
                           "(word level), or dates in many formats to ISO 8601 (character level)")
    data.add_argument("--train", metavar="FILE.tsv", type=Path,
                      help="training pairs, one 'source<TAB>target' per line (UTF-8)")
    data.add_argument("--valid", metavar="FILE.tsv", type=Path,
                      help="validation pairs in the same format (required with --train)")
    data.add_argument("--level", choices=LEVELS,
                      help="tokens of the TSV files: 'word' (split on spaces, the default) or 'char' "
                           "(every character); generated tasks set it themselves")
    data.add_argument("--n-train", type=_nonnegative_int, metavar="N",
                      help="training pairs to generate (default: the task's, 3000 numbers or 10000 dates)")
    data.add_argument("--n-valid", type=_nonnegative_int, metavar="N",
                      help="validation pairs to generate (default: the task's, 500 or 1000)")
    data.add_argument("--n-test", type=_nonnegative_int, metavar="N",
                      help="test pairs to generate and write to OUT/test.tsv (default: the task's, 1000 or 2000)")
    data.add_argument("--max-value", type=_positive_int, metavar="N",
                      help="numbers tasks: numbers are drawn below N (default 10**9, up to nine digits)")
    data.add_argument("--data-seed", type=int, default=0, metavar="S",
                      help="seed of the generated data and of how pairs are grouped into batches (default 0)")

    model = train.add_argument_group("model")
    model.add_argument("--model", choices=tuple(MODELS), default="bahdanau",
                       help="'rnn': encoder-decoder whose decoder sees only the encoder's final state; "
                            "'bahdanau': with additive attention (default); 'transformer': Vaswani et al. (2017)")
    model.add_argument("--preset", choices=PRESETS,
                       help="transformer only: 'cpu' (small, the default) or 'gpu' (the base model); "
                            "it sets every model and training option you do not give (see below)")
    model.add_argument("--emb-dim", type=_positive_int, metavar="D",
                       help="rnn/bahdanau: width of the token embeddings (default 64)")
    model.add_argument("--hidden-dim", type=_positive_int, metavar="D",
                       help="rnn/bahdanau: width of the GRU states and of the attention MLP (default 128)")
    model.add_argument("--d-model", type=_positive_int, metavar="D",
                       help="transformer: width of embeddings and of every sub-layer's output (cpu 128, gpu 512)")
    model.add_argument("--heads", dest="num_heads", type=_positive_int, metavar="H",
                       help="transformer: attention heads; must divide --d-model (cpu 4, gpu 8)")
    model.add_argument("--layers", dest="num_layers", type=_positive_int, metavar="N",
                       help="transformer: layers of the encoder and of the decoder, each (cpu 2, gpu 6)")
    model.add_argument("--d-ff", type=_positive_int, metavar="D",
                       help="transformer: inner width of the position-wise feed-forward layers (cpu 512, gpu 2048)")
    model.add_argument("--norm-first", action=argparse.BooleanOptionalAction, default=None,
                       help="transformer: layer norm before each sub-layer (pre-norm) instead of after it "
                            "(post-norm, the paper's; the default)")
    model.add_argument("--positional", choices=("sinusoidal", "learned"),
                       help="transformer: fixed sinusoidal position encodings (default) or learned ones")
    model.add_argument("--tie-embeddings", action=argparse.BooleanOptionalAction, default=None,
                       help="transformer: share the target embedding and output weights (default: shared)")
    model.add_argument("--dropout", type=_dropout, metavar="P",
                       help="dropout (rnn: on embeddings and before the output layer, default 0; "
                            "transformer: the paper's P_drop, presets 0.1)")

    run = train.add_argument_group("training")
    run.add_argument("--out", type=Path, required=True, metavar="DIR",
                     help="directory for checkpoint.pt, best.pt, config.json, history.json, results.json "
                          "(and test.tsv)")
    run.add_argument("--epochs", type=_positive_int, metavar="N",
                     help="total epochs; with --resume, training continues up to N "
                          "(default 10; presets: cpu 15, gpu 40, 60 for dates)")
    run.add_argument("--batch-size", type=_positive_int, metavar="B",
                     help="sentence pairs per batch, per process (default 64; gpu preset 512, 128 for dates)")
    run.add_argument("--lr", type=_positive_float,
                     help="constant learning rate (default 0.001); not with --schedule noam, use --lr-scale")
    run.add_argument("--schedule", choices=("constant", "noam"),
                     help="'constant': --lr throughout (rnn default); 'noam': linear warmup then 1/sqrt(step) "
                          "decay, Vaswani et al. eq. (3), set every batch (transformer presets)")
    run.add_argument("--warmup", type=_positive_int, metavar="STEPS",
                     help="--schedule noam: optimizer steps (batches) of warmup, where the rate peaks "
                          "(presets: cpu 400, gpu 4000)")
    run.add_argument("--lr-scale", type=_positive_float, metavar="S",
                     help="--schedule noam: multiply the rate of eq. (3) by S (default 1); for an rnn its "
                          "d_model is --hidden-dim")
    run.add_argument("--optimizer", choices=("adam", "adamw"),
                     help="Adam (default) or AdamW (decoupled weight decay; the gpu preset, without decay)")
    run.add_argument("--betas", type=_below_one, nargs=2, metavar=("B1", "B2"),
                     help="Adam's moment decay rates (default 0.9 0.999; transformer presets 0.9 0.98)")
    run.add_argument("--adam-eps", dest="eps", type=_positive_float, metavar="E",
                     help="Adam's epsilon (default 1e-8; transformer presets 1e-9)")
    run.add_argument("--weight-decay", type=_nonnegative_float, metavar="W",
                     help="weight decay (default 0; with --optimizer adam an L2 penalty, with adamw decoupled)")
    run.add_argument("--label-smoothing", type=_below_one, metavar="EPS",
                     help="label smoothing epsilon in [0, 1) (default 0; transformer presets 0.1); the reported "
                          "losses stay the plain cross-entropy")
    run.add_argument("--clip-norm", type=_positive_float, metavar="C",
                     help="clip the gradient's global norm to C (default 1.0; gpu preset: no clipping)")
    run.add_argument("--no-clip", action="store_true", help="do not clip the gradient")
    run.add_argument("--amp", choices=("bf16", "none"),
                     help="'bf16': bfloat16 autocast of the forward passes (gpu preset; about 2x faster on "
                          "recent GPUs, allowed but usually slower on CPUs); 'none': float32 (default)")
    run.add_argument("--fused", action=argparse.BooleanOptionalAction, default=None,
                     help="fused Adam/AdamW kernel, CUDA only (gpu preset); ignored on other devices")
    run.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                     help="torch.compile the training forward pass (first epoch slower; off by default)")
    run.add_argument("--teacher-forcing", type=_probability, default=1.0, metavar="P",
                     help="probability of feeding the gold previous token; below 1 the decoder is sometimes "
                          "fed its own prediction (scheduled sampling; slower). Default 1.0")
    run.add_argument("--patience", type=_positive_int, metavar="N",
                     help="stop after N epochs without a better validation exact match (ties: lower loss); "
                          "default: train all epochs")
    run.add_argument("--seed", type=int, default=0, metavar="S",
                     help="seed of the initial weights, the batch order and dropout (default 0)")
    run.add_argument("--device", metavar="DEV",
                     help="'cpu', 'cuda', 'cuda:1', 'mps'; default: CUDA, then MPS, then the CPU")
    run.add_argument("--threads", type=_positive_int, default=1, metavar="N",
                     help="CPU threads for torch (default 1: faster than more for these small models)")
    run.add_argument("--resume", action="store_true",
                     help="continue the run in --out from its checkpoint.pt, with the same data and settings")
    run.add_argument("--no-progress", action="store_true", help="no progress bars, only one line per epoch")

    ev = commands.add_parser(
        "evaluate", help="score a trained model (DIR/best.pt) on a TSV test file",
        description="Decode a TSV test file with DIR/best.pt and print exact match, token accuracy, "
                    "BLEU and chrF overall and by source length.",
    )
    ev.add_argument("dir", type=Path, metavar="DIR", help="a directory written by 'attncourse train'")
    ev.add_argument("--test", type=Path, required=True, metavar="FILE.tsv",
                    help="test pairs, one 'source<TAB>target' per line (UTF-8)")
    ev.add_argument("--beam-size", type=_positive_int, default=1, metavar="K",
                    help="1: greedy decoding (default); K > 1: beam search keeping K hypotheses")
    ev.add_argument("--length-penalty", type=float, default=0.6, metavar="A",
                    help="alpha of the beam search's length penalty ((5 + |y|) / 6)^alpha (default 0.6)")
    ev.add_argument("--json", type=Path, metavar="OUT",
                    help="where to write the metrics as JSON (default DIR/metrics.json)")
    ev.add_argument("--predictions", type=Path, metavar="OUT.tsv",
                    help="also write 'source<TAB>reference<TAB>hypothesis' lines to this file")
    ev.add_argument("--edges", type=_positive_int, nargs="+", metavar="L",
                    help="left edges of the source-length buckets in tokens, e.g. '1 4 8 12' "
                         "(default: five equal-width buckets)")
    ev.add_argument("--level", choices=LEVELS,
                    help="tokens of the test file (default: the level the model was trained on)")
    ev.add_argument("--batch-size", type=_positive_int, default=256, metavar="B",
                    help="sentences decoded at once (default 256)")
    ev.add_argument("--device", metavar="DEV",
                    help="'cpu', 'cuda', 'mps'; default: CUDA, then MPS, then the CPU")
    ev.add_argument("--threads", type=_positive_int, default=1, metavar="N",
                    help="CPU threads for torch (default 1)")
    return parser


class _UsageError(Exception):
    """A combination of options that argparse cannot check by itself."""


def _check_train_args(args: argparse.Namespace) -> None:
    """Raise _UsageError for options that do not go together."""
    if args.task is None:
        if args.train is None or args.valid is None:
            raise _UsageError("give --task, or both --train and --valid")
        for name in ("n_train", "n_valid", "n_test", "max_value"):
            if getattr(args, name) is not None:
                raise _UsageError(f"--{name.replace('_', '-')} applies to generated tasks (--task) only")
    else:
        if args.train is not None or args.valid is not None:
            raise _UsageError("give either --task or --train/--valid, not both")
        if args.level is not None:
            raise _UsageError("--level applies to TSV files; a generated task has its own level")
        if args.task == "dates" and args.max_value is not None:
            raise _UsageError("--max-value applies to the numbers tasks only")
    _resolve(args)


def _flag(dest: str) -> str:
    return {"num_heads": "--heads", "num_layers": "--layers", "eps": "--adam-eps"}.get(
        dest, "--" + dest.replace("_", "-"))


def _resolve(args: argparse.Namespace) -> None:
    """Fill in the options left unset, from the preset or the RNN defaults; raise _UsageError for bad combinations.

    Afterwards ``args`` holds every Experiment-like setting, ``args.kind`` ("rnn" or "transformer")
    and ``args.preset`` (None for RNNs).
    """
    kind, args.attention = MODELS[args.model]
    args.kind = kind
    if args.no_clip and args.clip_norm is not None:
        raise _UsageError("give --clip-norm or --no-clip, not both")
    if kind == "rnn":
        if args.preset is not None:
            raise _UsageError("--preset applies to --model transformer only")
        for dest in TRANSFORMER_OPTIONS:
            if getattr(args, dest) is not None:
                raise _UsageError(f"{_flag(dest)} applies to --model transformer only")
        defaults = dict(RNN_DEFAULTS)
    else:
        for dest in RNN_OPTIONS:
            if getattr(args, dest) is not None:
                raise _UsageError(f"{_flag(dest)} applies to --model rnn and bahdanau only")
        args.preset = args.preset or "cpu"
        preset = transformer_preset(args.preset, task=args.task or "numbers-en-fr")
        defaults = {dest: getattr(preset, dest) for dest in PRESET_OPTIONS}
        defaults["lr"] = RNN_DEFAULTS["lr"]
        if args.task is not None:
            for dest in ("n_train", "n_valid", "n_test"):
                if getattr(args, dest) is None:
                    setattr(args, dest, getattr(preset, dest))
    explicit_lr = args.lr is not None
    explicit = {dest for dest in defaults if getattr(args, dest, None) is not None}
    if args.schedule == "constant":
        args.schedule = None
        explicit.add("schedule")
    if args.amp == "none":
        args.amp = None
        explicit.add("amp")
    if args.no_clip:
        explicit.add("clip_norm")
    for dest, value in defaults.items():
        if dest not in explicit:
            setattr(args, dest, value)
    args.betas = tuple(args.betas)
    if args.schedule is not None and explicit_lr:
        raise _UsageError("--lr sets a constant rate; with --schedule noam the rate follows eq. (3): "
                          "scale it with --lr-scale")
    if args.schedule is None:
        for dest in ("warmup", "lr_scale"):
            if dest in explicit:
                raise _UsageError(f"{_flag(dest)} applies to --schedule noam only")
    if kind == "transformer" and args.d_model % args.num_heads != 0:
        raise _UsageError(f"--d-model {args.d_model} is not divisible by --heads {args.num_heads}")
    if env_world_size() > 1 and args.teacher_forcing < 1.0:
        raise _UsageError("--teacher-forcing below 1 cannot run on several processes (torchrun)")


def experiment_from_args(args: argparse.Namespace) -> Experiment:
    """The :class:`~attncourse.train.experiment.Experiment` fields a resolved ``train`` command sets.

    Used to build the model with :func:`~attncourse.train.experiment.build_model`; the data options
    (TSV files, level, max value) stay with the command.
    """
    values = {f: getattr(args, f) for f in PRESET_OPTIONS + RNN_OPTIONS if getattr(args, f, None) is not None}
    values.update(model=args.kind, attention=args.attention, lr=args.lr, seed=args.seed,
                  data_seed=args.data_seed, patience=args.patience, clip_norm=args.clip_norm,
                  task=args.task or "numbers-en-fr", betas=tuple(args.betas))
    return Experiment(**values)


def _load_data(args: argparse.Namespace) -> tuple[Splits | None, PairDataset, PairDataset, str]:
    """Return (generated splits or None, train dataset, valid dataset, level)."""
    if args.task is None:
        level = args.level or "word"
        train = load_tsv(args.train, level=level)
        valid = load_tsv(args.valid, level=level)
        return None, train, valid, level
    splits = load_task(args.task, n_train=args.n_train, n_valid=args.n_valid, n_test=args.n_test,
                       seed=args.data_seed, max_value=args.max_value)
    if len(splits.train) == 0 or len(splits.valid) == 0:
        raise ValueError("--n-train and --n-valid must be at least 1")
    return splits, splits.train, splits.valid, splits.train.level


def _json_safe(obj: Any) -> Any:
    """NaN and infinities become null, so the file is strict JSON."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {str(k): _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(_json_safe(obj), indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def _epoch_line(row: dict[str, float]) -> str:
    return (
        f"epoch {row['epoch']:3d}  train loss {row['train_loss']:.3f} acc {row['train_acc']:.3f}  "
        f"valid loss {row['valid_loss']:.3f} acc {row['valid_acc']:.3f} "
        f"exact {row['valid_exact_match']:.3f}  {row['seconds']:.1f} s"
    )


def git_commit() -> str | None:
    """``git rev-parse HEAD`` of the checkout attncourse is imported from, or None (no git, not a checkout)."""
    try:
        proc = subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(attncourse.__file__).resolve().parent,
                              capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    commit = proc.stdout.strip()
    return commit if proc.returncode == 0 and len(commit) == 40 else None


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return device.type


def run_train(args: argparse.Namespace) -> int:
    """The ``train`` sub-command; returns the exit status.

    Under ``torchrun`` (``WORLD_SIZE`` > 1) every process runs it: it joins the
    process group, trains its share, and only rank 0 prints and writes files.
    """
    world = init_distributed(args.device)
    try:
        return _train(args, world)
    finally:
        teardown_distributed()


def _train(args: argparse.Namespace, world: Any) -> int:
    main_rank = world.is_main
    out: Path = args.out
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {str(out)!r} exists and is not a directory")
    if not args.resume and (out / CHECKPOINT_NAME).exists():
        raise ValueError(
            f"{out} already holds a run ({CHECKPOINT_NAME}); pass --resume to continue it or choose another --out"
        )
    if args.resume and not (out / CHECKPOINT_NAME).is_file():
        raise ValueError(f"--resume: no {CHECKPOINT_NAME} in {str(out)!r} to continue from")
    splits, train_data, valid_data, level = _load_data(args)
    src_vocab, tgt_vocab = build_vocabs(train_data)
    experiment = experiment_from_args(args)
    torch.manual_seed(args.seed)
    try:
        model = build_model(experiment, src_vocab, tgt_vocab)
    except ImportError as err:
        raise ValueError(f"--model {args.model}: {err}") from None
    config = FitConfig(epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, clip_norm=args.clip_norm,
                       teacher_forcing=args.teacher_forcing, patience=args.patience, seed=args.seed,
                       device=args.device, num_threads=args.threads, label_smoothing=args.label_smoothing,
                       optimizer=args.optimizer, betas=args.betas, eps=args.eps, weight_decay=args.weight_decay,
                       schedule=args.schedule, warmup=args.warmup, lr_scale=args.lr_scale,
                       d_model_for_schedule=args.hidden_dim if args.kind == "rnn" else None,
                       fused=args.fused, amp=args.amp, compile=args.compile)
    device = pick_device(args.device)
    if world.distributed and device.type == "cuda":
        device = torch.device("cuda", world.local_rank % torch.cuda.device_count())
    where = f"cpu, {args.threads} thread(s)" if device.type == "cpu" else describe_device(device)
    if world.distributed:
        where += f", {world.world_size} processes ({world.backend})"
    train_batches = make_batches(train_data, src_vocab, tgt_vocab, args.batch_size, shuffle=True,
                                 seed=args.data_seed)
    valid_batches = make_batches(valid_data, src_vocab, tgt_vocab, 256, shuffle=False)
    extra = {"src_vocab": src_vocab.to_dict(), "tgt_vocab": tgt_vocab.to_dict(), "level": level,
             "task": args.task}

    if args.resume:  # before anything in out is rewritten
        check_resume(out, model, train_batches, config, extra)
    n_parameters = count_parameters(model)
    if main_rank:
        out.mkdir(parents=True, exist_ok=True)
        if splits is not None and len(splits.test) > 0:
            save_tsv(splits.test, out / "test.tsv")
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "command"}
        _write_json(out / "config.json", {
            "attncourse_version": attncourse.__version__,
            "arguments": settings,
            "model_type": args.kind,
            "model_class": type(model).__name__,
            "preset": args.preset,
            "model": model.config,
            "n_parameters": n_parameters,
            "fit": vars(config),
            "level": level,
            "n_pairs": {"train": len(train_data), "valid": len(valid_data),
                        "test": 0 if splits is None else len(splits.test)},
            "vocab_sizes": {"src": len(src_vocab), "tgt": len(tgt_vocab)},
            "device": where,
            "world_size": world.world_size,
        })
        preset = f" (preset {args.preset})" if args.preset else ""
        print(f"attncourse: {args.model} model{preset}, {n_parameters:,} parameters, "
              f"{len(train_data)} training pairs, on {where}", flush=True)
        if args.fused and device.type != "cuda":
            print(f"attncourse: note: --fused works on CUDA only; the plain Adam kernel runs on {device.type}",
                  flush=True)

    def report(history: list[dict[str, float]]) -> None:
        _write_json(out / "history.json", history)
        tqdm.write(_epoch_line(history[-1]), file=sys.stdout)

    result = fit(model, train_batches, valid_batches, config, out_dir=out, resume=args.resume,
                 progress=not args.no_progress, extra=extra, callback=report)
    if not main_rank:
        return 0
    _write_json(out / "history.json", result.history)
    _write_json(out / "results.json", {
        "task": args.task if args.task is not None else str(args.train),
        "model": args.model,
        "model_type": args.kind,
        "preset": args.preset,
        "n_parameters": n_parameters,
        "model_config": model.config,
        "device": device.type,
        "device_name": _device_name(device),
        "world_size": result.world_size,
        "amp": args.amp,
        "compile": args.compile,
        "torch_version": str(torch.__version__),
        "attncourse_version": attncourse.__version__,
        "git_commit": git_commit(),
        "wall_time": result.wall_time,
        "train_seconds": result.train_seconds,
        "train_tokens": result.train_tokens,
        "tokens_per_second": result.tokens_per_second,
        "best_epoch": result.best_epoch,
        "stopped_early": result.stopped_early,
        "history": result.history,
    })
    if result.best_epoch:
        best = result.history[result.best_epoch - 1]
        stop = " (stopped early)" if result.stopped_early else ""
        print(f"best epoch {result.best_epoch}{stop}: valid exact match {best['valid_exact_match']:.3f}, "
              f"valid loss {best['valid_loss']:.3f}; weights in {out / BEST_NAME}")
    print(f"wall time {result.wall_time:.1f} s, {result.tokens_per_second:,.0f} target tokens/s in training")
    if (out / "test.tsv").is_file():
        print(f"next: python -m attncourse evaluate {out} --test {out / 'test.tsv'}")
    return 0


def run_evaluate(args: argparse.Namespace) -> int:
    """The ``evaluate`` sub-command; returns the exit status."""
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    try:
        return _evaluate(args)
    finally:
        torch.set_num_threads(previous_threads)


def _evaluate(args: argparse.Namespace) -> int:
    device = pick_device(args.device)
    model, checkpoint = load_model(args.dir / BEST_NAME, map_location=device)
    extra = checkpoint["extra"]
    if not isinstance(extra.get("src_vocab"), dict) or not isinstance(extra.get("tgt_vocab"), dict):
        raise ValueError(f"{args.dir / BEST_NAME} holds no vocabularies; was it written by 'attncourse train'?")
    src_vocab = Vocabulary.from_dict(extra["src_vocab"])
    tgt_vocab = Vocabulary.from_dict(extra["tgt_vocab"])
    level = args.level or extra.get("level", "word")
    test = load_tsv(args.test, level=level)
    start = time.perf_counter()
    result = evaluate(model, test, src_vocab, tgt_vocab, beam_size=args.beam_size, batch_size=args.batch_size,
                      edges=args.edges, length_penalty=args.length_penalty)
    seconds = time.perf_counter() - start
    metrics = result["metrics"]
    decoding = "greedy" if args.beam_size == 1 else f"beam search, K={args.beam_size}"
    print(f"{test.name}: {len(test)} pairs, {decoding}, model from epoch {checkpoint['epoch']}")
    print(format_table(metrics))
    report = {
        "checkpoint": str(args.dir / BEST_NAME),
        "epoch": checkpoint["epoch"],
        "test": str(args.test),
        "level": level,
        "beam_size": args.beam_size,
        "length_penalty": args.length_penalty if args.beam_size > 1 else None,
        "edges": result["edges"],
        "overall": metrics["overall"],
        "buckets": {k: v for k, v in metrics.items() if k != "overall"},
        "model_class": checkpoint.get("model_class"),
        "device": device.type,
        "device_name": _device_name(device),
        "decode_seconds": seconds,
        "sentences_per_second": len(test) / seconds if seconds > 0 else None,
    }
    json_path = args.json if args.json is not None else args.dir / "metrics.json"
    _write_json(json_path, report)
    print(f"metrics written to {json_path}")
    results_path = args.dir / "results.json"
    if results_path.is_file():  # a run trained by this version: keep its test scores with it
        try:
            results = json.loads(results_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            results = None
        if isinstance(results, dict):
            summary = {k: report[k] for k in ("test", "epoch", "beam_size", "length_penalty", "overall",
                                              "decode_seconds", "sentences_per_second")}
            same = (summary["test"], summary["beam_size"], summary["length_penalty"])
            kept = [e for e in results.get("evaluations", [])
                    if isinstance(e, dict) and (e.get("test"), e.get("beam_size"), e.get("length_penalty")) != same]
            results["evaluations"] = kept + [summary]
            _write_json(results_path, results)
            print(f"test metrics added to {results_path}")
    if args.predictions is not None:
        lines = ["\t".join(row) + "\n" for row in zip(result["sources"], result["references"], result["hypotheses"])]
        args.predictions.write_text("".join(lines), encoding="utf-8")
        print(f"predictions written to {args.predictions}")
    return 0


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return text or type(err).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status instead of exiting.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments without the program name; default ``sys.argv[1:]``.

    Returns
    -------
    int
        0 on success; 2 for a usage error, a missing or malformed file or an
        unreadable checkpoint (with one line ``attncourse: error: ...`` on
        stderr); 130 if interrupted with Ctrl-C.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(None if argv is None else list(argv))
        if args.command == "train":
            _check_train_args(args)
    except SystemExit as done:  # --help, --version and usage errors
        return done.code if isinstance(done.code, int) else (0 if done.code is None else EXIT_USAGE)
    except _UsageError as err:
        print(f"attncourse: error: {err} (see 'attncourse {args.command} --help')", file=sys.stderr)
        return EXIT_USAGE
    try:
        return run_train(args) if args.command == "train" else run_evaluate(args)
    except (ValueError, OSError) as err:
        print(f"attncourse: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        hint = f"; continue with --resume (checkpoint in {args.out})" if args.command == "train" else ""
        print(f"attncourse: interrupted{hint}", file=sys.stderr)
        return EXIT_INTERRUPTED
