"""Serving a stream of requests: static batching against continuous batching.

Static batching takes the requests in groups of ``batch_size`` and runs each group to
its longest request: a finished row keeps its cache and its share of every forward.
Continuous batching schedules at every step (iteration-level scheduling): a finished
request leaves the batch at once and gives its blocks back to chapter 10's
:class:`~attncourse.decode.paged.BlockPool`, and a waiting request joins the next
forward. That forward is one pass over every running request (selective batching): the
projections, norms and FFN run over all their new tokens concatenated; attention is
split, the decoding requests' single queries attending in one batched call over their
gathered blocks (the keys past each one's length masked), a new request's prompt
attending causally to its own keys (its prefill).

Both decode greedily (the largest logit, no id suppressed) to ``max_new_tokens``, with
no end-of-sequence stop. A clock step is one forward; the clock skips idle steps.

References
----------
Yu et al. (2022), "Orca: A Distributed Serving System for Transformer-Based Generative
Models", OSDI, section 3 (iteration-level scheduling, selective batching) and section
4.2 (the scheduler reserves a request's maximum length before admitting it).
Kwon et al. (2023), "Efficient Memory Management for Large Language Model Serving with
PagedAttention", SOSP, sections 4.2-4.3 (blocks allocated on demand, freed at the end).
"""

from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from attncourse.decode.fast import (
    fast_path_supported,
    project_heads,
    rope_table,
    rotate_pairs,
)
from attncourse.decode.paged import BlockPool
from attncourse.nn.attend import allowed_keys, sdpa_attend
from attncourse.nn.gpt import GPT


@dataclass(frozen=True)
class Request:
    """A ``prompt`` (prompt_len,) of token ids, arriving at clock step ``arrival``.

    Raises ``ValueError`` for an empty or non-1-D integer prompt, ``max_new_tokens < 1``
    or ``arrival < 0``. Source: Kwon et al. (2023), section 6.1 (requests: input and
    output lengths, arrival times).
    """

    id: int
    prompt: torch.Tensor
    max_new_tokens: int
    arrival: int = 0

    def __post_init__(self) -> None:
        p = self.prompt
        if not (isinstance(p, torch.Tensor) and p.dim() == 1 and p.numel()) or (
                p.is_floating_point()):
            raise ValueError(f"request {self.id}: prompt must be a non-empty 1-D "
                             "tensor of token ids")
        if self.max_new_tokens < 1 or self.arrival < 0:
            raise ValueError(f"request {self.id}: max_new_tokens must be >= 1 and "
                             f"arrival >= 0, got {self.max_new_tokens}, {self.arrival}")

    @property
    def cached_tokens(self) -> int:
        """Positions cached at most: prompt + max_new_tokens - 1 (the last unfed)."""
        return self.prompt.numel() + self.max_new_tokens - 1


def request_stream(num_requests: int, vocab_size: int,
                   prompt_lengths: tuple[int, int] = (8, 64),
                   new_tokens: tuple[int, int] = (8, 64), mean_gap: float = 0.0,
                   seed: int = 0) -> list[Request]:
    """A seeded stream of requests of mixed lengths, in arrival order.

    Parameters
    ----------
    num_requests, vocab_size : int
    prompt_lengths, new_tokens : (low, high)
        Prompt lengths and ``max_new_tokens``, uniform in ``low .. high`` inclusive.
    mean_gap : float
        Mean clock steps between two arrivals (exponential gaps: a Poisson stream); 0:
        every request arrives at step 0.
    seed : int

    Returns
    -------
    list of Request, ids 0 .. num_requests - 1, prompt ids uniform in the vocabulary.

    Raises
    ------
    ValueError
        For ``num_requests < 1``, a range not ``1 <= low <= high`` or ``mean_gap < 0``.

    References
    ----------
    Kwon et al. (2023), section 6.1 (arrival times from a Poisson process).
    """
    for name, (low, high) in (("prompt_lengths", prompt_lengths),
                              ("new_tokens", new_tokens)):
        if not 1 <= low <= high:
            raise ValueError(f"{name} must be (low, high) with 1 <= low <= high, got "
                             f"{(low, high)}")
    if num_requests < 1 or not mean_gap >= 0:
        raise ValueError(f"num_requests must be >= 1 and mean_gap >= 0, got "
                         f"{num_requests} and {mean_gap}")
    g = torch.Generator().manual_seed(seed)
    clock, stream = 0.0, []
    for i in range(num_requests):
        n, m = (int(torch.randint(low, high + 1, (), generator=g))
                for low, high in (prompt_lengths, new_tokens))
        prompt = torch.randint(0, vocab_size, (n,), generator=g)
        if i and mean_gap > 0:
            clock += float(torch.empty(()).exponential_(1 / mean_gap, generator=g))
        stream.append(Request(i, prompt, m, int(clock)))
    return stream


