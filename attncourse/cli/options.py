"""The options of ``python -m attncourse``: the argument parser, and every check made before any work.

:func:`build_parser` reads the command line; :func:`check_train_args` and
:func:`check_evaluate_args` then check what argparse cannot see alone (options
that do not go together, files to read, places to write) and fill in the
defaults that depend on the model. Every problem is a :class:`UsageError`,
printed by :func:`attncourse.cli.commands.main` as one line naming the option,
exit status 2.
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import Field, fields
from pathlib import Path
from typing import Any, NoReturn

import attncourse
from attncourse.cli.gpu_report import add_gpu_report_command
from attncourse.cli.limits import check_limits, document_limits, training_memory_problem
from attncourse.cli.lm import add_lm_commands
from attncourse.cli.outputs import (
    is_stdout,
    json_written_by,
    output_problem,
    replaces_foreign,
)
from attncourse.cli.rundir import (
    foreign_files,
    read_config,
    run_command,
    unstarted_run,
)
from attncourse.data.pairs import LEVELS
from attncourse.recipes.experiment import PRESETS, TASKS, Experiment, transformer_preset
from attncourse.runtime import pick_device
from attncourse.train.checkpoint import temporaries
from attncourse.train.config import FitConfig, settings
from attncourse.train.distributed import env_world_size
from attncourse.train.fit import BEST_NAME, CHECKPOINT_NAME

#: --model choices: (Experiment.model, Experiment.attention)
MODELS = {"rnn": ("rnn", None), "bahdanau": ("rnn", "bahdanau"), "transformer": ("transformer", None)}
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130

#: The settings that are ``train`` options, once each: Experiment's (task, model, recipe), then FitConfig's.
SETTINGS: tuple[Field, ...] = tuple(settings(Experiment, FitConfig))
_PRESET = [f for f in fields(Experiment) if f.metadata.get("preset") and f.metadata.get("group") != "data"]
_ENGINE_DEFAULTS = {f.name: f.default for f in fields(FitConfig)}
#: Options whose default depends on the model: argparse leaves them None and _resolve fills them in,
#: from the preset (Transformer) or from these RNN defaults (FitConfig's, and Experiment's for the model).
#: Keys are argparse dests = Experiment fields.
RNN_DEFAULTS: dict[str, Any] = {f.name: _ENGINE_DEFAULTS.get(f.name, f.default) for f in _PRESET
                                if f.metadata.get("only") != "transformer"}
#: Options of the Transformer only, and of the RNN only.
TRANSFORMER_OPTIONS = tuple(f.name for f in SETTINGS if f.metadata.get("only") == "transformer")
RNN_OPTIONS = tuple(f.name for f in SETTINGS if f.metadata.get("only") == "rnn")
#: What a preset sets besides the options above: the training recipe (but its constant --lr) and, for --task,
#: the split sizes.
PRESET_OPTIONS = tuple(f.name for f in _PRESET if f.metadata.get("only") != "rnn" and f.name != "lr")


class Parser(argparse.ArgumentParser):
    """argparse, but errors are one line (no usage block), in the same form as our own errors."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"attncourse: error: {message} (see '{self.prog} --help')\n")

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        # '--epochs=--': argparse drops the '--' and hands the option an empty list, unchecked
        if "--" in arg_strings and action.option_strings and action.nargs in (None, argparse.OPTIONAL):
            self.error(f"argument {'/'.join(action.option_strings)}: expected a value, got '--'")
        return super()._get_values(action, arg_strings)


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


#: Seeds go to torch (64-bit) and NumPy; fit adds the process's rank, so stay well inside 64 bits.
MAX_SEED = 2**63 - 1
#: --max-tokens defaults. Training keeps a whole batch's activations for backpropagation: memory grows
#: with batch size x length (x length again for attention); 256 tokens stays within a few GB for the
#: default models. Evaluation keeps no activations, its memory grows with the length alone.
TRAIN_MAX_TOKENS = 256
EVALUATE_MAX_TOKENS = 512
#: What a training run writes into --out, besides test.tsv; --overwrite removes them before it starts.
RUN_FILES = (CHECKPOINT_NAME, BEST_NAME, "config.json", "history.json", "results.json", "metrics.json")
#: What a training run may write into --out: its files and a generated task's test.tsv.
TRAIN_WRITES = RUN_FILES + ("test.tsv",)
#: A metrics file written by evaluate: a JSON object with these keys (replaced without --overwrite).
METRICS_WRITTEN = json_written_by(("checkpoint", "epoch", "test", "overall", "buckets"))


