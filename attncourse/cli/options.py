"""The options of ``python -m attncourse``: the parser, and every check made before any work.

:func:`build_parser` reads the command line; :func:`validate_train_args` and
:func:`validate_evaluate_args` check what argparse cannot (options that conflict, files
to read, places to write) and fill the model's defaults. A problem is a
:class:`UsageError`: one line naming the option, exit status 2.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import Field, fields
from pathlib import Path
from typing import Any

import attncourse
from attncourse.cli.limits import training_memory_problem, validate_limits
from attncourse.cli.option_fields import COMMANDS, MODELS, TRAIN_MAX_TOKENS
from attncourse.cli.outputs import (
    is_stdout,
    json_written_by,
    output_problem,
    replaces_foreign,
)
from attncourse.cli.parsing import (  # noqa: F401 (read from here too)
    CHECKS,
    EXIT_USAGE,
    Parser,
    add_fields,
)
from attncourse.cli.rundir import (
    foreign_files,
    read_config,
    run_command,
    unstarted_run,
)
from attncourse.recipes.experiment import Experiment, transformer_preset
from attncourse.train.checkpoint import temporaries
from attncourse.train.config import FitConfig, settings
from attncourse.train.distributed import env_world_size
from attncourse.train.fit import BEST_NAME, CHECKPOINT_NAME
from attncourse.train.runfiles import (
    MANIFEST_NAME,
    MANIFEST_TEMPORARY_PREFIX,
    read_manifest,
)

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


#: What a training run writes into --out, besides test.tsv; --overwrite removes them before it starts.
RUN_FILES = (CHECKPOINT_NAME, BEST_NAME, "config.json", "history.json", "results.json", "metrics.json")
#: What a training run may write into --out: its files and a generated task's test.tsv.
TRAIN_WRITES = RUN_FILES + ("test.tsv",)
#: A metrics file written by evaluate: a JSON object with these keys (replaced without --overwrite).
METRICS_WRITTEN = json_written_by(("checkpoint", "epoch", "test", "overall", "buckets"))


def flag(dest: str) -> str:
    """The option that sets ``dest``: its setting's ``flag`` (``num_heads`` is ``--heads``), or ``--dest``."""
    spelled = {f.name: f.metadata["flag"] for f in SETTINGS if f.metadata["flag"]}
    return spelled.get(dest, "--" + dest.replace("_", "-"))


def add_settings(group: Any, name: str, of: tuple[Field, ...] = SETTINGS) -> None:
    """Add the settings ``of`` (default :data:`SETTINGS`) in ``--help`` section ``name`` to ``group`` as options.

    A setting the preset fills in (``preset``) defaults to None on the command
    line; a boolean is a ``--x/--no-x`` pair (:func:`~attncourse.cli.parsing.add_fields`).
    """
    add_fields(group, [f for f in of if f.metadata["group"] == name])


