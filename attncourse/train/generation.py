"""Text generation with a decoder-only model: sampling, the KV cache, and what each step costs.

Generation feeds the prompt, samples the next token from the last position's
distribution, appends it and repeats. Without a cache every step runs the
model over the whole sequence so far, t tokens at step t; with chapter 6's
:class:`~attncourse.nn.attention.KVCache` (one per layer, :meth:`GPT.init_cache
<attncourse.nn.gpt.GPT.init_cache>`) each step runs the model on the new token
only and attends over the cached keys and values. Both give the same
distributions, hence, with the same random generator, the same tokens.

Sampling: the logits are divided by a temperature T (T -> 0: greedy, T = 1: the
model's distribution) and, with top-k, all but the k most probable tokens get
probability zero (Fan, Lewis, Dauphin 2018).

References
----------
Fan, Lewis, Dauphin (2018), "Hierarchical Neural Story Generation", section 5.4 (top-k sampling).
Holtzman et al. (2020), "The Curious Case of Neural Text Degeneration" (temperature, top-k).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from attncourse.nn.gpt import GPT


def next_token_probs(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None) -> torch.Tensor:
    """softmax(logits / T), restricted to the ``top_k`` largest logits and renormalised.

    Parameters
    ----------
    logits : (..., vocab_size)
    temperature : float
        > 0.
    top_k : int, optional
        Keep the k most probable tokens (ties at the k-th logit are kept too).

    Returns
    -------
    (..., vocab_size) probabilities

    Raises
    ------
    ValueError
        If ``temperature <= 0`` or ``top_k < 1``.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    scaled = logits / temperature
    if top_k is not None:
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        kth = scaled.topk(min(top_k, scaled.shape[-1]), dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    return torch.softmax(scaled, dim=-1)


def _check_prompt(model: GPT, prompt: torch.Tensor, max_new_tokens: int) -> None:
    if prompt.dim() != 1 or prompt.numel() < 1:
        raise ValueError(f"prompt must be a non-empty 1-D tensor of token ids, got shape {tuple(prompt.shape)}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    if model.positional_encoding is not None and prompt.numel() + max_new_tokens > model.max_len:
        raise ValueError(f"{prompt.numel()} prompt tokens + {max_new_tokens} new ones do not fit the "
                         f"model's {model.max_len} positions")


@torch.no_grad()
def generate(model: GPT, prompt: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
             top_k: int | None = None, seed: int = 0, use_cache: bool = True) -> torch.Tensor:
    """Sample ``max_new_tokens`` tokens after ``prompt``.

    Parameters
    ----------
    model : GPT
    prompt : (prompt_len,) int64
    max_new_tokens : int
    temperature, top_k
        See :func:`next_token_probs`.
    seed : int
        Seeds the sampling generator: the same seed gives the same tokens, with or without cache.
    use_cache : bool
        Keep each layer's keys and values (one token per step) or recompute the whole prefix.

    Returns
    -------
    (max_new_tokens,) int64, on the CPU

    Raises
    ------
    ValueError
        If the prompt is empty or not 1-D, or the tokens would not fit a sinusoidal/learned table.
    """
    _check_prompt(model, prompt, max_new_tokens)
    model.eval()
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    sequence = prompt.to(device)[None, :]
    caches = model.init_cache(1) if use_cache else None
    feed = sequence
    new = []
    for _ in range(max_new_tokens):
        logits, _ = model(feed if use_cache else sequence, caches)
        probs = next_token_probs(logits[0, -1].float().cpu(), temperature, top_k)
        token = torch.multinomial(probs, 1, generator=generator)
        new.append(int(token))
        feed = token.to(device)[None, :]
        sequence = torch.cat([sequence, feed], dim=1)
    return torch.tensor(new, dtype=torch.long)


@torch.no_grad()
def seconds_per_token(model: GPT, prompt: torch.Tensor, max_new_tokens: int, use_cache: bool) -> torch.Tensor:
    """Wall-clock seconds of each greedy generation step (the prompt's own pass excluded).

    Returns
    -------
    (max_new_tokens,) float64 tensor
        Entry i is the time to produce the token at position ``len(prompt) + i``
        (model forward and argmax).
    """
    _check_prompt(model, prompt, max_new_tokens)
    model.eval()
    device = next(model.parameters()).device
    sequence = prompt.to(device)[None, :]
    caches = model.init_cache(1) if use_cache else None
    logits, _ = model(sequence, caches)
    token = logits[:, -1:].argmax(-1)
    times = []
    for _ in range(max_new_tokens):
        sequence = torch.cat([sequence, token], dim=1)
        start = time.perf_counter()
        logits, _ = model(token if use_cache else sequence, caches)
        token = logits[:, -1:].argmax(-1)
        times.append(time.perf_counter() - start)
    return torch.tensor(times, dtype=torch.float64)


@dataclass
class GenerationStep:
    """One step of :func:`trace_generation`.

    Attributes
    ----------
    token : int
        The token chosen (sampled, or greedy with ``temperature=None``).
    top_ids : list of int
        The ``k`` most probable next tokens, most probable first.
    top_probs : list of float
        Their probabilities under the model (temperature 1, no top-k).
    """

    token: int
    top_ids: list[int]
    top_probs: list[float]


@torch.no_grad()
def trace_generation(model: GPT, prompt: torch.Tensor, steps: int, k: int = 5) -> list[GenerationStep]:
    """Greedy generation, keeping the top-``k`` candidates and probabilities of every step (for the explorer)."""
    _check_prompt(model, prompt, steps)
    model.eval()
    device = next(model.parameters()).device
    caches = model.init_cache(1)
    feed = prompt.to(device)[None, :]
    trace = []
    for _ in range(steps):
        logits, _ = model(feed, caches)
        probs = torch.softmax(logits[0, -1].float().cpu(), dim=-1)
        top = probs.topk(k)
        token = int(top.indices[0])
        trace.append(GenerationStep(token, top.indices.tolist(), top.values.tolist()))
        feed = torch.tensor([[token]], device=device)
    return trace
