"""Command line: ``python -m attncourse train ...`` and ``python -m attncourse evaluate ...``.

Train an encoder-decoder (an RNN, with or without Bahdanau attention, or a
Transformer) on a generated task or on your own TSV files, then score the best
weights on a test file::

    python -m attncourse train --task numbers-en-fr --model bahdanau --out runs/fr --epochs 10
    python -m attncourse train --task dates --model transformer --preset cpu --out runs/dates-tf
    python -m attncourse evaluate runs/fr --test runs/fr/test.tsv --beam-size 4

The decoder-only language model of chapter 7 has its own two sub-commands,
``train-lm`` (on any UTF-8 text file) and ``sample`` (:mod:`attncourse.cli.lm`)::

    python -m attncourse train-lm --text corpus.txt --out runs/lm --steps 2000
    python -m attncourse sample runs/lm --prompt "The attention" --length 200 --top-k 10

and the pretrained model of chapter 11 generates with ``generate`` (:mod:`attncourse.cli.generate`)::

    python -m attncourse generate --chat "What is the capital of France?"

Every command's options are the fields of dataclasses (:mod:`attncourse.cli.option_fields`).

Several GPUs (or CPU processes) train one model together under ``torchrun``::

    torchrun --nproc_per_node 4 -m attncourse train --task numbers-en-fr --model transformer \
        --preset gpu --out runs/base

A training run writes into ``--out``: ``checkpoint.pt`` (resume with ``--resume``),
``best.pt`` (the best epoch's weights and vocabularies), ``config.json``,
``history.json`` (updated every epoch), ``results.json`` (what ran where, how
fast, and the learning curves of every segment of training, resumed or not) and,
for a generated task, ``test.tsv``; each is recorded with its SHA-256 in the
folder's ``.attncourse-run.json``. ``--out`` must be new or empty; ``--overwrite``
replaces an earlier run, but only if every file in the folder is one the manifest
shows the tool wrote (:mod:`attncourse.cli.rundir`), and never a filesystem root
or the home folder; a run
locks ``--out`` while it writes there, so a second run into it stops with one line;
every numeric option has a ceiling (:mod:`attncourse.cli.limits`), and the memory
of the weights, logits and activations is checked before training.
``evaluate`` prints a table of metrics overall and by source length, writes
them to ``metrics.json`` and adds them to ``results.json``; ``--json`` and
``--predictions`` never replace an input, a file of the run, a link or a special
file, nor (without ``--overwrite``) a file evaluate did not write; ``-`` prints
them (:mod:`attncourse.cli.outputs`).

Lengths are limited, and the limits are stated: a TSV pair with a side longer
than ``--max-tokens`` tokens (or than a Transformer's 512 positions take) stops
the command with its line number, or is left out with ``--too-long skip``, so
memory stays bounded whatever the file holds. Decoding stops at the model's
positions; an output cut there is scored as it is.

Any user error (a bad option, a missing file, a malformed TSV line, an
unreadable checkpoint) ends with one line ``attncourse: error: ...`` on stderr
and exit status 2, never a traceback.

This module parses and checks every command, runs it and turns its errors and Ctrl-C
into that line; ``train`` and ``evaluate`` themselves are in
:mod:`attncourse.cli.train_evaluate`, which reads their TSV files with
:mod:`attncourse.cli.tsv`.
"""


from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from attncourse.cli.generate import run_generate, validate_generate_args
from attncourse.cli.gpu_report import run_gpu_report, validate_gpu_report_args
from attncourse.cli.limits import validate_limits
from attncourse.cli.lm import run_sample, run_train_lm, validate_lm_args
from attncourse.cli.options import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    UsageError,
    build_parser,
    out_dir_problem,
    validate_evaluate_args,
    validate_train_args,
)
from attncourse.cli.outputs import RunLocked, os_reason
from attncourse.cli.train_evaluate import run_evaluate, run_train
from attncourse.runtime import UnpreparedRun
from attncourse.train.fit import CHECKPOINT_NAME


def _validate_gpu_report(args: argparse.Namespace) -> None:
    problem = validate_limits(args)
    if problem:
        raise UsageError(problem)
    validate_gpu_report_args(args, UsageError)


def _validate_lm(args: argparse.Namespace) -> None:
    validate_lm_args(args, UsageError, out_dir_problem)


