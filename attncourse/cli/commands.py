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

Every command's options are the fields of dataclasses (:mod:`attncourse.cli.spec`).

Several GPUs (or CPU processes) train one model together under ``torchrun``::

    torchrun --nproc_per_node 4 -m attncourse train --task numbers-en-fr --model transformer \
        --preset gpu --out runs/base

A training run writes into ``--out``: ``checkpoint.pt`` (resume with ``--resume``),
``best.pt`` (the best epoch's weights and vocabularies), ``config.json``,
``history.json`` (updated every epoch), ``results.json`` (what ran where, how
fast, and the learning curves of every segment of training, resumed or not) and,
for a generated task, ``test.tsv``; ``config.json`` is written first and lists
them. ``--out`` must be new or empty: a directory holding anything else is never
written into unless ``--overwrite`` says so, and even then only the files an
earlier run listed are deleted or replaced (:mod:`attncourse.cli.rundir`); a run
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
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager, redirect_stdout
from dataclasses import fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

import attncourse
from attncourse.cli.generate import check_generate_args, run_generate
from attncourse.cli.gpu_report import check_gpu_report_args, run_gpu_report
from attncourse.cli.limits import (
    check_finite,
    check_limits,
    check_memory,
    check_model_config,
    seq2seq_training_bytes,
)
from attncourse.cli.lm import LM_COMMANDS, check_lm_args, run_sample, run_train_lm
from attncourse.cli.options import (
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    TRAIN_WRITES,
    UsageError,
    build_parser,
    check_evaluate_args,
    check_train_args,
    length_hint,
    out_dir_problem,
)
from attncourse.cli.outputs import (
    RunLocked,
    is_stdout,
    locked_run_dir,
    os_reason,
    write_output,
)
from attncourse.cli.provenance import git_commit
from attncourse.cli.rundir import (
    json_safe,
    record_file,
    remove_recorded,
    unstarted_run,
    write_json,
)
from attncourse.data.batching import build_vocabs, make_batches
from attncourse.data.pairs import PairDataset, Splits, read_tsv, save_tsv
from attncourse.data.vocab import Vocabulary
from attncourse.nn.rnn import count_parameters
from attncourse.recipes.experiment import (
    Experiment,
    build_model,
    load_task,
    max_tokens_per_side,
)
from attncourse.runtime import describe_device, pick_device
from attncourse.train.checkpoint import (
    load_model,
    remove_temporaries,
    temporaries,
)
from attncourse.train.config import fit_config_from
from attncourse.train.distributed import (
    broadcast_object,
    init_distributed,
    teardown_distributed,
)
from attncourse.train.fit import (
    BEST_NAME,
    CHECKPOINT_NAME,
    FUSED_DEVICES,
    best_epoch,
    check_resume,
    fit,
)
from attncourse.train.metrics import format_table
from attncourse.train.seq2seq import evaluate, max_positions

#: Kept under its old name for callers of the command line's internals.
_check_train_args = check_train_args


def experiment_from_args(args: argparse.Namespace) -> Experiment:
    """The :class:`~attncourse.recipes.experiment.Experiment` fields a resolved ``train`` command sets.

    Used to build the model with :func:`~attncourse.recipes.experiment.build_model`; the data options
    (TSV files, level, max value) stay with the command.
    """
    values = {f.name: getattr(args, f.name) for f in fields(Experiment)
              if hasattr(args, f.name) and f.metadata.get("group") != "data"
              and (getattr(args, f.name) is not None or not f.metadata.get("only"))}  # the other family's: None
    values.update(model=args.kind, attention=args.attention, task=args.task or "numbers-en-fr",
                  data_seed=args.data_seed)
    return Experiment(**values)


#: Bytes a line of a TSV file may have per token of --max-tokens (both sides together): a line longer
#: than that is refused (or skipped) before it is read, whatever its tokens, as the metrics (chrF) and
#: the tokenizer take time and memory by character. 64 bytes a token is eight times a long word.
LINE_BYTES_PER_TOKEN = 64


def long_lines(path: Path, limit: int) -> list[int]:
    """1-based numbers of the lines of ``path`` longer than ``limit`` bytes; read 1 MB at a time."""
    found, lineno, length = [], 1, 0
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            start = 0
            while (end := block.find(b"\n", start)) != -1:
                length += end - start
                if length > limit:
                    found.append(lineno)
                lineno, length, start = lineno + 1, 0, end + 1
            length += len(block) - start
    if length > limit:
        found.append(lineno)
    return found


def _read_pairs(path: Path, level: str, max_src: int, max_tgt: int, hint: str, too_long: str,
                quiet: bool = False) -> PairDataset:
    """:func:`~attncourse.data.pairs.read_tsv` with the command's limits; says how many pairs were left out.

    Lines longer than :data:`LINE_BYTES_PER_TOKEN` x (``max_src`` + ``max_tgt``)
    bytes are refused (or, with ``--too-long skip``, left out) before they are read.
    """
    limit = LINE_BYTES_PER_TOKEN * (max_src + max_tgt)
    long = long_lines(path, limit)
    if long and too_long != "skip":
        raise ValueError(f"{path}, line {long[0]}: a line of more than {limit:,} bytes ({LINE_BYTES_PER_TOKEN} "
                         f"per token of the length limits); {hint}")
    with tempfile.TemporaryDirectory(prefix="attncourse-tsv-") as tmp:
        source = path
        if long:  # a copy with those lines blank: read_tsv skips blank lines, and line numbers stay
            source = Path(tmp) / path.name
            skip = set(long)
            with open(path, "rb") as f, open(source, "wb") as copy:
                for lineno, line in enumerate(_lines(f), 1):
                    copy.write(b"\n" if lineno in skip else line)
        try:
            data, skipped = read_tsv(source, level, name=path.stem, max_src_tokens=max_src,
                                     max_tgt_tokens=max_tgt, skip_long=too_long == "skip", hint=hint)
        except ValueError as err:
            raise ValueError(str(err).replace(str(source), str(path))) from None
    skipped = sorted(set(skipped) | set(long))
    if skipped and not quiet:
        lines = ", ".join(map(str, skipped[:5])) + (", ..." if len(skipped) > 5 else "")
        print(f"attncourse: note: left out {len(skipped)} pair(s) of {path} longer than the limit "
              f"(--too-long skip): line(s) {lines}", flush=True)
    return data


def _lines(f: Any) -> Iterator[bytes]:
    """The lines of a binary file, each with its end, 1 MB at a time (a long line is not held whole)."""
    pending = b""
    while block := f.read(1 << 20):
        pending += block
        *whole, pending = pending.split(b"\n")
        for line in whole:
            yield line + b"\n"
        if len(pending) > 1 << 20:  # a long line: only blanked, so its bytes are not needed
            pending = pending[-1:]
    if pending:
        yield pending


def _load_data(args: argparse.Namespace, model_limit: int | None,
               quiet: bool = False) -> tuple[Splits | None, PairDataset, PairDataset, str]:
    """Return (generated splits or None, train dataset, valid dataset, level)."""
    if args.task is None:
        level = args.level or "word"
        limit, hint = length_hint(args.max_tokens, model_limit)
        train, valid = (_read_pairs(path, level, limit, limit, hint, args.too_long, quiet)
                        for path in (args.train, args.valid))
        return None, train, valid, level
    splits = load_task(args.task, n_train=args.n_train, n_valid=args.n_valid, n_test=args.n_test,
                       seed=args.data_seed, max_value=args.max_value)
    if len(splits.train) == 0 or len(splits.valid) == 0:
        raise ValueError("--n-train and --n-valid must be at least 1")
    return splits, splits.train, splits.valid, splits.train.level


_json_safe = json_safe
_write_json = write_json


def _read_json(path: Path) -> dict[str, Any]:
    """The dict a JSON file holds, or {} if it is missing, unreadable or holds something else."""
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


def _earlier_segments(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The training segments a results.json records (one for a file written before segments existed)."""
    segments = results.get("segments")
    if isinstance(segments, list):
        return [s for s in segments if isinstance(s, dict)]
    history = results.get("history")
    if isinstance(results.get("wall_time"), (int, float)) and isinstance(history, list) and history:
        return [{"first_epoch": 1, "last_epoch": len(history), "wall_time": results["wall_time"]}]
    return []


def _epoch_line(row: dict[str, float]) -> str:
    return (
        f"epoch {row['epoch']:3d}  train loss {row['train_loss']:.3f} acc {row['train_acc']:.3f}  "
        f"valid loss {row['valid_loss']:.3f} acc {row['valid_acc']:.3f} "
        f"exact {row['valid_exact_match']:.3f}  {row['seconds']:.1f} s"
    )


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
        with ExitStack() as stack:
            return _train(args, world, stack)
    finally:
        teardown_distributed()


def _claim(out: Path, stack: ExitStack, resume: bool, overwrite: bool, writes: tuple[str, ...] = TRAIN_WRITES,
           command: str = "train") -> str | None:
    """Lock ``out`` for this run (on ``stack``) and check it (:func:`out_dir_problem`); return the problem."""
    if not (out.exists() and not out.is_dir()):
        try:
            stack.enter_context(locked_run_dir(out))
        except RunLocked as err:
            return str(err)
    # checked again under the lock: another run may have written there since the options were checked
    return out_dir_problem(out, resume, overwrite, writes, command)


def _train(args: argparse.Namespace, world: Any, stack: ExitStack) -> int:
    started, started_at = time.perf_counter(), datetime.now(timezone.utc).isoformat(timespec="seconds")
    main_rank = world.is_main
    out: Path = args.out
    # Rank 0 decides, before any rank writes, and every rank stops alike.
    problem = broadcast_object(_claim(out, stack, args.resume, args.overwrite) if main_rank else None)
    if problem:
        raise ValueError(problem)
    # a run killed before its first checkpoint starts again from the beginning (--resume or not)
    fresh_start = main_rank and unstarted_run(out, temporaries(out, TRAIN_WRITES))
    args.resume = args.resume and (out / CHECKPOINT_NAME).is_file()
    experiment = experiment_from_args(args)
    splits, train_data, valid_data, level = _load_data(args, max_tokens_per_side(experiment), quiet=not main_rank)
    src_vocab, tgt_vocab = build_vocabs(train_data)
    longest = [max((len(p[side]) for p in (*train_data.pairs, *valid_data.pairs)), default=0) + 2
               for side in (0, 1)]  # with <bos>/<eos>
    check_memory(seq2seq_training_bytes(args, *longest, len(tgt_vocab), min(args.batch_size, len(train_data))),
                 f"training with --batch-size {args.batch_size} on pairs of up to {longest[0] - 2} and "
                 f"{longest[1] - 2} tokens (a target vocabulary of {len(tgt_vocab):,}; logits and activations)")
    torch.manual_seed(args.seed)
    model = build_model(experiment, src_vocab, tgt_vocab)
    # every FitConfig setting the options name (--lr, --seed, ...) comes from them
    config = fit_config_from(args, num_threads=args.threads,
                             d_model_for_schedule=args.hidden_dim if args.kind == "rnn" else None)
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

    first_epoch = 1
    if args.resume:  # before anything in out is rewritten
        first_epoch = len(check_resume(out, model, train_batches, config, extra)["history"]) + 1
    n_parameters = count_parameters(model)
    # results.json keeps its history: the segments of training before this one, and evaluate's scores
    earlier = _read_json(out / "results.json") if args.resume else {}
    segments = _earlier_segments(earlier)
    if main_rank:
        out.mkdir(parents=True, exist_ok=True)
        removed = remove_temporaries(out, TRAIN_WRITES)
        if removed:
            print(f"attncourse: note: removed {len(removed)} temporary file(s) that an interrupted write left in "
                  f"{out} ({', '.join(p.name for p in removed[:3])}{', ...' if len(removed) > 3 else ''})",
                  flush=True)
        if args.overwrite or fresh_start:  # only what the earlier run wrote (its config.json lists it)
            remove_recorded(out)
        writes_test = splits is not None and len(splits.test) > 0
        # a resumed run keeps the test.tsv its first segment wrote (edited or not)
        keep_test = args.resume and (out / "test.tsv").exists()
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "command"}
        _write_json(out / "config.json", {
            "attncourse_version": attncourse.__version__,
            "command": "train",
            "files": [n for n in TRAIN_WRITES if n != "test.tsv" or writes_test or keep_test],
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
        if writes_test and not keep_test:
            save_tsv(splits.test, out / "test.tsv")
        preset = f" (preset {args.preset})" if args.preset else ""
        print(f"attncourse: {args.model} model{preset}, {n_parameters:,} parameters, "
              f"{len(train_data)} training pairs, on {where}", flush=True)
        if args.fused and device.type not in FUSED_DEVICES:
            print(f"attncourse: note: --fused works on CUDA and the CPU; the plain Adam kernel runs on {device.type}",
                  flush=True)
    software = {"torch_version": str(torch.__version__), "attncourse_version": attncourse.__version__,
                "git_commit": git_commit() if main_rank else None}
    run = {
        "task": args.task if args.task is not None else str(args.train),
        "model": args.model, "model_type": args.kind, "preset": args.preset, "n_parameters": n_parameters,
        "model_config": model.config, "device": device.type, "device_name": _device_name(device),
        "world_size": world.world_size, "amp": args.amp, "compile": args.compile,
        "time_budget": args.time_budget, **software,
    }

    def results(history: list[dict[str, Any]], best: int, stopped_early: bool,
                out_of_time: bool = False) -> dict[str, Any]:
        """results.json: this run's settings, totals over every epoch in ``history``, every segment."""
        done = list(segments)
        if len(history) >= first_epoch:  # this segment trained: record it
            done.append({"started": started_at, "first_epoch": first_epoch, "last_epoch": len(history),
                         "wall_time": time.perf_counter() - started, "device": device.type,
                         "device_name": run["device_name"], "world_size": world.world_size, **software})
        # epochs of a segment killed before it wrote results.json count too: they are in the history
        tokens = sum(int(row.get("train_tokens", 0)) for row in history)
        seconds = sum(float(row.get("train_seconds", 0.0)) for row in history)
        report = {**run, "wall_time": sum(float(s.get("wall_time") or 0.0) for s in done),
                  "train_seconds": seconds, "train_tokens": tokens,
                  "tokens_per_second": tokens / seconds if seconds > 0 else 0.0,
                  "best_epoch": best, "stopped_early": stopped_early, "out_of_time": out_of_time,
                  "history": history, "segments": done}
        if "evaluations" in earlier:
            report["evaluations"] = earlier["evaluations"]
        return report

    def report(history: list[dict[str, float]]) -> None:
        _write_json(out / "history.json", history)
        _write_json(out / "results.json", results(history, best_epoch(history, config.monitor), False))
        tqdm.write(_epoch_line(history[-1]), file=sys.stdout)

    result = fit(model, train_batches, valid_batches, config, out_dir=out, resume=args.resume,
                 progress=not args.no_progress, extra=extra, callback=report)
    if not main_rank:
        return 0
    _write_json(out / "history.json", result.history)
    final = results(result.history, result.best_epoch, result.stopped_early, result.out_of_time)
    _write_json(out / "results.json", final)
    if len(result.history) < first_epoch:
        print(f"attncourse: nothing to train: {out} holds {len(result.history)} epoch(s) already; "
              "raise --epochs to train longer")
    if result.best_epoch:
        best = result.history[result.best_epoch - 1]
        stop = " (stopped early)" if result.stopped_early else ""
        stop += f" (time budget of {args.time_budget:g} s spent)" if result.out_of_time else ""
        print(f"best epoch {result.best_epoch}{stop}: valid exact match {best['valid_exact_match']:.3f}, "
              f"valid loss {best['valid_loss']:.3f}; weights in {out / BEST_NAME}")
    n_segments = len(final["segments"])
    in_all = f" ({final['wall_time']:.1f} s in {n_segments} segments)" if n_segments > 1 else ""
    print(f"wall time {result.wall_time:.1f} s{in_all}, {final['tokens_per_second']:,.0f} target tokens/s "
          "in training")
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
    # with an output on the standard output ('-'), it gets the data alone, the messages go to stderr
    to_stdout = is_stdout(args.json) or (args.predictions is not None and is_stdout(args.predictions))
    info = sys.stderr if to_stdout else sys.stdout
    device = pick_device(args.device)
    path = args.dir / BEST_NAME
    model, checkpoint = load_model(path, map_location=device, check_config=lambda c: check_model_config(c, str(path)))
    check_finite(model, path)
    extra = checkpoint["extra"]
    if not isinstance(extra.get("src_vocab"), dict) or not isinstance(extra.get("tgt_vocab"), dict):
        raise ValueError(f"{args.dir / BEST_NAME} holds no vocabularies; was it written by 'attncourse train'?")
    src_vocab = Vocabulary.from_dict(extra["src_vocab"])
    tgt_vocab = Vocabulary.from_dict(extra["tgt_vocab"])
    level = args.level or extra.get("level", "word")
    positions = max_positions(model)
    src_limit, hint = length_hint(args.max_tokens, None if positions is None else positions - 1, sources_only=True)
    with redirect_stdout(info):
        test = _read_pairs(args.test, level, src_limit, args.max_tokens, hint, args.too_long)
    start = time.perf_counter()
    result = evaluate(model, test, src_vocab, tgt_vocab, beam_size=args.beam_size, batch_size=args.batch_size,
                      edges=args.edges, length_penalty=args.length_penalty)
    seconds = time.perf_counter() - start
    metrics = result["metrics"]
    decoding = "greedy" if args.beam_size == 1 else f"beam search, K={args.beam_size}"
    print(f"{test.name}: {len(test)} pairs, {decoding}, model from epoch {checkpoint['epoch']}", file=info)
    print(format_table(metrics), file=info)
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
    for path in getattr(args, "replaced", ()):
        print(f"attncourse: note: replacing {path}, which evaluate did not write (--overwrite)", file=info,
              flush=True)
    write_output(json.dumps(json_safe(report), indent=2, ensure_ascii=False, allow_nan=False) + "\n", args.json)
    if args.json == args.dir / "metrics.json":
        record_file(args.dir, "metrics.json")
    if not is_stdout(args.json):
        print(f"metrics written to {args.json}", file=info)
    results_path = args.dir / "results.json"
    results = _read_json(results_path)
    evaluations = results.get("evaluations", [])
    if results and not isinstance(evaluations, list):
        print(f"attncourse: note: {results_path} not updated: its 'evaluations' entry is not a list "
              "(not a file written by attncourse train?)", file=info, flush=True)
    elif results and results_path.is_file() and not results_path.is_symlink():
        # a run trained by this version: keep its test scores with it
        summary = {k: report[k] for k in ("test", "epoch", "beam_size", "length_penalty", "overall",
                                          "decode_seconds", "sentences_per_second")}
        same = (summary["test"], summary["beam_size"], summary["length_penalty"])
        kept = [e for e in evaluations
                if isinstance(e, dict) and (e.get("test"), e.get("beam_size"), e.get("length_penalty")) != same]
        results["evaluations"] = kept + [summary]
        _write_json(results_path, results)
        print(f"test metrics added to {results_path}", file=info)
    if args.predictions is not None:
        lines = ["\t".join(row) + "\n" for row in zip(result["sources"], result["references"], result["hypotheses"])]
        write_output("".join(lines), args.predictions)
        if not is_stdout(args.predictions):
            print(f"predictions written to {args.predictions}", file=info)
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
        if args.command == "train":
            check_train_args(args)
        elif args.command in LM_COMMANDS:
            check_lm_args(args, UsageError, out_dir_problem)
        elif args.command == "gpu-report":
            problem = check_limits(args)
            if problem:
                raise UsageError(problem)
            check_gpu_report_args(args, UsageError)
        elif args.command == "generate":
            check_generate_args(args, UsageError)
        else:
            check_evaluate_args(args)
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
        if args.command in LM_COMMANDS:
            return run_train_lm(args) if args.command == "train-lm" else run_sample(args)
        if args.command == "gpu-report":
            return run_gpu_report(args)
        if args.command == "generate":
            return run_generate(args)
        return run_train(args) if args.command == "train" else run_evaluate(args)
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
    except RuntimeError as err:  # an allocation that failed anyway (torch raises RuntimeError, not MemoryError)
        if not allocation_failed(err):
            raise
        print(f"attncourse: error: the machine ran out of memory ({_one_line(err)[:200]}); give smaller sizes",
              file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"attncourse: interrupted{_resume_hint(args)}", file=sys.stderr)
        return EXIT_INTERRUPTED


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