def build_parser() -> argparse.ArgumentParser:
    """The ``attncourse`` argument parser: every sub-command of :data:`~attncourse.cli.option_fields.COMMANDS`.

    Each sub-command's options are generated from its classes' setting fields
    (:func:`~attncourse.cli.parsing.add_fields`), in ``--help`` sections where it has them.
    """
    parser = Parser(
        prog="attncourse",
        description="Train and evaluate the course's models: RNNs (with or without Bahdanau "
                    "attention), the Transformer, the decoder-only language model (train-lm, sample), "
                    "and generate with a pretrained model (generate).",
        epilog="Instructors: 'attncourse student-edition OUT' writes the chapters' student editions "
               "(see 'attncourse student-edition --help'); 'attncourse prepare [CHAPTER...]' trains the "
               "chapters' cached models once, before grading; 'attncourse grade SUBMISSIONS' grades "
               "collected submissions outside the students' kernels (see 'attncourse grade --help').",
    )
    parser.add_argument("--version", action="version", version=f"attncourse {attncourse.__version__}",
                        help="print the version and exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, command in COMMANDS.items():
        sub = commands.add_parser(name, help=command.help, description=command.description, epilog=command.epilog,
                                  formatter_class=argparse.RawDescriptionHelpFormatter if command.epilog
                                  else argparse.HelpFormatter)
        sections = {section: sub.add_argument_group(section) for section in command.sections}
        add_fields(sub, command.fields(), sections)
    return parser


class UsageError(Exception):
    """A combination of options that argparse cannot check by itself."""


def validate_train_args(args: argparse.Namespace) -> None:
    """Raise UsageError for options that do not go together or files that cannot be read; fill in defaults.

    The run directory is checked later, by :func:`out_dir_problem`, on one process only.
    """
    if args.resume and args.overwrite:
        raise UsageError("give --resume (continue the run in --out) or --overwrite (start it again), not both")
    # before validate_writable: the folder itself is wrong, writable or not
    if shared_folder(args.out):
        raise UsageError(out_dir_problem(args.out, False, False))
    validate_writable(args.out, "--out", directory=True)
    if args.task is None:
        if args.train is None or args.valid is None:
            raise UsageError("give --task, or both --train and --valid")
        validate_readable(args.train, "--train")
        validate_readable(args.valid, "--valid")
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
    problem = validate_limits(args, flag) or training_memory_problem(args)
    if problem:
        raise UsageError(problem)



def validate_readable(path: Path, option: str) -> None:
    """Raise UsageError unless ``path`` is a file this process can read."""
    if path.is_dir():
        raise UsageError(f"{option} {str(path)!r} is a directory, not a TSV file")
    if path.exists() and not path.is_file():
        raise UsageError(special_file(path, option))
    if not path.is_file():
        raise UsageError(f"{option} {str(path)!r}: no such file")
    if not os.access(path, os.R_OK):
        raise UsageError(f"{option} {str(path)!r}: not readable (permission denied)")


def special_file(path: Path, option: str) -> str:
    """The line refusing input ``path`` that exists but is no regular file (a FIFO would block, a
    device read forever)."""
    return (f"{option} {str(path)!r} is not a regular file (a FIFO, a device or a socket); "
            "give a file")


def validate_writable(path: Path, option: str, directory: bool = False) -> None:
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


def validate_evaluate_args(args: argparse.Namespace) -> None:
    """Raise UsageError for an ``evaluate`` command that would fail after decoding; fill in ``args.json``.

    The run directory must exist, the test file be readable, and every file
    written at the end (the metrics, the predictions, ``DIR/results.json``)
    writable, so that nothing is written unless everything can be.
    """
    if not args.dir.is_dir():
        raise UsageError(f"DIR {str(args.dir)!r}: no such directory (a run written by 'attncourse train', "
                         f"holding {BEST_NAME})")
    validate_readable(args.test, "--test")
    problem = validate_limits(args, flag)
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
            validate_writable(path, option)
        if replaces_foreign(path, ours):
            args.replaced.append(path)
    if args.predictions is not None and (
            (is_stdout(args.predictions) and is_stdout(args.json))
            or args.predictions.resolve() == args.json.resolve()):
        raise UsageError(f"--predictions and the metrics (--json) would both be written to {str(args.json)!r}")
    results = args.dir / "results.json"
    if results.is_file():
        validate_writable(results, "DIR")


def shared_folder(out: Path) -> str | None:
    """What ``out`` is if no run may own it (a filesystem root, the home folder), or None."""
    try:
        where = out.resolve()
        home = Path.home().resolve()
    # no home (HOME unset and no passwd entry), or a link loop
    except (OSError, RuntimeError, KeyError):
        return None
    if where == Path(where.anchor):
        return "a filesystem root"
    if where == home:
        return "your home folder"
    return None


def out_dir_problem(out: Path, resume: bool, overwrite: bool, writes: tuple[str, ...] = TRAIN_WRITES,
                    command: str = "train") -> str | None:
    """Why ``command`` must not write into ``out``, or None.

    Without ``--resume`` or ``--overwrite`` ``out`` must be new or empty (a killed write's
    temporary files aside); with ``--resume`` it must hold a ``command`` run's
    ``checkpoint.pt`` (or a run killed before one); with ``--overwrite`` none of ``writes`` may
    be there unless a run wrote it (:mod:`attncourse.cli.rundir`).
    """
    if out.exists() and not out.is_dir():
        return f"--out {str(out)!r} exists and is not a directory"
    shared = shared_folder(out)
    if shared:
        return (f"--out {str(out)!r} is {shared}, not a run folder: a run needs "
                "a folder of its own; "
                "choose another --out")
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
        more = len(foreign) - 5
        shown = ", ".join(foreign[:5]) + (f" and {more} more" if more > 0 else "")
        # a run of an earlier attncourse, or no run: nothing can be shown to be ours
        if foreign and read_manifest(out) is None:
            return (f"--overwrite: {str(out)!r} has no {MANIFEST_NAME} recording the "
                    "files attncourse wrote (a run of an earlier version, or not a run), "
                    f"so none of its files ({shown}) is "
                    "deleted; empty the folder yourself, or choose another --out")
        if foreign:
            return ("--overwrite replaces only the files an earlier run wrote (recorded "
                    f"with their digests in {MANIFEST_NAME}), and {str(out)!r} holds "
                    f"{shown} that no run wrote or that changed "
                    "since; move it away or choose another --out")
        return None
    if unstarted_run(out, leftovers):
        return None
    # the manifest, and its temporary file while another run is writing it (a race)
    names = sorted(p.name for p in out.iterdir() if p not in leftovers and p.name != MANIFEST_NAME
                   and not p.name.startswith(MANIFEST_TEMPORARY_PREFIX))
    if not names:
        return None
    listed = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    if CHECKPOINT_NAME in names:
        return (f"--out {str(out)!r} already holds a run ({CHECKPOINT_NAME}); pass --resume to continue it, "
                "--overwrite to start it again, or choose another --out")
    if any(name in RUN_FILES for name in names):
        return (f"--out {str(out)!r} holds files of an earlier run but no {CHECKPOINT_NAME} to resume from "
                f"({listed}); pass --overwrite to replace that run, or choose another --out")
    return (f"--out {str(out)!r} is not empty and holds no attncourse run ({listed}); "
            "a run needs a folder "
            "of its own: choose a new or empty --out")


def length_hint(max_tokens: int, model_limit: int | None, sources_only: bool = False) -> tuple[int, str]:
    """``(limit, hint)``: the smaller of ``max_tokens`` and ``model_limit`` (a Transformer's
    positions less one; None for RNNs; for sources only when ``sources_only``), and where the
    limit comes from and what to do about a longer pair.
    """
    skip = "pass --too-long skip to leave such pairs out"
    if model_limit is None or model_limit >= max_tokens:
        return max_tokens, f"the limit is --max-tokens {max_tokens}: raise it, or {skip}"
    sides = "sources" if sources_only else "sources and targets"
    return model_limit, (f"limits: {model_limit} tokens for {sides} (the model has {model_limit + 1} positions, "
                         f"one of them for <bos> or <eos>), --max-tokens {max_tokens} for any side; {skip}")