#: The training command line's one table: a command's name, how its arguments are checked
#: (raising :class:`UsageError`) and what runs it (returning the exit status). The course's
#: commands (``grade``, ``prepare``, ``student-edition``) sit a layer above, in ``__main__``.
COMMANDS: dict[str, tuple[Any, Any]] = {
    "train": (validate_train_args, run_train),
    "evaluate": (validate_evaluate_args, run_evaluate),
    "train-lm": (_validate_lm, run_train_lm),
    "sample": (_validate_lm, run_sample),
    "gpu-report": (_validate_gpu_report, run_gpu_report),
    "generate": (lambda args: validate_generate_args(args, UsageError), run_generate),
}


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
        0 on success; 2 for a usage error, a missing or malformed file, an
        unreadable checkpoint or a run directory that would be overwritten
        (with one line ``attncourse: error: ...`` on stderr); 130 if
        interrupted with Ctrl-C.
    """
    parser = build_parser()
    # the real command line (argv None) ends with the command: a Ctrl-C in Python's shutdown is ignored
    with interrupt_handling(ending=argv is None):
        return _main(parser, argv)


def _main(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> int:
    args = None
    try:
        args = parser.parse_args(None if argv is None else list(argv))
        COMMANDS[args.command][0](args)
    except SystemExit as done:  # --help, --version and usage errors
        return done.code if isinstance(done.code, int) else (0 if done.code is None else EXIT_USAGE)
    except UsageError as err:
        print(f"attncourse: error: {err} (see 'attncourse {args.command} --help')", file=sys.stderr)
        return EXIT_USAGE
    except OSError as err:  # a path that cannot even be looked at: permission, a name too long
        print(f"attncourse: error: {os_reason(err)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("attncourse: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    try:
        return COMMANDS[args.command][1](args)
    except OSError as err:
        if isinstance(err, RunLocked) or err.filename is None:
            reason = " ".join((err.strerror or "").split()) if err.strerror and err.errno else _one_line(err)
        else:
            reason = os_reason(err)
        print(f"attncourse: error: {reason}", file=sys.stderr)
        return EXIT_USAGE
    except (ValueError, FloatingPointError) as err:
        print(f"attncourse: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_USAGE
    except MemoryError as err:
        reason = _one_line(err) if str(err) else "the machine ran out of memory"
        print(f"attncourse: error: {reason}; give smaller sizes", file=sys.stderr)
        return EXIT_USAGE
    except UnpreparedRun as err:  # ATTNCOURSE_NO_TRAINING=1 (set for grading) and a run to train
        print(f"attncourse: error: {_one_line(err)}", file=sys.stderr)
        return EXIT_USAGE
    except RuntimeError as err:  # an allocation that failed anyway (torch raises RuntimeError, not MemoryError)
        if interrupted(err):  # a Ctrl-C that torch's C++ code wrapped in its own error
            print(f"attncourse: interrupted{_resume_hint(args)}", file=sys.stderr)
            return EXIT_INTERRUPTED
        if not allocation_failed(err):
            raise
        print(f"attncourse: error: the machine ran out of memory ({_one_line(err)[:200]}); give smaller sizes",
              file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"attncourse: interrupted{_resume_hint(args)}", file=sys.stderr)
        return EXIT_INTERRUPTED


def interrupted(err: BaseException) -> bool:
    """True if ``err`` was caused by a KeyboardInterrupt (its chain of causes and contexts)."""
    seen = set()
    while err is not None and id(err) not in seen:
        if isinstance(err, KeyboardInterrupt):
            return True
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return False


def allocation_failed(err: BaseException) -> bool:
    """True if ``err`` is torch's way of saying that memory ran out (CPU or GPU)."""
    if isinstance(err, getattr(torch, "OutOfMemoryError", ())):
        return True
    text = str(err)
    return any(words in text for words in ("can't allocate memory", "out of memory", "Out of memory",
                                             "not enough memory", "std::bad_alloc"))


@contextmanager
def interrupt_handling(ending: bool = False) -> Iterator[None]:
    """Ctrl-C raises KeyboardInterrupt once (the command cleans up and exits 130); a second Ctrl-C
    while it cleans up exits 130 at once, instead of killing Python by the signal (status -2).

    Afterwards SIGINT is ignored if a Ctrl-C came or the process ends with the
    command (``ending``): Python's shutdown would otherwise die of it (status -2);
    else the previous handler is restored.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def again(signum: int, frame: Any) -> None:
        os.write(2, b"attncourse: interrupted again; exiting now\n")
        os._exit(EXIT_INTERRUPTED)

    signalled = []

    def first(signum: int, frame: Any) -> None:
        signalled.append(signum)
        signal.signal(signal.SIGINT, again)
        raise KeyboardInterrupt

    previous = signal.getsignal(signal.SIGINT)
    if previous is not signal.default_int_handler:  # SIGINT ignored, or handled by the caller: leave it
        yield
        return
    signal.signal(signal.SIGINT, first)
    try:
        yield
    finally:
        # after a Ctrl-C the command only exits: a second one, in Python's own shutdown (which would
        # die of the signal, status -2), is ignored
        signal.signal(signal.SIGINT, signal.SIG_IGN if signalled or ending else previous)


def _resume_hint(args: argparse.Namespace) -> str:
    """What an interrupted command can do next: continue with --resume, or start again (nothing was trained)."""
    if args.command not in ("train", "train-lm"):
        return ""
    if (args.out / CHECKPOINT_NAME).is_file():
        return f"; continue with --resume (checkpoint in {args.out})"
    return f"; no epoch finished, nothing to continue: run the same command again to start {args.out} afresh"
