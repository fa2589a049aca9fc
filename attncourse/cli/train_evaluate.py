"""The ``train`` and ``evaluate`` commands of an encoder-decoder: ``train`` fits the model into
``--out`` (config, checkpoints, history, results); ``evaluate`` scores ``best.pt`` on a test
file (metrics, optional predictions).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import ExitStack, redirect_stdout
from dataclasses import dataclass, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

import attncourse
from attncourse.cli.limits import (
    seq2seq_training_bytes,
    validate_finite,
    validate_memory,
    validate_model_config,
)
from attncourse.cli.options import TRAIN_WRITES, length_hint, out_dir_problem
from attncourse.cli.outputs import RunLocked, is_stdout, locked_run_dir, write_output
from attncourse.cli.provenance import git_commit
from attncourse.cli.rundir import (
    json_safe,
    record_file,
    remove_recorded,
    unstarted_run,
    write_json,
)
from attncourse.cli.tsv import load_pairs, read_pairs
from attncourse.data.batching import build_vocabs, make_batches
from attncourse.data.pairs import save_tsv
from attncourse.data.vocab import Vocabulary
from attncourse.nn.rnn import count_parameters
from attncourse.recipes.experiment import Experiment, build_model, max_tokens_per_side
from attncourse.runtime import describe_device, pick_device
from attncourse.train.checkpoint import load_model, remove_temporaries, temporaries
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
    fit,
    validate_resume,
)
from attncourse.train.metrics import format_table
from attncourse.train.runfiles import note_written, read_run_json, start_manifest
from attncourse.train.seq2seq import evaluate, max_positions


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


def _read_json(path: Path) -> dict[str, Any]:
    """The dict a JSON file holds, or {} if it is missing, unreadable or holds something else."""
    try:
        # regular files only, size-limited: a FIFO never blocks
        obj = read_run_json(path)
    except (OSError, ValueError, RecursionError):
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


def device_name(device: torch.device) -> str:
    """The GPU's name on CUDA, else the device's type (``cpu``, ``mps``)."""
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


@dataclass
class _Data:
    """The ``train`` command's pairs and vocabularies (:func:`~attncourse.cli.tsv.load_pairs`)."""

    splits: Any
    train: Any
    valid: Any
    level: str | None
    src_vocab: Vocabulary
    tgt_vocab: Vocabulary


def _training_data(args: argparse.Namespace, experiment: Experiment, main_rank: bool) -> _Data:
    """The pairs and vocabularies of ``args``, after checking that training them fits in memory.

    Raises
    ------
    MemoryError or ValueError
        From :func:`~attncourse.cli.limits.validate_memory`: one line naming ``--batch-size``
        and the longest pairs.
    """
    splits, train_data, valid_data, level = load_pairs(args, max_tokens_per_side(experiment), quiet=not main_rank)
    src_vocab, tgt_vocab = build_vocabs(train_data)
    longest = [max((len(p[side]) for p in (*train_data.pairs, *valid_data.pairs)), default=0) + 2
               for side in (0, 1)]  # with <bos>/<eos>
    validate_memory(seq2seq_training_bytes(args, *longest, len(tgt_vocab), min(args.batch_size, len(train_data))),
                    f"training with --batch-size {args.batch_size} on pairs of up to {longest[0] - 2} and "
                    f"{longest[1] - 2} tokens (a target vocabulary of {len(tgt_vocab):,}; logits and activations)")
    return _Data(splits, train_data, valid_data, level, src_vocab, tgt_vocab)


def _training_device(args: argparse.Namespace, world: Any) -> tuple[torch.device, str]:
    """The device this process trains on (its own GPU under ``torchrun``), and the words for it."""
    device = pick_device(args.device)
    if world.distributed and device.type == "cuda":
        device = torch.device("cuda", world.local_rank % torch.cuda.device_count())
    where = f"cpu, {args.threads} thread(s)" if device.type == "cpu" else describe_device(device)
    if world.distributed:
        where += f", {world.world_size} processes ({world.backend})"
    return device, where


