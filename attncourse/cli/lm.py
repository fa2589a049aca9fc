"""Command line for the decoder-only language model: ``train-lm`` and ``sample``.

Train the character-level GPT of chapter 7 on any UTF-8 text file (by default
on chapters 1-6 of the course), then generate from it::

    python -m attncourse train-lm --text corpus.txt --out runs/lm --steps 2000 --positional rope
    python -m attncourse sample runs/lm --prompt "The attention" --length 200 --temperature 0.8 --top-k 10

``train-lm`` writes into ``--out``: ``checkpoint.pt`` (weights, optimiser and
history, written atomically after every ``--steps-per-epoch`` steps; continue an
interrupted run with ``--resume``), ``vocab.json`` (the characters), ``config.json``
and ``history.json``. ``--out`` must be new or empty unless ``--resume`` or
``--overwrite`` is given, as for ``train``. Checkpoints load with
``weights_only=True``. Errors are one line ``attncourse: error: ...``, exit status 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

import torch

from attncourse.data.text import char_corpus, course_text
from attncourse.data.vocab import Vocabulary
from attncourse.decode.generation import generate
from attncourse.nn.gpt import GPT, GPT_POSITIONAL
from attncourse.recipes.lm import LMConfig, bits_per_char, train_lm
from attncourse.runtime import pick_device
from attncourse.train.checkpoint import atomic_write_text, load_model
from attncourse.train.fit import CHECKPOINT_NAME

#: The sub-commands this module adds.
LM_COMMANDS = ("train-lm", "sample")
VOCAB_NAME = "vocab.json"
#: What ``train-lm`` writes into ``--out``; ``--overwrite`` removes them first.
LM_RUN_FILES = (CHECKPOINT_NAME, VOCAB_NAME, "config.json", "history.json")


def add_lm_commands(commands: Any, path_type: Any, positive_int: Any, positive_float: Any,
                    seed_type: Any, device_type: Any) -> None:
    """Add ``train-lm`` and ``sample`` to the ``attncourse`` sub-parsers (option types from cli_options)."""
    lm = commands.add_parser("train-lm", help="train a character-level decoder-only model (GPT) on a text file",
                             description="Train the decoder-only language model of chapter 7 on a UTF-8 text file.")
    lm.add_argument("--text", type=path_type, metavar="FILE",
                    help="UTF-8 text to learn (default: chapters 1-6 of the course, in a source checkout)")
    lm.add_argument("--out", type=path_type, required=True, metavar="DIR",
                    help="run directory; must be new or empty, unless --resume or --overwrite")
    lm.add_argument("--valid-fraction", type=float, default=0.1, metavar="F",
                    help="share of the text, at its end, held out (default 0.1)")
    defaults = LMConfig()
    lm.add_argument("--positional", choices=GPT_POSITIONAL, default=defaults.positional,
                    help=f"position scheme (default {defaults.positional})")
    lm.add_argument("--num-kv-heads", type=positive_int, metavar="G",
                    help="key/value heads: 1 multi-query, between grouped-query (default: --num-heads)")
    lm.add_argument("--window", type=positive_int, metavar="W", help="sliding-window attention over W tokens")
    for name, kind in (("d_model", positive_int), ("num_heads", positive_int), ("num_layers", positive_int),
                       ("d_ff", positive_int), ("max_len", positive_int), ("context", positive_int),
                       ("batch_size", positive_int), ("steps", positive_int), ("steps_per_epoch", positive_int),
                       ("warmup", positive_int), ("lr", positive_float)):
        lm.add_argument("--" + name.replace("_", "-"), type=kind, default=getattr(defaults, name),
                        metavar="N", help=f"(default {getattr(defaults, name)})")
    lm.add_argument("--seed", type=seed_type, default=0, metavar="S", help="initial weights and batches (default 0)")
    lm.add_argument("--device", type=device_type, metavar="DEV", help="'cpu', 'cuda', 'mps'; default: best available")
    lm.add_argument("--threads", type=positive_int, default=1, metavar="N", help="CPU threads for torch (default 1)")
    lm.add_argument("--resume", action="store_true", help="continue the run in --out, with the same settings")
    lm.add_argument("--overwrite", action="store_true", help="replace the run in --out")
    lm.add_argument("--no-progress", action="store_true", help="no progress bar")

    sample = commands.add_parser("sample", help="generate text from a model trained with train-lm",
                                 description="Sample characters from DIR/checkpoint.pt written by "
                                             "'attncourse train-lm'.")
    sample.add_argument("dir", type=path_type, metavar="DIR", help="a directory written by 'attncourse train-lm'")
    sample.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    sample.add_argument("--length", type=positive_int, default=200, metavar="N", help="characters to generate")
    sample.add_argument("--temperature", type=positive_float, default=1.0, metavar="T", help="(default 1.0)")
    sample.add_argument("--top-k", type=positive_int, metavar="K", help="sample among the K most probable only")
    sample.add_argument("--seed", type=seed_type, default=0, metavar="S", help="sampling seed (default 0)")
    sample.add_argument("--no-cache", action="store_true", help="recompute the prefix at each step (slower)")
    sample.add_argument("--device", type=device_type, metavar="DEV", help="default: the CPU")


def check_lm_args(args: argparse.Namespace, usage_error: type[Exception], out_dir_problem: Any) -> None:
    """Raise ``usage_error`` for a ``train-lm``/``sample`` command that would fail later."""
    if args.command == "sample":
        if not (args.dir / CHECKPOINT_NAME).is_file() or not (args.dir / VOCAB_NAME).is_file():
            raise usage_error(f"DIR {str(args.dir)!r} holds no {CHECKPOINT_NAME} and {VOCAB_NAME} "
                              "(a run written by 'attncourse train-lm')")
        return
    if args.resume and args.overwrite:
        raise usage_error("give --resume (continue the run in --out) or --overwrite (start it again), not both")
    if args.text is not None and not args.text.is_file():
        raise usage_error(f"--text {str(args.text)!r}: no such file")
    if not 0.0 < args.valid_fraction < 1.0:
        raise usage_error(f"--valid-fraction must lie in (0, 1), got {args.valid_fraction}")
    if args.steps % args.steps_per_epoch:
        raise usage_error(f"--steps {args.steps} must be a multiple of --steps-per-epoch {args.steps_per_epoch}")
    if args.d_model % args.num_heads:
        raise usage_error(f"--d-model {args.d_model} must be divisible by --num-heads {args.num_heads}")
    if args.num_kv_heads is not None and args.num_heads % args.num_kv_heads:
        raise usage_error(f"--num-heads {args.num_heads} must be a multiple of --num-kv-heads {args.num_kv_heads}")
    if args.positional in ("sinusoidal", "learned") and args.context > args.max_len:
        raise usage_error(f"--context {args.context} does not fit --max-len {args.max_len} positions")
    problem = out_dir_problem(args.out, args.resume, args.overwrite)
    if problem:
        raise usage_error(problem)


def _read_text(path: Path | None) -> str:
    if path is None:
        return course_text()
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"--text {str(path)!r} is not UTF-8 text ({err.reason} at byte {err.start})") from None


def run_train_lm(args: argparse.Namespace) -> int:
    """The ``train-lm`` sub-command; returns the exit status."""
    torch.set_num_threads(args.threads)
    text = _read_text(args.text)
    corpus = char_corpus(text, args.valid_fraction)
    if corpus.train.numel() <= args.context or corpus.valid.numel() <= args.context:
        raise ValueError(f"the text has {len(text)} characters: too few for windows of --context {args.context} "
                         f"in both its training and held-out parts")
    fields = {f.name for f in dataclasses.fields(LMConfig)}
    config = LMConfig(**{k: v for k, v in vars(args).items() if k in fields and k != "corpus"})
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.overwrite:
        for name in LM_RUN_FILES:
            (out / name).unlink(missing_ok=True)
    vocab_path = out / VOCAB_NAME
    if args.resume and vocab_path.is_file():
        saved = Vocabulary.from_dict(json.loads(vocab_path.read_text(encoding="utf-8")))
        if saved != corpus.vocab:
            raise ValueError(f"--resume: the characters of this text differ from the run's {VOCAB_NAME}; "
                             "give the same --text and --valid-fraction")
    atomic_write_text(json.dumps(corpus.vocab.to_dict(), ensure_ascii=False), vocab_path)
    run = train_lm(config, corpus, text, progress=not args.no_progress, device=pick_device(args.device),
                   out_dir=out)
    atomic_write_text(json.dumps(dataclasses.asdict(config) | {"text": None if args.text is None else str(args.text)},
                                 indent=2), out / "config.json")
    atomic_write_text(json.dumps(run.history, indent=2), out / "history.json")
    last = run.history[-1]
    print(f"step {last['step']:.0f}: train {bits_per_char(last['train_loss']):.3f}, held-out "
          f"{last['valid_bits_per_char']:.3f} bits/char; {run.seconds:.0f} s of training; run in {out}")
    return 0


def run_sample(args: argparse.Namespace) -> int:
    """The ``sample`` sub-command; prints the prompt and its continuation."""
    device = pick_device(args.device or "cpu")
    model, _ = load_model(args.dir / CHECKPOINT_NAME, map_location=device)
    if not isinstance(model, GPT):
        raise ValueError(f"{args.dir / CHECKPOINT_NAME} holds a {type(model).__name__}, not a model of train-lm")
    vocab = Vocabulary.from_dict(json.loads((args.dir / VOCAB_NAME).read_text(encoding="utf-8")))
    prompt = torch.tensor(vocab.encode(list(args.prompt)), dtype=torch.long)
    if prompt.numel() == 0:
        raise ValueError("--prompt is empty: give at least one character")
    new = generate(model, prompt, args.length, temperature=args.temperature, top_k=args.top_k, seed=args.seed,
                   use_cache=not args.no_cache)
    sys.stdout.write(args.prompt + "".join(vocab.decode(new.tolist())) + "\n")
    return 0