def _seed(text: str) -> int:
    value = _parse(text, int, "a whole number")
    if not 0 <= value <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"expected a seed from 0 to 2**63 - 1 ({MAX_SEED}), got {text}")
    return value


def _path(text: str) -> Path:
    if not text.strip():  # Path("") is the current directory
        raise argparse.ArgumentTypeError("expected a path, got an empty string")
    return Path(text)


def _device(text: str) -> str:
    try:
        pick_device(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


#: How the command line reads a setting's value (:func:`~attncourse.train.config.setting`'s ``check``).
CHECKS = {"positive_int": _positive_int, "nonnegative_int": _nonnegative_int, "positive_float": _positive_float,
          "nonnegative_float": _nonnegative_float, "probability": _probability, "below_one": _below_one,
          "dropout": _dropout, "seed": _seed, "device": _device, "path": _path}


def flag(dest: str) -> str:
    """The option that sets ``dest``: its setting's ``flag`` (``num_heads`` is ``--heads``), or ``--dest``."""
    spelled = {f.name: f.metadata["flag"] for f in SETTINGS if f.metadata["flag"]}
    return spelled.get(dest, "--" + dest.replace("_", "-"))


def add_settings(group: Any, name: str, of: tuple[Field, ...] = SETTINGS) -> None:
    """Add the settings ``of`` (default :data:`SETTINGS`) in ``--help`` section ``name`` to ``group`` as options.

    A setting the preset fills in (``preset``) defaults to None on the command
    line; a boolean is a ``--x/--no-x`` pair.
    """
    for f in of:
        meta = f.metadata
        if meta["group"] != name:
            continue
        default = None if meta["preset"] else f.default
        options: dict[str, Any] = {"dest": f.name, "default": default, "help": meta["help"]}
        if isinstance(f.default, bool):
            options["action"] = argparse.BooleanOptionalAction
        elif meta["choices"]:
            options["choices"] = meta["choices"]
        else:
            options.update(type=CHECKS[meta["check"]], metavar=meta["metavar"])
            if meta["nargs"]:
                options["nargs"] = meta["nargs"]
        group.add_argument(flag(f.name), **options)


def _add_length_options(group: Any, max_tokens: int | None, max_tokens_help: str) -> None:
    """--max-tokens and --too-long; ``max_tokens`` None: filled in later (train: for TSV files only)."""
    group.add_argument("--max-tokens", type=_positive_int, default=max_tokens, metavar="N", help=max_tokens_help)
    group.add_argument("--too-long", choices=("error", "skip"), default=None if max_tokens is None else "error",
                       help="what a pair above the limit does: 'error' stops with its line number (default), "
                            "'skip' leaves it out and prints how many were left out")


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
    """The ``attncourse`` argument parser, with ``train``, ``evaluate``, ``train-lm`` and ``sample`` sub-commands."""
    parser = Parser(
        prog="attncourse",
        description="Train and evaluate the course's models: RNNs (with or without Bahdanau "
                    "attention), the Transformer, and the decoder-only language model (train-lm, sample).",
        epilog="Instructors: 'attncourse student-edition OUT' writes the chapters' student editions "
               "(see 'attncourse student-edition --help').",
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
    data.add_argument("--train", metavar="FILE.tsv", type=_path,
                      help="training pairs, one 'source<TAB>target' per line (UTF-8)")
    data.add_argument("--valid", metavar="FILE.tsv", type=_path,
                      help="validation pairs in the same format (required with --train)")
    data.add_argument("--level", choices=LEVELS,
                      help="tokens of the TSV files: 'word' (split on spaces, the default) or 'char' "
                           "(every character); generated tasks set it themselves")
    _add_length_options(data, None, f"TSV files: a pair whose source or target has more than N tokens is not "
                                    f"loaded (default {TRAIN_MAX_TOKENS}; a Transformer takes at most 511): training "
                                    "memory grows with the batch size times the length, and the length again for "
                                    "attention")
    add_settings(data, "data")
    data.add_argument("--max-value", type=_positive_int, metavar="N",
                      help="numbers tasks: numbers are drawn below N (default 10**9, up to nine digits)")

    model = train.add_argument_group("model")
    model.add_argument("--model", choices=tuple(MODELS), default="bahdanau",
                       help="'rnn': encoder-decoder whose decoder sees only the encoder's final state; "
                            "'bahdanau': with additive attention (default); 'transformer': Vaswani et al. (2017)")
    model.add_argument("--preset", choices=PRESETS,
                       help="transformer only: 'cpu' (small, the default) or 'gpu' (the base model); "
                            "it sets every model and training option you do not give (see below)")
    add_settings(model, "model")

    run = train.add_argument_group("training")
    run.add_argument("--out", type=_path, required=True, metavar="DIR",
                     help="directory for checkpoint.pt, best.pt, config.json, history.json, results.json "
                          "(and test.tsv); it must be new or empty, unless --resume or --overwrite")
    run.add_argument("--overwrite", action="store_true",
                     help="train into --out even though it holds other files or an earlier run: the files the "
                          "earlier run wrote (listed in its config.json) are deleted, other files are kept and "
                          "never replaced (a test.tsv of yours stops the run instead)")
    add_settings(run, "training")
    run.add_argument("--no-clip", action="store_true", help="do not clip the gradient")
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
    ev.add_argument("dir", type=_path, metavar="DIR", help="a directory written by 'attncourse train'")
    ev.add_argument("--test", type=_path, required=True, metavar="FILE.tsv",
                    help="test pairs, one 'source<TAB>target' per line (UTF-8)")
    _add_length_options(ev, EVALUATE_MAX_TOKENS, f"a pair whose source or target has more than N tokens is not "
                                                 f"loaded (default {EVALUATE_MAX_TOKENS}); a Transformer's sources "
                                                 "are limited to its positions (511 tokens) too; outputs are cut at "
                                                 "the model's positions and scored as they are")
    ev.add_argument("--beam-size", type=_positive_int, default=1, metavar="K",
                    help="1: greedy decoding (default); K > 1: beam search keeping K hypotheses")
    ev.add_argument("--length-penalty", type=_nonnegative_float, default=0.6, metavar="A",
                    help="alpha of the beam search's length penalty ((5 + |y|) / 6)^alpha (default 0.6)")
    ev.add_argument("--json", type=_path, metavar="OUT",
                    help="where to write the metrics as JSON (default DIR/metrics.json; '-': print them)")
    ev.add_argument("--predictions", type=_path, metavar="OUT.tsv",
                    help="also write 'source<TAB>reference<TAB>hypothesis' lines to this file ('-': print them)")
    ev.add_argument("--overwrite", action="store_true",
                    help="replace an existing --json or --predictions file that evaluate did not write (the "
                         "run's own files and the inputs are never replaced)")
    ev.add_argument("--edges", type=_positive_int, nargs="+", metavar="L",
                    help="left edges of the source-length buckets in tokens, e.g. '1 4 8 12' "
                         "(default: five equal-width buckets)")
    ev.add_argument("--level", choices=LEVELS,
                    help="tokens of the test file (default: the level the model was trained on)")
    ev.add_argument("--batch-size", type=_positive_int, default=256, metavar="B",
                    help="sentences decoded at once (default 256)")
    ev.add_argument("--device", type=_device, metavar="DEV",
                    help="'cpu', 'cuda', 'mps'; default: CUDA, then MPS, then the CPU")
    ev.add_argument("--threads", type=_positive_int, default=1, metavar="N",
                    help="CPU threads for torch (default 1)")
    add_lm_commands(commands, _path, _positive_int, _positive_float, _seed, _device)
    add_gpu_report_command(commands, _path, _positive_float)
    document_limits(parser)
    return parser


class UsageError(Exception):
    """A combination of options that argparse cannot check by itself."""


def check_train_args(args: argparse.Namespace) -> None:
    """Raise UsageError for options that do not go together or files that cannot be read; fill in defaults.

    The run directory is checked later, by :func:`out_dir_problem`, on one process only.
    """
    if args.resume and args.overwrite:
        raise UsageError("give --resume (continue the run in --out) or --overwrite (start it again), not both")
    check_writable(args.out, "--out", directory=True)
    if args.task is None:
        if args.train is None or args.valid is None:
            raise UsageError("give --task, or both --train and --valid")
        check_readable(args.train, "--train")
        check_readable(args.valid, "--valid")
        args.max_tokens = TRAIN_MAX_TOKENS if args.max_tokens is None else args.max_tokens
        args.too_long = args.too_long or "error"
        for name in ("n_train", "n_valid", "n_test", "max_value"):
            if getattr(args, name) is not None:
                raise UsageError(f"--{name.replace('_', '-')} applies to generated tasks (--task) only")
    else:
        if args.train is not None or args.valid is not None:
            raise UsageError("give either --task or --train/--valid, not both")
        if args.level is not None:
            raise UsageError("--level applies to TSV files; a generated task has its own level")
        for name in ("max_tokens", "too_long"):
            if getattr(args, name) is not None:
                raise UsageError(f"--{name.replace('_', '-')} applies to TSV files; a generated task's pairs are short")
        if args.task == "dates" and args.max_value is not None:
            raise UsageError("--max-value applies to the numbers tasks only")
    _resolve(args)


def _resolve(args: argparse.Namespace) -> None:
    """Fill in the options left unset, from the preset or the RNN defaults; raise UsageError for bad combinations.

    Afterwards ``args`` holds every Experiment-like setting, ``args.kind`` ("rnn" or "transformer")
    and ``args.preset`` (None for RNNs).
    """
    kind, args.attention = MODELS[args.model]
    args.kind = kind
    if args.no_clip and args.clip_norm is not None:
        raise UsageError("give --clip-norm or --no-clip, not both")
    if kind == "rnn":
        if args.preset is not None:
            raise UsageError("--preset applies to --model transformer only")
        for dest in TRANSFORMER_OPTIONS:
            if getattr(args, dest) is not None:
                raise UsageError(f"{flag(dest)} applies to --model transformer only")
        defaults = dict(RNN_DEFAULTS)
    else:
        for dest in RNN_OPTIONS:
            if getattr(args, dest) is not None:
                raise UsageError(f"{flag(dest)} applies to --model rnn and bahdanau only")
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
        raise UsageError("--lr sets a constant rate; with --schedule noam the rate follows eq. (3): "
                          "scale it with --lr-scale")
    if args.schedule is None:
        for dest in ("warmup", "lr_scale"):
            if dest in explicit:
                raise UsageError(f"{flag(dest)} applies to --schedule noam only")
    if kind == "transformer" and args.d_model % args.num_heads != 0:
        raise UsageError(f"--d-model {args.d_model} is not divisible by --heads {args.num_heads}")
    if env_world_size() > 1 and args.teacher_forcing < 1.0:
        raise UsageError("--teacher-forcing below 1 cannot run on several processes (torchrun)")
    problem = check_limits(args, flag) or training_memory_problem(args)
    if problem:
        raise UsageError(problem)



def check_readable(path: Path, option: str) -> None:
    """Raise UsageError unless ``path`` is a file this process can read."""
    if path.is_dir():
        raise UsageError(f"{option} {str(path)!r} is a directory, not a TSV file")
    if not path.is_file():
        raise UsageError(f"{option} {str(path)!r}: no such file")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{option} {str(path)!r}: not readable (permission denied)")


def check_writable(path: Path, option: str, directory: bool = False) -> None:
    """Raise UsageError unless ``path`` can be written: a file (or, with ``directory``, a directory to create or fill).

    Checked before any work, so that hours of decoding or training do not end
    in an unwritable path. The parent of a file must exist; a directory is
    created with its parents, so its nearest existing ancestor must be writable.
    """
    if directory:
        if path.exists() and not path.is_dir():
            raise UsageError(f"{option} {str(path)!r} exists and is not a directory")
        existing = next((p for p in (path, *path.parents) if p.exists()), Path.cwd())
        if not existing.is_dir():
            raise UsageError(f"{option} {str(path)!r}: {str(existing)!r} is not a directory")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise UsageError(f"{option} {str(path)!r}: cannot write in {str(existing)!r} (permission denied)")
        return
    if path.is_dir():
        raise UsageError(f"{option} {str(path)!r} is a directory; give a file name")
    parent = path.parent
    if not parent.is_dir():
        raise UsageError(f"{option} {str(path)!r}: no directory {str(parent)!r} to write it in")
    # the file is replaced by a rename: the directory must be writable, and an existing file too
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"{option} {str(path)!r}: not writable (permission denied)")


def check_evaluate_args(args: argparse.Namespace) -> None:
    """Raise UsageError for an ``evaluate`` command that would fail after decoding; fill in ``args.json``.

    The run directory must exist, the test file be readable, and every file
    written at the end (the metrics, the predictions, ``DIR/results.json``)
    writable, so that nothing is written unless everything can be.
    """
    if not args.dir.is_dir():
        raise UsageError(f"DIR {str(args.dir)!r}: no such directory (a run written by 'attncourse train', "
                         f"holding {BEST_NAME})")
    check_readable(args.test, "--test")
    problem = check_limits(args, flag)
    if problem:
        raise UsageError(problem)
    default_json = args.json is None
    args.json = args.dir / "metrics.json" if default_json else args.json
    inputs = (args.test, args.dir / BEST_NAME)
    args.replaced = []  # existing files of other origins that --overwrite lets this command replace
    for option, path, ours, run_outputs in (
            ("DIR" if default_json else "--json", args.json, METRICS_WRITTEN, ("metrics.json",)),
            ("--predictions", args.predictions, None, ())):
        if path is None:
            continue
        problem = output_problem(path, option, inputs=inputs, run_dir=args.dir, run_outputs=run_outputs,
                                 ours=ours, overwrite=args.overwrite)
        if problem:
            raise UsageError(problem)
        if not is_stdout(path) and not path.is_char_device():
            check_writable(path, option)
        if replaces_foreign(path, ours):
            args.replaced.append(path)
    if args.predictions is not None and (
            (is_stdout(args.predictions) and is_stdout(args.json))
            or args.predictions.resolve() == args.json.resolve()):
        raise UsageError(f"--predictions and the metrics (--json) would both be written to {str(args.json)!r}")
    results = args.dir / "results.json"
    if results.is_file():
        check_writable(results, "DIR")


def out_dir_problem(out: Path, resume: bool, overwrite: bool, writes: tuple[str, ...] = TRAIN_WRITES,
                    command: str = "train") -> str | None:
    """Why ``command`` must not write into ``out``, or None: no file is replaced that a run did not write.

    Without ``--resume`` or ``--overwrite``, ``out`` must be new or empty (the
    temporary files a killed write left there do not count, nor the files of a
    run killed before its first checkpoint). With ``--resume`` it must hold a
    ``command`` run's ``checkpoint.pt``, or a run killed before it wrote one
    (which then starts from the beginning). With ``--overwrite``, none of the
    files the run writes (``writes``) may be there unless a run wrote it
    (:mod:`attncourse.cli.rundir`).
    """
    if out.exists() and not out.is_dir():
        return f"--out {str(out)!r} exists and is not a directory"
    # a link or a special file under a name the run writes would be replaced by the atomic rename
    special = [n for n in sorted(set(writes) | {"config.json"}) if os.path.lexists(out / n)
               and not ((out / n).is_file() and not (out / n).is_symlink())]
    if special:
        return (f"--out {str(out)!r} holds {', '.join(special)} that is a link or not a regular file; a run "
                "replaces only regular files it wrote: move it away or choose another --out")
    leftovers = set(temporaries(out, tuple(writes) + RUN_FILES))
    if resume:
        other = run_command(read_config(out))
        if other is not None and other != command:
            return (f"--resume: {str(out)!r} holds a '{other}' run, not a '{command}' run; "
                    "choose another --out")
        if not (out / CHECKPOINT_NAME).is_file() and not unstarted_run(out, leftovers):
            return f"--resume: no {CHECKPOINT_NAME} in {str(out)!r} to continue from"
        return None
    if not out.is_dir():
        return None
    foreign = foreign_files(out, writes)
    if overwrite:
        if foreign:
            return (f"--overwrite replaces only the files an earlier run wrote (listed in its config.json), and "
                    f"{str(out)!r} holds {', '.join(foreign)} that no run wrote; move it away or choose "
                    "another --out")
        return None
    if unstarted_run(out, leftovers):
        return None
    names = sorted(p.name for p in out.iterdir() if p not in leftovers)
    if not names:
        return None
    listed = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    if CHECKPOINT_NAME in names:
        return (f"--out {str(out)!r} already holds a run ({CHECKPOINT_NAME}); pass --resume to continue it, "
                "--overwrite to start it again, or choose another --out")
    if any(name in RUN_FILES for name in names):
        return (f"--out {str(out)!r} holds files of an earlier run but no {CHECKPOINT_NAME} to resume from "
                f"({listed}); pass --overwrite to replace that run, or choose another --out")
    return (f"--out {str(out)!r} is not empty and holds no attncourse run ({listed}); pass --overwrite to "
            "write the run into it anyway (files of other names are kept), or choose another --out")


def length_hint(max_tokens: int, model_limit: int | None, sources_only: bool = False) -> tuple[int, str]:
    """The limit a side is held to, and the advice a pair above it gets.

    Parameters
    ----------
    max_tokens : int
        ``--max-tokens``.
    model_limit : int or None
        Most tokens the model takes (a Transformer: its positions less one for
        ``<bos>``/``<eos>``); None for the RNNs.
    sources_only : bool
        The model's limit holds for sources only (evaluation: targets are
        only scored, never fed to the model).

    Returns
    -------
    limit : int
        The smaller of the two, for the sides the model's limit holds for.
    hint : str
        Where the limit comes from and what to do about a pair above it.
    """
    skip = "pass --too-long skip to leave such pairs out"
    if model_limit is None or model_limit >= max_tokens:
        return max_tokens, f"the limit is --max-tokens {max_tokens}: raise it, or {skip}"
    sides = "sources" if sources_only else "sources and targets"
    return model_limit, (f"limits: {model_limit} tokens for {sides} (the model has {model_limit + 1} positions, "
                         f"one of them for <bos> or <eos>), --max-tokens {max_tokens} for any side; {skip}")