def _start_run_folder(out: Path, args: argparse.Namespace, fresh_start: bool, data: _Data,
                      description: dict[str, Any]) -> None:
    """Rank 0, before training: clear what an interrupted or replaced run left, start the manifest,
    write ``config.json`` (``description``: the model, its settings, where it runs) and ``test.tsv``."""
    out.mkdir(parents=True, exist_ok=True)
    removed = remove_temporaries(out, TRAIN_WRITES)
    if removed:
        print(f"attncourse: note: removed {len(removed)} temporary file(s) that an interrupted write left in "
              f"{out} ({', '.join(p.name for p in removed[:3])}{', ...' if len(removed) > 3 else ''})",
              flush=True)
    if args.overwrite or fresh_start:  # only what the earlier run wrote (its config.json lists it)
        remove_recorded(out)
    start_manifest(out)  # every file written from here on is recorded
    writes_test = data.splits is not None and len(data.splits.test) > 0
    # a resumed run keeps the test.tsv its first segment wrote (edited or not)
    keep_test = args.resume and (out / "test.tsv").exists()
    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "command"}
    write_json(out / "config.json", {
        "attncourse_version": attncourse.__version__,
        "command": "train",
        "files": [n for n in TRAIN_WRITES if n != "test.tsv" or writes_test or keep_test],
        "arguments": settings,
        **description,
    })
    if writes_test and not keep_test:
        save_tsv(data.splits.test, out / "test.tsv")
        # save_tsv writes in place, not through the atomic writer that records
        note_written(out / "test.tsv")


def _results(run: dict[str, Any], segment: dict[str, Any], earlier: dict[str, Any], history: list[dict[str, Any]],
             best: int, stopped_early: bool, out_of_time: bool = False) -> dict[str, Any]:
    """results.json: the run's settings (``run``), totals over every epoch in ``history``, every segment.

    ``segment`` is this one's start (``started``, ``first_epoch``, ``clock``: its
    :func:`time.perf_counter`), recorded once it has trained an epoch; ``earlier`` is the
    results.json it continues (its segments and evaluate's scores are kept).
    """
    done = _earlier_segments(earlier)
    if len(history) >= segment["first_epoch"]:  # this segment trained: record it
        done.append({"started": segment["started"], "first_epoch": segment["first_epoch"],
                     "last_epoch": len(history), "wall_time": time.perf_counter() - segment["clock"],
                     "device": run["device"], "device_name": run["device_name"], "world_size": run["world_size"],
                     **{k: run[k] for k in ("torch_version", "attncourse_version", "git_commit")}})
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


def _print_summary(out: Path, args: argparse.Namespace, result: Any, final: dict[str, Any],
                   first_epoch: int) -> None:
    """Rank 0, after training: the best epoch, the time and speed, and the next command."""
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


