"""Command line for the decoder-only language model: ``train-lm`` and ``sample``.

Train the character-level GPT of chapter 7 on any UTF-8 text file (by default
on chapters 1-6 of the course), then generate from it::

    python -m attncourse train-lm --text corpus.txt --out runs/lm --steps 2000 --positional rope
    python -m attncourse sample runs/lm --prompt "The attention" --length 200 --temperature 0.8 --top-k 10
    python -m attncourse sample runs/lm --draft runs/small-lm --draft-tokens 4   # speculative decoding

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
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch

from attncourse.cli.generate import run_generate, validate_generate_args
from attncourse.cli.limits import (
    LIMITS,
    guard_logits,
    training_memory_problem,
    validate_finite,
    validate_limits,
    validate_memory,
    validate_model_config,
)
from attncourse.cli.option_fields import MAX_PROMPT_CHARS
from attncourse.cli.options import out_dir_problem, special_file
from attncourse.cli.outputs import locked_run_dir
from attncourse.cli.rundir import remove_recorded, unstarted_run, write_json
from attncourse.data.text import char_corpus, course_text, read_utf8, text_digest
from attncourse.data.vocab import Vocabulary
from attncourse.decode.generation import SUPPRESSED_IDS, generate
from attncourse.decode.speculative import speculative_generate
from attncourse.nn.gpt import GPT
from attncourse.nn.spec import PositionSpec
from attncourse.recipes.lm import (
    LMConfig,
    bits_per_char,
    lm_run_settings,
    lm_settings,
    lm_spec,
    train_lm,
    with_spec,
)
from attncourse.runtime import pick_device
from attncourse.train.checkpoint import (
    atomic_write_text,
    differences,
    load_checkpoint,
    load_model,
    remove_temporaries,
    temporaries,
)
from attncourse.train.fit import CHECKPOINT_NAME
from attncourse.train.runfiles import read_run_bytes, read_run_json, start_manifest

#: The sub-commands this module adds.
LM_COMMANDS = ("train-lm", "sample")
VOCAB_NAME = "vocab.json"
#: What ``train-lm`` writes into ``--out`` (listed in its config.json); ``--overwrite`` removes them first.
LM_RUN_FILES = ("config.json", VOCAB_NAME, CHECKPOINT_NAME, "history.json")


def validate_lm_args(args: argparse.Namespace, usage_error: type[Exception], out_dir_problem: Any) -> None:
    """Raise ``usage_error`` for a ``train-lm``/``sample`` command that would fail later; nothing is written."""
    problem = validate_limits(args)
    if problem:
        raise usage_error(problem)
    if args.command == "sample" and args.model is not None:
        args.generate = pretrained_sample_args(args, usage_error)
        return
    if args.command == "sample":
        if args.rope_scaling is None:
            try:  # the spec's rule: a factor needs a scaling
                PositionSpec("rope", rope_factor=args.rope_factor)
            except ValueError as error:
                raise usage_error(str(error)) from None
        if args.dir is None:
            raise usage_error("give DIR (a directory written by 'attncourse train-lm') or --model (a pretrained "
                              "model)")
        for name, run in (("DIR", args.dir), ("--draft", args.draft)):
            if run is not None and not ((run / CHECKPOINT_NAME).is_file() and (run / VOCAB_NAME).is_file()):
                raise usage_error(f"{name} {str(run)!r} holds no {CHECKPOINT_NAME} and {VOCAB_NAME} "
                                  "(a run written by 'attncourse train-lm')")
        if len(args.prompt) + args.length > MAX_PROMPT_CHARS:
            raise usage_error(f"--prompt ({len(args.prompt):,} characters) and --length {args.length:,} "
                              f"make more than {MAX_PROMPT_CHARS:,} characters, the most a sample holds "
                              "(attention memory grows with the square of the length)")
        return
    if args.resume and args.overwrite:
        raise usage_error("give --resume (continue the run in --out) or --overwrite (start it again), not both")
    if args.text is not None and args.text.is_dir():
        raise usage_error(f"--text {str(args.text)!r} is a directory, not a text file")
    if args.text is not None and args.text.exists() and not args.text.is_file():
        raise usage_error(special_file(args.text, "--text"))
    if args.text is not None and not args.text.is_file():
        raise usage_error(f"--text {str(args.text)!r}: no such file")
    if args.text is not None and args.text.stat().st_size > 4 * args.max_chars:
        raise usage_error(f"--text {str(args.text)!r} has {args.text.stat().st_size:,} bytes, more than "
                          f"--max-chars {args.max_chars:,} characters can take; raise --max-chars")
    if not 0.0 < args.valid_fraction < 1.0:
        raise usage_error(f"--valid-fraction must lie in (0, 1), got {args.valid_fraction}")
    problem = training_memory_problem(args) or out_dir_problem(
        args.out, args.resume, args.overwrite, LM_RUN_FILES, "train-lm")
    if problem:
        raise usage_error(problem)


def pretrained_sample_args(args: argparse.Namespace, usage_error: type[Exception]) -> argparse.Namespace:
    """``sample --model``: the ``generate`` command that samples the same way (``--length`` tokens, top-k,
    ``--draft N``: a draft of the model's first N layers), checked."""
    if args.dir is not None:
        raise usage_error("give DIR (a train-lm run) or --model (a pretrained model), not both")
    if args.no_cache:
        raise usage_error("--no-cache applies to train-lm runs; a pretrained model samples with its cache")
    if args.rope_scaling is not None:
        raise usage_error("--rope-scaling applies to train-lm runs; a pretrained model keeps its own positions")
    draft = None
    if args.draft is not None:
        try:
            draft = int(str(args.draft))
        except ValueError:
            raise usage_error(f"--draft with --model: the number N of the model's first layers that draft, got "
                              f"{str(args.draft)!r}") from None
    pretrained = argparse.Namespace(
        command="generate", prompt=args.prompt, model=args.model, chat=False, temperature=args.temperature,
        top_p=1.0, top_k=args.top_k, max_tokens=args.length, seed=args.seed, draft=draft,
        draft_tokens=args.draft_tokens, device=args.device)
    validate_generate_args(pretrained, usage_error)
    return pretrained


def _read_text(path: Path | None, max_chars: int) -> str:
    """The text of ``--text`` (default: the course's chapters), line ends as ``\\n``; one line for any problem."""
    if path is None:
        return course_text()
    text = read_utf8(path, 4 * (max_chars + 1), "--text")
    if len(text) > max_chars:
        raise ValueError(f"--text {str(path)!r} has more than --max-chars {max_chars:,} characters; raise "
                         "--max-chars (memory: about 4 bytes per character)")
    crlf = text.count("\r\n")
    if "\r" in text:
        lone = text.count("\r") - crlf
        text = text.replace("\r\n", "\n").replace("\r", "\n")
        print(f"attncourse: note: {str(path)!r}: line ends read as '\\n' ({crlf:,} CRLF, {lone:,} CR)",
              file=sys.stderr, flush=True)
    return text


def _read_vocab(path: Path) -> Vocabulary:
    """The vocabulary a run's ``vocab.json`` holds; ValueError naming the file if it holds none."""
    try:
        return Vocabulary.from_dict(read_run_json(path))
    except (OSError, UnicodeDecodeError, ValueError, TypeError, KeyError, AttributeError) as err:
        reason = " ".join(str(err).split())[:200] or type(err).__name__
        raise ValueError(f"{path} is not a vocabulary written by train-lm ({reason})") from None


def _validate_resume(out: Path, config: LMConfig, vocab: Vocabulary) -> None:
    """Raise ValueError unless ``out``'s checkpoint continues with ``config`` and ``vocab``; before any write.

    A run continues with more ``--steps`` (as ``train --epochs N``); any other
    difference is named.
    """
    vocab_path = out / VOCAB_NAME
    if vocab_path.is_file() and _read_vocab(vocab_path) != vocab:
        raise ValueError(f"--resume: the characters of this text differ from the run's {VOCAB_NAME}; "
                         "give the same --text and --valid-fraction")
    if not (out / CHECKPOINT_NAME).is_file():
        return  # killed before its first checkpoint: starts from the beginning
    saved = load_checkpoint(out / CHECKPOINT_NAME)
    saved_config = saved["extra"].get("config")
    if not isinstance(saved_config, dict):
        raise ValueError(f"--resume: {out / CHECKPOINT_NAME} is not a checkpoint of train-lm")
    current = json.loads(json.dumps(lm_run_settings(config)))
    problems = differences({k: v for k, v in saved_config.items() if k != "steps"},
                           {k: v for k, v in current.items() if k != "steps"}, "")
    if problems:
        listed = "; ".join(p.strip().replace(" in this run", " in this command") for p in problems)
        raise ValueError(f"--resume: {out} was trained with other settings ({listed}); give the same "
                         "settings, or --overwrite to start again")
    done = len(saved["history"]) * config.steps_per_epoch
    if done >= config.steps:
        raise ValueError(f"--resume: {out} holds {done} steps already; raise --steps to train longer")


def run_train_lm(args: argparse.Namespace) -> int:
    """The ``train-lm`` sub-command; returns the exit status.

    Everything is checked (text, settings, memory, the run to resume) before the
    first file is written; ``config.json`` is written first and lists the run's
    files. The run folder is locked while the run writes into it
    (:func:`~attncourse.cli.outputs.locked_run_dir`): a second run into the same
    ``--out`` stops with one line.
    """
    torch.set_num_threads(args.threads)
    out: Path = args.out
    with ExitStack() as stack:
        if not (out.exists() and not out.is_dir()):
            stack.enter_context(locked_run_dir(out))
        # checked again under the lock: another run may have written there since the options were checked
        problem = out_dir_problem(out, args.resume, args.overwrite, LM_RUN_FILES, "train-lm")
        if problem:
            raise ValueError(problem)
        return _train_lm(args, out)


def _train_lm(args: argparse.Namespace, out: Path) -> int:
    text = _read_text(args.text, args.max_chars)
    # the text (1-4 bytes a character), its ids (2 or 4 bytes) and the encoding's chunks
    validate_memory(TEXT_BYTES_PER_CHAR * len(text), f"--text ({len(text):,} characters)")
    digest = text_digest(text)
    n_chars = len(text)
    corpus = char_corpus(text, args.valid_fraction, compact=True)
    del text  # the ids are all training needs
    if corpus.train.numel() <= args.context or corpus.valid.numel() <= args.context:
        raise ValueError(f"the text has {n_chars} characters: too few for windows of --context {args.context} "
                         f"in both its training and held-out parts")
    # the settings and the model, each made and checked once, before anything is written
    fields = {f.name for f in dataclasses.fields(LMConfig)} - {"corpus"}
    config = LMConfig(**{k: v for k, v in vars(args).items() if k in fields}, corpus=digest)
    spec = lm_spec(config, len(corpus.vocab))
    validate_memory(lm_training_bytes(config, len(corpus.vocab)),
                 f"training with --batch-size {config.batch_size} and --context {config.context} "
                 f"(a vocabulary of {len(corpus.vocab):,} characters; logits and activations)")
    fresh_start = unstarted_run(out, temporaries(out, LM_RUN_FILES))
    if args.resume:
        _validate_resume(out, config, corpus.vocab)
    # checked: now write
    out.mkdir(parents=True, exist_ok=True)
    remove_temporaries(out, LM_RUN_FILES)
    if args.overwrite or (fresh_start and not args.resume):
        remove_recorded(out)
    start_manifest(out)  # every file written from here on is recorded with its digest
    write_json(out / "config.json", lm_settings(config) | {
        "command": "train-lm", "files": list(LM_RUN_FILES),
        "text": None if args.text is None else str(args.text)})
    atomic_write_text(json.dumps(corpus.vocab.to_dict(), ensure_ascii=False), out / VOCAB_NAME)
    run = train_lm(config, corpus, None, progress=not args.no_progress, device=pick_device(args.device),
                   out_dir=out, extend=args.resume, spec=spec)
    write_json(out / "history.json", run.history)
    last = run.history[-1]
    print(f"step {last['step']:.0f}: train {bits_per_char(last['train_loss']):.3f}, held-out "
          f"{last['valid_bits_per_char']:.3f} bits/char; {run.seconds:.0f} s of training; run in {out}")
    return 0


#: Bytes a character of --text may cost while train-lm holds it: the string (1-4 bytes), the training
#: part's int16 ids, the held-out part's int64 ids, the encoding's bounded chunks. Measured on a 50 MB
#: text: 2.6 bytes a character above the imports (24.5 when the whole text was held as int64 ids); checked
#: with margin.
TEXT_BYTES_PER_CHAR = 8


def lm_training_bytes(config: LMConfig, vocab_size: int) -> int:
    """Rough bytes one training step of the GPT of ``config`` holds, besides its weights (float32).

    Logits, their log-softmax and gradient: 3 x batch x context x vocabulary. Per
    layer, what backpropagation keeps: about 12 d_model + 2 d_ff numbers per token,
    and the attention weights, their softmax and dropout: 3 x heads x context^2 per
    sequence (the course's attention materialises them).
    """
    tokens = config.batch_size * config.context
    per_layer = tokens * (12 * config.d_model + 2 * config.d_ff) \
        + 3 * config.batch_size * config.num_heads * config.context ** 2
    return 4 * (3 * tokens * vocab_size + config.num_layers * per_layer)


def run_sample(args: argparse.Namespace) -> int:
    """The ``sample`` sub-command; prints the prompt and its continuation.

    The checkpoint's model sizes are checked before the model is built
    (:func:`~attncourse.cli.limits.validate_model_config`); characters the model
    never saw are refused, and it never generates ``<unk>``.
    """
    compile = getattr(args, "compile", False)
    if getattr(args, "generate", None) is not None:  # sample --model: a pretrained model
        args.generate.compile = compile
        return run_generate(args.generate)
    if compile and (args.draft is not None or args.no_cache):
        raise ValueError("--compile compiles the cached one-token step: leave out --draft and --no-cache")
    device = pick_device(args.device or "cpu")
    model, vocab = _load_lm(args.dir, device, args.rope_scaling, args.rope_factor)
    draft = None
    if args.draft is not None:
        draft, draft_vocab = _load_lm(args.draft, device, args.rope_scaling, args.rope_factor)
        if draft_vocab != vocab:
            raise ValueError(f"--draft {str(args.draft)!r} has another vocabulary than {str(args.dir)!r} "
                             f"({len(draft_vocab)} and {len(vocab)} tokens): train both on the same text")
    prompt_chars = args.prompt.replace("\r\n", "\n").replace("\r", "\n")
    unseen = sorted({c for c in prompt_chars if vocab.id_of(c) == vocab.unk_id})
    if unseen:
        shown = ", ".join(repr(c) for c in unseen[:8]) + (", ..." if len(unseen) > 8 else "")
        raise ValueError(f"--prompt holds {len(unseen)} character(s) the model never saw in training: {shown}")
    prompt = torch.tensor(vocab.encode(list(prompt_chars)), dtype=torch.long)
    if prompt.numel() == 0:
        raise ValueError("--prompt is empty: give at least one character")
    suppress = SUPPRESSED_IDS + (vocab.unk_id,)
    with torch.no_grad():  # the prompt once through forward: guard_logits' check (the fast step has no hooks)
        model(prompt[None].to(device))
    timings: dict[str, float] = {}
    if draft is None:
        new = generate(model, prompt, args.length, temperature=args.temperature, top_k=args.top_k,
                       seed=args.seed, use_cache=not args.no_cache, suppress_ids=suppress, compile=compile,
                       timings=timings)
    else:
        new, stats = speculative_generate(model, draft, prompt, args.length, k=args.draft_tokens,
                                          temperature=args.temperature, top_k=args.top_k, seed=args.seed,
                                          suppress_ids=suppress)
    sys.stdout.write(prompt_chars + "".join(vocab.decode(new.tolist())) + "\n")
    if compile:
        print(f"attncourse: compile {timings['compile']:.1f} s; decoding {args.length} tokens "
              f"{timings['decode']:.2f} s ({args.length / max(timings['decode'], 1e-9):.1f} tokens/s)",
              file=sys.stderr, flush=True)
    if draft is not None:
        print(f"attncourse: speculative decoding, {args.draft_tokens} draft tokens per round: "
              f"{stats.accepted}/{stats.examined} draft tokens accepted ({stats.acceptance_rate:.1%}), "
              f"{stats.rounds} target passes for {stats.emitted} tokens "
              f"({stats.target_passes_per_token:.2f} per token)", file=sys.stderr, flush=True)
    return 0


def _load_lm(run: Path, device, rope_scaling: str | None = None,
             rope_factor: float = 1.0) -> tuple[GPT, Vocabulary]:
    """The GPT and vocabulary of a train-lm run directory; ValueError (one line) if they do not match.

    With ``rope_scaling``, its RoPE stretched zero-shot by ``rope_factor`` (chapter 12) for the
    run's training length (its config.json's ``context``); ValueError if it has no RoPE.
    """
    path = run / CHECKPOINT_NAME
    model, _ = load_model(path, map_location=device, validate_config=lambda c: validate_model_config(c, str(path)))
    validate_finite(model, path)
    guard_logits(model, path)
    if not isinstance(model, GPT):
        raise ValueError(f"{path} holds a {type(model).__name__}, not a model of train-lm")
    vocab = _read_vocab(run / VOCAB_NAME)
    if len(vocab) != model.spec.vocab_size:
        raise ValueError(f"{run / VOCAB_NAME} holds {len(vocab)} tokens, the model of {path} "
                         f"{model.spec.vocab_size}: they are not of the same run")
    if rope_scaling is not None:
        if model.spec.positions.kind != "rope":
            raise ValueError(f"--rope-scaling {rope_scaling}: the model of {path} has "
                             f"{model.spec.positions.kind!r} positions, not rotary ones")
        context = _read_context(run)
        positions = dataclasses.replace(model.spec.positions, rope_scaling=rope_scaling, rope_factor=rope_factor,
                                        original_len=context)
        model = with_spec(model, positions=positions)
        guard_logits(model, path)  # a copy: the hook of the loaded model is not on it
    return model, vocab


def _read_context(run: Path) -> int:
    """The training window of a train-lm run, from its config.json; ValueError (one line) if absent."""
    try:  # a FIFO or a huge file is refused in its own words (ValueError), not read
        data = read_run_bytes(run / "config.json")
    except OSError:
        data = b""
    try:
        context = json.loads(data)["context"]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise ValueError(f"--rope-scaling needs the training length: {run / 'config.json'} does not give "
                         "its 'context'") from None
    # the range of --context: 10**20 would overflow the positions' int64
    if isinstance(context, bool) or not isinstance(context, int) or LIMITS["context"].problem(context):
        shown = repr(context) if len(repr(context)) <= 40 else repr(context)[:37] + "..."
        raise ValueError(f"{run / 'config.json'}: 'context' must be a whole number from 1 to "
                         f"{LIMITS['context'].high:,} (the range of --context), got {shown}")
    return context