@dataclass
class StepTrace:
    """One forward: its clock ``step``, the ``rows`` it computed, the ``running``
    (unfinished) requests' ids, the ``cache_bytes`` of keys and values held after it
    and, for continuous batching, each request's block ``tables``."""

    step: int
    rows: int
    running: tuple[int, ...]
    cache_bytes: int
    tables: dict[int, list[int]] = field(default_factory=dict)


@dataclass
class Served:
    """A stream served: ``tokens[id]`` (max_new_tokens,) int64, ``finish_step[id]`` (the
    step of its last token), the tokens ``generated``, ``forwards``, the clock's
    ``steps``, wall ``seconds``, ``peak_bytes`` of the KV cache held, ``peak_blocks``
    (continuous batching; else None) and the per-forward ``trace``."""

    tokens: dict[int, torch.Tensor]
    finish_step: dict[int, int]
    generated: int
    forwards: int
    steps: int
    seconds: float
    peak_bytes: int
    peak_blocks: int | None
    trace: list[StepTrace]

    @property
    def tokens_per_second(self) -> float:
        """Tokens generated per wall second."""
        return self.generated / self.seconds


def _check(model: GPT, requests: list[Request], **sizes: int) -> list[Request]:
    """The requests in arrival order; ``ValueError`` for a bad size, id or token."""
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if not requests or len({r.id for r in requests}) != len(requests):
        raise ValueError("requests must be non-empty, with distinct ids")
    for r in requests:
        if not 0 <= int(r.prompt.min()) <= int(r.prompt.max()) < model.vocab_size:
            raise ValueError(f"request {r.id}: token ids must lie in 0 .. "
                             f"{model.vocab_size - 1}")
        if model.positional_encoding is not None and r.cached_tokens > model.max_len:
            raise ValueError(f"request {r.id}: {r.cached_tokens} positions pass "
                             f"max_len={model.max_len}")
    model.eval()
    return sorted(requests, key=lambda r: (r.arrival, r.id))


@torch.no_grad()
def static_batching(model: GPT, requests: list[Request], batch_size: int) -> Served:
    """Serve ``requests`` in groups of ``batch_size`` (arrival order), each to its end.

    A group starts when its last request has arrived and the group before is done. Its
    prompts are left-padded to the longest, the pads masked as keys (a position table
    reads each row's own positions; RoPE and ALiBi see only relative positions, so one
    row of positions serves all). The group then decodes through :meth:`GPT.forward`
    with one contiguous cache (rows, num_kv_heads, cache_len, d_k) per layer until its
    longest request is done: a finished row is still computed and keeps its cache.

    Returns
    -------
    Served ; ``peak_blocks`` None.

    Raises
    ------
    ValueError
        If ``batch_size`` is not a positive int, ``requests`` is empty or repeats an id,
        a token id lies outside the vocabulary, or a request passes a position table.

    References
    ----------
    Yu et al. (2022), section 3 (request-level scheduling: a finished request waits for
    its batch's longest).
    """
    order = _check(model, requests, batch_size=batch_size)
    device, per_token = model.embedding.weight.device, model.cache_bytes_per_token()
    out = Served({}, {}, sum(r.max_new_tokens for r in order), 0, 0, 0.0, 0, None, [])
    start, clock = time.perf_counter(), 0
    for first in range(0, len(order), batch_size):
        group = order[first:first + batch_size]
        clock = max(clock, max(r.arrival for r in group))
        width = max(r.prompt.numel() for r in group)
        pads = torch.tensor([width - r.prompt.numel() for r in group], device=device)
        feed = torch.stack([F.pad(r.prompt, (width - r.prompt.numel(), 0))
                            for r in group]).to(device)
        keys = (torch.arange(width, device=device) >= pads[:, None])[:, None, None, :]
        caches, rows = model.init_cache(len(group)), [[] for _ in group]
        for t in range(max(r.max_new_tokens for r in group)):
            positions = None
            if model.positional_encoding is not None:  # a pad's (< 0) reads row 0
                positions = (torch.arange(feed.shape[1], device=device) + len(caches[0])
                             - pads[:, None]).clamp(min=0)
            logits = model(feed, caches, mask=keys, positions=positions)[0][:, -1]
            feed = logits.argmax(-1, keepdim=True)
            keys = torch.cat([keys, keys.new_ones(len(group), 1, 1, 1)], dim=-1)
            for row, r, token in zip(rows, group, feed[:, 0].tolist()):
                if t < r.max_new_tokens:
                    row.append(token)
                if t + 1 == r.max_new_tokens:
                    out.finish_step[r.id] = clock
            running = tuple(r.id for r in group if t < r.max_new_tokens)
            held = len(group) * len(caches[0]) * per_token
            out.trace.append(StepTrace(clock, len(group), running, held))
            out.forwards, clock = out.forwards + 1, clock + 1
        for r, row in zip(group, rows):
            out.tokens[r.id] = torch.tensor(row, dtype=torch.long)
    out.seconds, out.steps = time.perf_counter() - start, clock
    out.peak_bytes = max(s.cache_bytes for s in out.trace)
    return out


