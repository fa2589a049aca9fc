"""Serving a stream of requests: static batching against continuous batching.

Static batching takes the requests in groups of ``batch_size`` and runs each group to
its longest request: a finished row keeps its cache and its share of every forward.
Continuous batching schedules at every step (iteration-level scheduling): a finished
request leaves the batch at once and gives its blocks back to chapter 10's
:class:`~attncourse.decode.paged.BlockPool`, and a waiting request joins the next
forward. That forward is one batched pass over all running requests (selective
batching): the projections, norms and FFN run over the tokens of every request
concatenated; attention is split, the decoding requests' one query each attending in one
batched call over their gathered blocks (keys past a request's length masked), a new
request's prompt attending causally over its own keys (its prefill).

Both decode greedily (the largest logit, no id suppressed) to ``max_new_tokens``, with
no end-of-sequence stop. A clock step is one forward; the clock jumps over the steps in
which nothing has arrived.

References
----------
Yu et al. (2022), "Orca: A Distributed Serving System for Transformer-Based Generative
Models", OSDI, sections 3.1-3.2 (iteration-level scheduling, selective batching) and 4.2
(the scheduler reserves a request's maximum length before it admits it).
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

from attncourse.decode.fast import _heads, _rope_table, _rotate, fast_path_supported
from attncourse.decode.paged import BlockPool
from attncourse.nn.attend import allowed_keys, sdpa_attend
from attncourse.nn.gpt import GPT


@dataclass(frozen=True)
class Request:
    """One request: ``prompt`` (prompt_len,) token ids, arriving at clock step ``arrival``.

    Raises ``ValueError`` for an empty or non-1-D integer prompt, ``max_new_tokens < 1``
    or ``arrival < 0``. Source: Yu et al. (2022), section 2.1 (a request: input tokens
    and a maximum number of output tokens).
    """

    id: int
    prompt: torch.Tensor
    max_new_tokens: int
    arrival: int = 0

    def __post_init__(self) -> None:
        p = self.prompt
        if not isinstance(p, torch.Tensor) or p.dim() != 1 or p.numel() < 1 or p.is_floating_point():
            raise ValueError(f"request {self.id}: prompt must be a non-empty 1-D tensor of token ids")
        if self.max_new_tokens < 1 or self.arrival < 0:
            raise ValueError(f"request {self.id}: max_new_tokens must be >= 1 and arrival >= 0, got "
                             f"{self.max_new_tokens} and {self.arrival}")

    @property
    def cached_tokens(self) -> int:
        """Positions its cache holds at most: prompt + max_new_tokens - 1 (the last is never fed)."""
        return self.prompt.numel() + self.max_new_tokens - 1


def request_stream(num_requests: int, vocab_size: int, prompt_lengths: tuple[int, int] = (8, 64),
                   new_tokens: tuple[int, int] = (8, 64), mean_gap: float = 0.0,
                   seed: int = 0) -> list[Request]:
    """A seeded stream of requests of mixed lengths, in arrival order.

    Parameters
    ----------
    num_requests, vocab_size : int
    prompt_lengths, new_tokens : (low, high)
        Prompt lengths and ``max_new_tokens``, uniform in ``low .. high`` (inclusive).
    mean_gap : float
        Mean clock steps between two arrivals (exponential gaps, a Poisson stream); 0:
        every request arrives at step 0.
    seed : int

    Returns
    -------
    list of Request, ids 0 .. num_requests - 1, prompt ids uniform in 0 .. vocab_size - 1.

    Raises ``ValueError`` for ``num_requests < 1``, a range with ``low < 1`` or ``low >
    high``, or ``mean_gap < 0``. Source: Kwon et al. (2023), section 6.1 (requests'
    arrival times from a Poisson distribution).
    """
    for name, (low, high) in (("prompt_lengths", prompt_lengths), ("new_tokens", new_tokens)):
        if not 1 <= low <= high:
            raise ValueError(f"{name} must be (low, high) with 1 <= low <= high, got {(low, high)}")
    if num_requests < 1 or not mean_gap >= 0:
        raise ValueError(f"num_requests must be >= 1 and mean_gap >= 0, got {num_requests}, {mean_gap}")
    g = torch.Generator().manual_seed(seed)
    clock, stream = 0.0, []
    for i in range(num_requests):
        n = int(torch.randint(prompt_lengths[0], prompt_lengths[1] + 1, (), generator=g))
        m = int(torch.randint(new_tokens[0], new_tokens[1] + 1, (), generator=g))
        prompt = torch.randint(0, vocab_size, (n,), generator=g)
        if i and mean_gap > 0:
            clock += float(torch.empty(()).exponential_(1 / mean_gap, generator=g))
        stream.append(Request(i, prompt, m, int(clock)))
    return stream


@dataclass
class StepTrace:
    """One forward: its clock ``step``, ``rows`` computed, ``running`` ids (unfinished),
    ``cache_bytes`` of keys and values held after it, each request's block ``tables``
    (continuous batching only)."""

    step: int
    rows: int
    running: tuple[int, ...]
    cache_bytes: int
    tables: dict[int, list[int]] = field(default_factory=dict)


@dataclass
class Served:
    """A stream served: ``tokens[id]`` (max_new_tokens,) int64, ``finish_step[id]``, the
    tokens ``generated``, ``forwards``, the clock's last ``steps``, wall ``seconds``,
    ``peak_bytes`` of the KV cache, ``peak_blocks`` (continuous only) and the ``trace``."""

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
            raise ValueError(f"request {r.id}: token ids must lie in 0 .. {model.vocab_size - 1}")
        if model.positional_encoding is not None and r.cached_tokens > model.max_len:
            raise ValueError(f"request {r.id}: {r.cached_tokens} positions pass max_len={model.max_len}")
    model.eval()
    return sorted(requests, key=lambda r: (r.arrival, r.id))


@torch.no_grad()
def static_batching(model: GPT, requests: list[Request], batch_size: int) -> Served:
    """Serve ``requests`` in groups of ``batch_size`` (arrival order), each to its end.

    A group starts when its last request has arrived and the previous group is done. Its
    prompts are left-padded to the longest (the pads masked as keys; a position table
    reads each row's own positions, RoPE's relative angles need no shift), then the
    group decodes through :meth:`GPT.forward` with one contiguous cache of (rows,
    num_kv_heads, cache_len, d_k) per layer until its longest request is done: a
    finished row is still computed and keeps its cache.

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
    Yu et al. (2022), section 2.2 (request-level scheduling: a batch runs until its
    longest request is done).
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
        feed = torch.stack([F.pad(r.prompt, (width - r.prompt.numel(), 0)) for r in group]).to(device)
        keys = (torch.arange(width, device=device)[None, :] >= pads[:, None])[:, None, None, :]
        caches, table = model.init_cache(len(group)), model.positional_encoding
        rows: list[list[int]] = [[] for _ in group]
        for t in range(max(r.max_new_tokens for r in group)):
            positions = None
            if table is not None:  # each row's own positions; a pad's (negative) one reads row 0
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
            out.trace.append(StepTrace(clock, len(group), running, len(group) * len(caches[0]) * per_token))
            out.forwards, clock = out.forwards + 1, clock + 1
        for r, row in zip(group, rows):
            out.tokens[r.id] = torch.tensor(row, dtype=torch.long)
    out.seconds, out.steps = time.perf_counter() - start, clock
    out.peak_bytes = max(s.cache_bytes for s in out.trace)
    return out