def _train(args: argparse.Namespace, world: Any, stack: ExitStack) -> int:
    """Train the encoder-decoder of ``args`` into ``args.out`` (every rank trains; rank 0 writes).

    Raises
    ------
    ValueError
        If the run folder cannot be used (one line naming it and why).
    """
    segment = {"started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "clock": time.perf_counter()}
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
    data = _training_data(args, experiment, main_rank)
    torch.manual_seed(args.seed)
    model = build_model(experiment, data.src_vocab, data.tgt_vocab)
    # every FitConfig setting the options name (--lr, --seed, ...) comes from them
    config = fit_config_from(args, num_threads=args.threads,
                             d_model_for_schedule=args.hidden_dim if args.kind == "rnn" else None)
    device, where = _training_device(args, world)
    train_batches = make_batches(data.train, data.src_vocab, data.tgt_vocab, args.batch_size, shuffle=True,
                                 seed=args.data_seed)
    valid_batches = make_batches(data.valid, data.src_vocab, data.tgt_vocab, 256, shuffle=False)
    extra = {"src_vocab": data.src_vocab.to_dict(), "tgt_vocab": data.tgt_vocab.to_dict(), "level": data.level,
             "task": args.task}

    segment["first_epoch"] = 1
    if args.resume:  # before anything in out is rewritten
        segment["first_epoch"] = len(validate_resume(out, model, train_batches, config, extra)["history"]) + 1
    n_parameters = count_parameters(model)
    # results.json keeps its history: the segments of training before this one, and evaluate's scores
    earlier = _read_json(out / "results.json") if args.resume else {}
    if main_rank:
        _start_run_folder(out, args, fresh_start, data, {
            "model_type": args.kind, "model_class": type(model).__name__, "preset": args.preset,
            "model": model.config, "n_parameters": n_parameters, "fit": vars(config), "level": data.level,
            "n_pairs": {"train": len(data.train), "valid": len(data.valid),
                        "test": 0 if data.splits is None else len(data.splits.test)},
            "vocab_sizes": {"src": len(data.src_vocab), "tgt": len(data.tgt_vocab)},
            "device": where, "world_size": world.world_size})
        preset = f" (preset {args.preset})" if args.preset else ""
        print(f"attncourse: {args.model} model{preset}, {n_parameters:,} parameters, "
              f"{len(data.train)} training pairs, on {where}", flush=True)
        if args.fused and device.type not in FUSED_DEVICES:
            print(f"attncourse: note: --fused works on CUDA and the CPU; the plain Adam kernel runs on {device.type}",
                  flush=True)
    run = {
        "task": args.task if args.task is not None else str(args.train),
        "model": args.model, "model_type": args.kind, "preset": args.preset, "n_parameters": n_parameters,
        "model_config": model.config, "device": device.type, "device_name": device_name(device),
        "world_size": world.world_size, "amp": args.amp, "compile": args.compile,
        "time_budget": args.time_budget, "torch_version": str(torch.__version__),
        "attncourse_version": attncourse.__version__, "git_commit": git_commit() if main_rank else None,
    }

    def report(history: list[dict[str, float]]) -> None:
        write_json(out / "history.json", history)
        write_json(out / "results.json", _results(run, segment, earlier, history,
                                                  best_epoch(history, config.monitor), False))
        tqdm.write(_epoch_line(history[-1]), file=sys.stdout)

    result = fit(model, train_batches, valid_batches, config, out_dir=out, resume=args.resume,
                 progress=not args.no_progress, extra=extra, callback=report)
    if not main_rank:
        return 0
    write_json(out / "history.json", result.history)
    final = _results(run, segment, earlier, result.history, result.best_epoch, result.stopped_early,
                     result.out_of_time)
    write_json(out / "results.json", final)
    _print_summary(out, args, result, final, segment["first_epoch"])
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
    model, checkpoint = load_model(path, map_location=device,
                                   validate_config=lambda c: validate_model_config(c, str(path)))
    validate_finite(model, path)
    extra = checkpoint["extra"]
    if not isinstance(extra.get("src_vocab"), dict) or not isinstance(extra.get("tgt_vocab"), dict):
        raise ValueError(f"{args.dir / BEST_NAME} holds no vocabularies; was it written by 'attncourse train'?")
    src_vocab = Vocabulary.from_dict(extra["src_vocab"])
    tgt_vocab = Vocabulary.from_dict(extra["tgt_vocab"])
    level = args.level or extra.get("level", "word")
    positions = max_positions(model)
    src_limit, hint = length_hint(args.max_tokens, None if positions is None else positions - 1, sources_only=True)
    with redirect_stdout(info):
        test = read_pairs(args.test, level, src_limit, args.max_tokens, hint, args.too_long)
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
        "device_name": device_name(device),
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
    results = _read_json(results_path)  # a FIFO or a huge file: {}, left alone
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
        write_json(results_path, results)
        print(f"test metrics added to {results_path}", file=info)
    if args.predictions is not None:
        lines = ["\t".join(row) + "\n" for row in zip(result["sources"], result["references"], result["hypotheses"])]
        write_output("".join(lines), args.predictions)
        if not is_stdout(args.predictions):
            print(f"predictions written to {args.predictions}", file=info)
    return 0