@dataclass
class _Running:
    """A request in the continuous batch: its block table, cached length, tokens."""

    request: Request
    blocks_needed: int
    table: list[int] = field(default_factory=list)
    length: int = 0
    tokens: list[int] = field(default_factory=list)


def _paged_forward(model: GPT, pool: BlockPool, rope: list, decoding: list[_Running],
                   prefilling: list[_Running]) -> torch.Tensor:
    """One forward over the running requests: next-token logits (requests, vocab_size).

    ``decoding`` feed their last token, ``prefilling`` their prompt; the new keys and
    values go into the pool through each request's block table. Source: Yu et al.
    (2022), section 3 (selective batching); Kwon et al. (2023), section 4.3.
    """
    device, size, n_dec = pool.k.device, pool.block_size, len(decoding)
    feeds = [torch.tensor(s.tokens[-1:]) for s in decoding]
    feeds += [s.request.prompt for s in prefilling]
    counts = [len(f) for f in feeds]
    positions, blocks = [], []
    for s, n in zip(decoding + prefilling, counts):
        while len(s.table) * size < s.length + n:  # a block on demand
            s.table.append(pool.allocate())
        positions += range(s.length, s.length + n)
        blocks += [s.table[p // size] for p in range(s.length, s.length + n)]
        s.length += n
    positions = torch.tensor(positions, device=device)
    blocks, slots = torch.tensor(blocks, device=device), positions % size
    if n_dec:  # the tables padded to the longest with a real block, its keys masked
        width = max(len(s.table) for s in decoding)
        tables = torch.tensor([s.table + s.table[:1] * (width - len(s.table))
                               for s in decoding], device=device)
        lengths = torch.tensor([s.length for s in decoding], device=device)
        visible = torch.arange(width * size, device=device) < lengths[:, None]
        visible = visible[:, None, None, :]  # (rows, 1, 1, width * block_size)
    x = F.embedding(torch.cat(feeds).to(device), model.embedding.weight)[None]
    if model.spec.scale_embedding:
        x = x * math.sqrt(model.d_model)
    if model.positional_encoding is not None:
        table = getattr(model.positional_encoding, "pe", None)  # sinusoidal, or:
        if table is None:
            table = model.positional_encoding.embedding.weight
        x = x + table[positions]
    for i, block in enumerate(model.blocks):  # x: (1, tokens, d_model)
        attn = block.attn
        h = block.attn_norm(x)
        q = project_heads(attn.w_q, h, attn.num_heads)  # (1, num_heads, tokens, d_k)
        k = project_heads(attn.w_k, h, attn.num_kv_heads)
        v = project_heads(attn.w_v, h, attn.num_kv_heads)
        if rope[i] is not None:
            cos, sin = rope[i][0][positions], rope[i][1][positions]
            q, k = rotate_pairs(q, cos, sin), rotate_pairs(k, cos, sin)
        pool.k[i][blocks, :, slots] = k[0].transpose(0, 1)  # (tokens, kv heads, d_k)
        pool.v[i][blocks, :, slots] = v[0].transpose(0, 1)
        parts = []
        if n_dec:  # keys (rows, num_kv_heads, width * block_size, d_k), one query a row
            k_dec = pool.k[i][tables].transpose(1, 2).flatten(2, 3)
            v_dec = pool.v[i][tables].transpose(1, 2).flatten(2, 3)
            heads = F.scaled_dot_product_attention(
                q[0, :, :n_dec, None].transpose(0, 1), k_dec, v_dec, attn_mask=visible,
                enable_gqa=attn.num_kv_heads != attn.num_heads)
            parts.append(heads[:, :, 0].transpose(0, 1)[None])
        start = n_dec
        for n in counts[n_dec:]:  # a prompt attends causally to its own keys
            span = slice(start, start + n)
            allowed = allowed_keys(n, n, True, device=device)
            parts.append(sdpa_attend(q[:, :, span], k[:, :, span], v[:, :, span],
                                     allowed, None, is_causal=True))
            start += n
        x = x + attn.output(h, torch.cat(parts, dim=2))
        if block.ffn is not None:
            x = x + block.ffn(block.ffn_norm(x))
    last = torch.tensor(counts, device=device).cumsum(0) - 1
    return model.output_proj(model.final_norm(x[0, last]))


@torch.no_grad()
def continuous_batching(model: GPT, requests: list[Request], max_batch: int,
                        block_size: int, num_blocks: int) -> Served:
    """Serve ``requests`` with iteration-level scheduling over a paged KV cache.

    At each clock step: admit the waiting requests that have arrived, first come first
    served, while the batch holds fewer than ``max_batch`` and the pool can reserve
    ``ceil(cached_tokens / block_size)`` blocks for the next one beside the running
    requests' reservations (so the pool never runs out and nothing is preempted); run
    one forward: the newcomers' prefill and one token of every running request; free a
    finished request's blocks at once. Blocks are taken as the tokens come.

    Parameters
    ----------
    model : GPT
        Attention: causal ``"gqa"`` without a window, with RoPE, no positions or a
        position table (:func:`~attncourse.decode.fast.fast_path_supported`).
    requests : list of Request
    max_batch : int
        Requests in one forward, at most.
    block_size, num_blocks : int
        Tokens per block and blocks in the pool: keys (num_layers, num_blocks,
        num_kv_heads, block_size, d_k), as many values.

    Returns
    -------
    Served ; ``peak_blocks``: the most blocks held after a forward, ``peak_bytes``
    their bytes (a partly filled block counts whole).

    Raises
    ------
    ValueError
        If a size is not a positive int, ``requests`` is empty or repeats an id, a token
        id lies outside the vocabulary, a request passes a position table or needs more
        than ``num_blocks`` blocks, or the model's attention is not supported.

    References
    ----------
    Yu et al. (2022), sections 3 and 4.2; Kwon et al. (2023), sections 4.2-4.3.
    """
    order = _check(model, requests, max_batch=max_batch, block_size=block_size,
                   num_blocks=num_blocks)
    if not fast_path_supported(model):
        raise ValueError("model: continuous_batching runs causal 'gqa' attention "
                         "without a window, with RoPE, no or table positions")
    pool = BlockPool.for_model(model, num_blocks, block_size)
    need = {r.id: math.ceil(r.cached_tokens / block_size) for r in order}
    too_big = [r.id for r in order if need[r.id] > num_blocks]
    if too_big:
        raise ValueError(f"num_blocks={num_blocks}: request {too_big[0]} needs "
                         f"{need[too_big[0]]} blocks of {block_size} tokens")
    weight, capacity = model.embedding.weight, max(r.cached_tokens for r in order)
    rope = [rope_table(b.attn, capacity, weight.dtype, weight.device)
            if b.attn.positional == "rope" else None for b in model.blocks]
    block_bytes = block_size * model.cache_bytes_per_token()
    out = Served({}, {}, sum(r.max_new_tokens for r in order), 0, 0, 0.0, 0, 0, [])
    waiting, running, reserved = deque(order), [], 0
    start, clock = time.perf_counter(), 0
    while waiting or running:
        if not running:
            clock = max(clock, waiting[0].arrival)
        new = []
        while (waiting and waiting[0].arrival <= clock
               and len(running) + len(new) < max_batch
               and reserved + need[waiting[0].id] <= num_blocks):
            request = waiting.popleft()
            reserved += need[request.id]
            new.append(_Running(request, need[request.id]))
        logits = _paged_forward(model, pool, rope, running, new)
        running += new
        for s, token in zip(running, logits.argmax(-1).tolist()):
            s.tokens.append(token)
        tables, used = {s.request.id: list(s.table) for s in running}, pool.used
        out.trace.append(StepTrace(clock, len(running), tuple(tables),
                                   used * block_bytes, tables))
        out.peak_blocks = max(out.peak_blocks, used)
        for s in [s for s in running if len(s.tokens) == s.request.max_new_tokens]:
            for b in s.table:  # back to the free list at once
                pool.release(b)
            reserved -= s.blocks_needed
            running.remove(s)
            out.tokens[s.request.id] = torch.tensor(s.tokens, dtype=torch.long)
            out.finish_step[s.request.id] = clock
        out.forwards, clock = out.forwards + 1, clock + 1
    out.seconds, out.steps = time.perf_counter() - start, clock
    out.peak_bytes = out.peak_blocks * block_bytes
    return out


__all__ = ["Request", "Served", "StepTrace", "continuous_batching", "request_stream",
           "static_batching"]