class _Running:
    """A request in the continuous batch: its block table, cached length, tokens."""

    def __init__(self, request: Request, blocks_needed: int) -> None:
        self.request, self.blocks_needed = request, blocks_needed
        self.table: list[int] = []
        self.length = 0
        self.tokens: list[int] = []


def _paged_forward(model: GPT, pool: BlockPool, rope: list, decoding: list[_Running],
                   prefilling: list[_Running]) -> torch.Tensor:
    """One forward over every running request; next-token logits (requests, vocab_size).

    ``decoding`` feed their last token, ``prefilling`` their prompt; the new keys and
    values are written to the pool through each request's block table. Source: Yu et
    al. (2022), section 3.2 (selective batching); Kwon et al. (2023), section 4.3.
    """
    device, size, n_dec = pool.k.device, pool.block_size, len(decoding)
    feeds = [torch.tensor([s.tokens[-1]]) for s in decoding] + [s.request.prompt for s in prefilling]
    counts = [len(f) for f in feeds]
    positions, blocks = [], []
    for s, n in zip(decoding + prefilling, counts):
        while len(s.table) * size < s.length + n:  # a block on demand (vLLM, section 4.2)
            s.table.append(pool.allocate())
        positions += range(s.length, s.length + n)
        blocks += [s.table[p // size] for p in range(s.length, s.length + n)]
        s.length += n
    positions = torch.tensor(positions, device=device)
    blocks, slots = torch.tensor(blocks, device=device), positions % size
    if n_dec:  # the decoding rows' tables padded to the longest, the keys past a row's length masked
        width = max(len(s.table) for s in decoding)
        tables = torch.tensor([s.table + s.table[:1] * (width - len(s.table)) for s in decoding],
                              device=device)
        lengths = torch.tensor([s.length for s in decoding], device=device)
        visible = (torch.arange(width * size, device=device) < lengths[:, None])[:, None, None, :]
    x = F.embedding(torch.cat(feeds).to(device), model.embedding.weight)[None]  # (1, tokens, d_model)
    if model.spec.scale_embedding:
        x = x * math.sqrt(model.d_model)
    if model.positional_encoding is not None:
        table = getattr(model.positional_encoding, "pe", None)  # sinusoidal, else learned
        x = x + (model.positional_encoding.embedding.weight if table is None else table)[positions]
    for i, block in enumerate(model.blocks):
        attn = block.attn
        h = block.attn_norm(x)
        q, k, v = (_heads(w, h, n) for w, n in ((attn.w_q, attn.num_heads), (attn.w_k, attn.num_kv_heads),
                                                 (attn.w_v, attn.num_kv_heads)))
        if rope[i] is not None:
            cos, sin = rope[i][0][positions], rope[i][1][positions]
            q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        pool.k[i][blocks, :, slots] = k[0].transpose(0, 1)  # (tokens, num_kv_heads, d_k)
        pool.v[i][blocks, :, slots] = v[0].transpose(0, 1)
        parts = []
        if n_dec:  # (rows, num_kv_heads, width * block_size, d_k), one query per row
            k_dec, v_dec = (store[i][tables].transpose(1, 2).flatten(2, 3) for store in (pool.k, pool.v))
            q_dec = q[0, :, :n_dec, None].transpose(0, 1)  # (rows, num_heads, 1, d_k)
            heads = F.scaled_dot_product_attention(q_dec, k_dec, v_dec, attn_mask=visible,
                                                   enable_gqa=attn.num_kv_heads != attn.num_heads)
            parts.append(heads[:, :, 0].transpose(0, 1)[None])
        start = n_dec
        for n in counts[n_dec:]:  # a prompt attends causally to its own keys
            span = slice(start, start + n)
            parts.append(sdpa_attend(q[:, :, span], k[:, :, span], v[:, :, span],
                                     allowed_keys(n, n, True, device=device), None, is_causal=True))
            start += n
        x = x + attn.output(h, torch.cat(parts, dim=2))
        if block.ffn is not None:
            x = x + block.ffn(block.ffn_norm(x))
    last = torch.tensor(counts, device=device).cumsum(0) - 1
    return model.output_proj(model.final_norm(x[0, last]))


@torch.no_grad()
def continuous_batching(model: GPT, requests: list[Request], max_batch: int, block_size: int,
                        num_blocks: int) -> Served:
    """Serve ``requests`` with iteration-level scheduling over a paged KV cache.

    At each clock step: admit the waiting requests that have arrived, first come first
    served, while the batch holds fewer than ``max_batch`` and the pool can reserve
    ``ceil(request.cached_tokens / block_size)`` blocks for each beyond the running
    requests' reservations (so the pool never runs out and no request is preempted);
    run one forward (:func:`_paged_forward`): the newcomers' prefill and one token for
    every running request; free a finished request's blocks at once.

    Parameters
    ----------
    model : GPT
        Attention: chapter 7's causal ``"gqa"`` without a window, with RoPE, no
        positions or a position table (:func:`~attncourse.decode.fast.fast_path_supported`).
    requests : list of Request
    max_batch : int
        Requests in one forward, at most.
    block_size, num_blocks : int
        Tokens per block, blocks in the pool: (num_layers, num_blocks, num_kv_heads,
        block_size, d_k) keys, as many values.

    Returns
    -------
    Served ; ``peak_blocks`` the most blocks held after a forward, ``peak_bytes`` their
    bytes (a last block partly filled counts whole).

    Raises
    ------
    ValueError
        If a size is not a positive int, ``requests`` is empty or repeats an id, a token
        id lies outside the vocabulary, a request passes a position table or needs more
        than ``num_blocks`` blocks, or the model's attention is not supported.

    References
    ----------
    Yu et al. (2022), sections 3.1-3.2 and 4.2; Kwon et al. (2023), sections 4.2-4.3.
    """
    order = _check(model, requests, max_batch=max_batch, block_size=block_size, num_blocks=num_blocks)
    if not fast_path_supported(model):
        raise ValueError("model: continuous_batching runs causal 'gqa' attention without a window, with "
                         "RoPE, no positions or a position table")
    pool = BlockPool.for_model(model, num_blocks, block_size)
    need = {r.id: math.ceil(r.cached_tokens / block_size) for r in order}
    too_big = [r.id for r in order if need[r.id] > num_blocks]
    if too_big:
        raise ValueError(f"num_blocks={num_blocks}: request {too_big[0]} needs {need[too_big[0]]} "
                         f"blocks of {block_size} tokens")
    weight = model.embedding.weight
    capacity = max(r.cached_tokens for r in order)
    rope = [_rope_table(b.attn, capacity, weight.dtype, weight.device) if b.attn.positional == "rope"
            else None for b in model.blocks]
    block_bytes = block_size * model.cache_bytes_per_token()
    out = Served({}, {}, sum(r.max_new_tokens for r in order), 0, 0, 0.0, 0, 0, [])
    waiting, running, reserved = deque(order), [], 0
    start, clock = time.perf_counter(), 0
    while waiting or running:
        if not running:
            clock = max(clock, waiting[0].arrival)
        new = []
        while (waiting and waiting[0].arrival <= clock and len(running) + len(new) < max_batch
               and reserved + need[waiting[0].id] <= num_blocks):
            request = waiting.popleft()
            reserved += need[request.id]
            new.append(_Running(request, need[request.id]))
        logits = _paged_forward(model, pool, rope, running, new)
        running += new
        for s, token in zip(running, logits.argmax(-1).tolist()):
            s.tokens.append(token)
        out.trace.append(StepTrace(clock, len(running), tuple(s.request.id for s in running),
                                   pool.used * block_bytes, {s.request.id: list(s.table) for s in running}))
        out.peak_blocks = max(out.peak_blocks, pool.used)
        for s in [s for s in running if len(s.tokens) == s.request.max_new_tokens]:
            for b in s.table:  # its blocks go back to the free list at once
                pool.release(b)
            reserved -= s.blocks_needed
            running.remove(s)
            out.tokens[s.request.id] = torch.tensor(s.tokens, dtype=torch.long)
            out.finish_step[s.request.id] = clock
        out.forwards, clock = out.forwards + 1, clock + 1
    out.seconds, out.steps = time.perf_counter() - start, clock
    out.peak_bytes = out.peak_blocks * block_bytes
    return out


__all__ = ["Request", "Served", "StepTrace", "continuous_batching", "request_stream", "static_batching"]
