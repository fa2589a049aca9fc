"""A paged KV cache: keys and values in fixed-size blocks of a shared pool, read through a block table.

The serving systems before vLLM reserve, for every request, one contiguous chunk
with room for the longest sequence it might reach (Kwon et al. 2023, section 3);
most of that room is never used. (Chapter 6's
:class:`~attncourse.nn.attention.KVCache` reserves nothing but grows by
``torch.cat``, copying the whole cache at every step.) PagedAttention (Kwon
et al. 2023, section 4) manages the cache like virtual memory: a *pool* of
physical blocks of ``block_size`` tokens each, allocated one at a time as a
sequence grows, and per sequence a *block table* mapping its logical blocks
(token t lies in logical block t // B, slot t % B) to physical ones. Attention
reads the keys and values through the table. Only the last block of a sequence
can be partly empty, so at most B - 1 slots per sequence are wasted.

Blocks are reference-counted, so several sequences can share them: samples
drawn from one prompt share the prompt's blocks (section 4.4, parallel
sampling); the first write into a shared block copies it first
(copy-on-write), which happens only to the last, partly filled block.

:class:`BlockPool` holds the storage of every layer and the free list;
:class:`PagedSequence` one sequence's block table; :meth:`PagedSequence.layers`
gives, per layer, a view with the interface of chapter 6's
:class:`~attncourse.nn.attention.KVCache` (``k``, ``v``, ``append``, ``len``), so
:class:`~attncourse.nn.gpt.GPT` runs unchanged on it. :func:`serve_greedy`
serves a batch of requests step by step from one pool and records the pool's
state at every step (for the explorer); if a request fails (the pool runs out),
it gives every block back before raising.

The pool trusts no block id: ids outside ``0 .. num_blocks - 1`` (negative ones
included, which Python would silently wrap around), sharing or copying a free block,
releasing a block twice, and block tables holding such ids or one block twice all
raise a one-line ``ValueError``.

References
----------
Kwon et al. (2023), "Efficient Memory Management for Large Language Model
Serving with PagedAttention", sections 4.1-4.4.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch

from attncourse.nn.gpt import GPT


class BlockPool:
    """Physical KV blocks shared by all sequences, with reference counts and a free list.

    Parameters
    ----------
    num_blocks : int
        Blocks in the pool.
    block_size : int
        B, tokens per block.
    num_layers, num_kv_heads, d_k : int
        The model's cache shape (:meth:`for_model`).
    dtype : torch.dtype
    device : optional

    Attributes
    ----------
    k, v : (num_layers, num_blocks, num_kv_heads, block_size, d_k)
        The storage.
    ref_counts : list of int
        Sequences using each block (0 = free).

    Raises
    ------
    ValueError
        If a size is not a positive int (e.g. ``block_size=0``); from the methods, if a
        block id is not one of the pool's, or names a free block (released twice, shared
        or copied after its release).
    """

    def __init__(self, num_blocks: int, block_size: int, num_layers: int, num_kv_heads: int, d_k: int,
                 dtype: torch.dtype = torch.float32, device=None) -> None:
        for name, value in (("num_blocks", num_blocks), ("block_size", block_size),
                            ("num_layers", num_layers), ("num_kv_heads", num_kv_heads), ("d_k", d_k)):
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.block_size = int(block_size)
        shape = (int(num_layers), int(num_blocks), int(num_kv_heads), self.block_size, int(d_k))
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.ref_counts = [0] * int(num_blocks)
        self._free = list(range(int(num_blocks)))[::-1]  # pop() hands out block 0 first

    @classmethod
    def for_model(cls, model: GPT, num_blocks: int, block_size: int) -> BlockPool:
        """A pool shaped for ``model``'s layers and key/value heads.

        Raises
        ------
        ValueError
            If the model's attention keeps anything but keys and values (MLA's latent, a
            memory attention's state).
        """
        attn = model.blocks[0].attn
        kind = attn.empty_cache(1).kind
        if kind != "keys and values":
            raise ValueError(f"the paged cache holds keys and values, and this model's attention "
                             f"keeps a {kind}: build it for a model with softmax attention and no "
                             "latent_dim")
        weight = model.embedding.weight
        return cls(num_blocks, block_size, len(model.blocks), attn.num_kv_heads, attn.d_k,
                   weight.dtype, weight.device)

    @property
    def num_blocks(self) -> int:
        return len(self.ref_counts)

    @property
    def used(self) -> int:
        """Blocks held by at least one sequence."""
        return sum(1 for c in self.ref_counts if c)

    def allocate(self) -> int:
        """A free block's id, its count set to 1; MemoryError if the pool is exhausted."""
        if not self._free:
            raise MemoryError(f"the pool's {self.num_blocks} blocks of {self.block_size} tokens are all in use")
        block = self._free.pop()
        self.ref_counts[block] = 1
        return block

    def validate_block(self, block: int, action: str = "use") -> int:
        """``block`` as an int if it is one of the pool's blocks and held; else a one-line ValueError.

        A negative id would index the storage from its end (another sequence's block)
        and an id past the end would fail deep inside a list, so both are refused here.
        """
        try:
            if isinstance(block, bool):
                raise TypeError
            block = operator.index(block)
        except TypeError:
            raise ValueError(f"cannot {action} block {block!r}: block ids are ints") from None
        if not 0 <= block < self.num_blocks:
            raise ValueError(f"cannot {action} block {block}: the pool's blocks are "
                             f"0 .. {self.num_blocks - 1}")
        if self.ref_counts[block] == 0:
            raise ValueError(f"cannot {action} block {block}: it is free (released already, "
                             "or never allocated)")
        return block

    def validate_table(self, table: list[int]) -> None:
        """A block table's ids: each held in this pool, none twice (one-line ValueError)."""
        for block in table:
            self.validate_block(block, "read or write through")
        if len(set(table)) != len(table):
            raise ValueError(f"block table {table} holds a block twice: its sequences would "
                             "overwrite each other")

    def share(self, block: int) -> None:
        """One more sequence uses ``block`` (a held block)."""
        self.ref_counts[self.validate_block(block, "share")] += 1

    def release(self, block: int) -> None:
        """One sequence fewer uses ``block``; at 0 it returns to the free list (twice: ValueError)."""
        block = self.validate_block(block, "release")
        self.ref_counts[block] -= 1
        if self.ref_counts[block] == 0:
            self._free.append(block)

    def copy(self, block: int) -> int:
        """Copy-on-write: a new block holding ``block``'s keys and values (every layer), released once."""
        self.validate_block(block, "copy")
        new = self.allocate()
        self.k[:, new] = self.k[:, block]
        self.v[:, new] = self.v[:, block]
        self.release(block)
        return new


def block_lookup(block_table: list[int], position: int, block_size: int) -> tuple[int, int]:
    """Where token ``position`` lies: ``(physical block, slot)`` = ``(table[t // B], t % B)``.

    Raises ValueError if ``block_size < 1``, ``position < 0`` (Python would read the
    table from its end) or the position lies past the table's last block.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    if position < 0 or position // block_size >= len(block_table):
        raise ValueError(f"position {position} is outside a block table of {len(block_table)} "
                         f"blocks of {block_size} tokens")
    return block_table[position // block_size], position % block_size


class PagedSequence:
    """One sequence's block table in a :class:`BlockPool`.

    Parameters
    ----------
    pool : BlockPool

    Attributes
    ----------
    block_table : list of int
        Physical block of each logical block.
    lengths : list of int
        Tokens written, per layer (equal between forward passes).
    """

    def __init__(self, pool: BlockPool) -> None:
        self.pool = pool
        self.block_table: list[int] = []
        self.lengths = [0] * pool.k.shape[0]

    def __len__(self) -> int:
        return self.lengths[-1]

    def layers(self) -> list[PagedLayerCache]:
        """One KVCache-like view per layer, for ``GPT.forward(tokens, kv_caches=...)``."""
        return [PagedLayerCache(self, i) for i in range(len(self.lengths))]

    def fork(self) -> PagedSequence:
        """A sequence continuing this one: it shares every block (copy-on-write on the next write)."""
        child = PagedSequence(self.pool)
        child.block_table = list(self.block_table)
        child.lengths = list(self.lengths)
        for block in self.block_table:
            self.pool.share(block)
        return child

    def free(self) -> None:
        """Give every block back (a finished request)."""
        for block in self.block_table:
            self.pool.release(block)
        self.block_table = []
        self.lengths = [0] * len(self.lengths)

    def _reserve(self, start: int, count: int) -> None:
        """Blocks for positions start .. start + count - 1: allocated if missing, copied if shared."""
        self.pool.validate_table(self.block_table)
        size = self.pool.block_size
        while len(self.block_table) * size < start + count:
            self.block_table.append(self.pool.allocate())
        for logical in range(start // size, (start + count - 1) // size + 1):
            block = self.block_table[logical]
            if self.pool.ref_counts[block] > 1:
                self.block_table[logical] = self.pool.copy(block)

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Append ``k, v (1, num_kv_heads, new_len, d_k)`` to ``layer``, through the table."""
        start, count = self.lengths[layer], k.shape[2]
        self._reserve(start, count)
        for i in range(count):
            block, slot = block_lookup(self.block_table, start + i, self.pool.block_size)
            self.pool.k[layer, block, :, slot] = k[0, :, i]
            self.pool.v[layer, block, :, slot] = v[0, :, i]
        self.lengths[layer] = start + count

    def read(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of ``layer`` gathered through the table: ``(1, num_kv_heads, len, d_k)`` each."""
        n = self.lengths[layer]
        self.pool.validate_table(self.block_table)
        table = torch.tensor(self.block_table, dtype=torch.long, device=self.pool.k.device)

        def gather(store: torch.Tensor) -> torch.Tensor:
            blocks = store[layer, table]  # (n_blocks, g, B, d_k)
            return blocks.permute(1, 0, 2, 3).flatten(1, 2)[None, :, :n]

        return gather(self.pool.k), gather(self.pool.v)


@dataclass
class PagedLayerCache:
    """One layer of a :class:`PagedSequence`, with :class:`~attncourse.nn.attention.KVCache`'s interface."""

    kind = "keys and values"

    sequence: PagedSequence
    layer: int

    def __len__(self) -> int:
        return self.sequence.lengths[self.layer]

    def append(self, k: torch.Tensor, v: torch.Tensor) -> None:
        if k.shape[0] != 1:
            raise ValueError(f"a paged sequence holds one row: got a batch of {k.shape[0]}")
        self.sequence.write(self.layer, k, v)

    @property
    def k(self) -> torch.Tensor:
        return self.sequence.read(self.layer)[0]

    @property
    def v(self) -> torch.Tensor:
        return self.sequence.read(self.layer)[1]


@dataclass
class PoolState:
    """The pool after one step of :func:`serve_greedy` (what the explorer draws).

    Attributes
    ----------
    step : int
    tables : list of list of int
        Each request's block table (empty once finished, or before it started).
    lengths : list of int
        Tokens cached per request.
    ref_counts : list of int
        Per physical block.
    """

    step: int
    tables: list[list[int]]
    lengths: list[int]
    ref_counts: list[int]


@dataclass
class Served:
    """What :func:`serve_greedy` returns.

    Attributes
    ----------
    tokens : list of (new_tokens,) int64 tensors
        Each request's greedy continuation.
    logits : list of (new_tokens, vocab_size) tensors
        The logits each token was chosen from.
    states : list of PoolState
        One per step, before finished requests free their blocks (step 0: after the prompts' pass).
    peak_blocks : int
        Most blocks in use at once.
    """

    tokens: list[torch.Tensor]
    logits: list[torch.Tensor]
    states: list[PoolState] = field(default_factory=list)
    peak_blocks: int = 0


@torch.no_grad()
def serve_greedy(model: GPT, prompts: list[torch.Tensor], new_tokens: list[int], pool: BlockPool,
                 share_prefix: bool = False) -> Served:
    """Serve several requests from one paged pool, one token per request per step, greedily.

    Parameters
    ----------
    model : GPT
        Not an MLA model.
    prompts : list of (prompt_len,) int64
    new_tokens : list of int
        Tokens to generate per request (>= 1); a finished request frees its blocks.
    pool : BlockPool
    share_prefix : bool
        The requests are samples of one prompt (all prompts equal): the prompt is run
        once and its blocks shared by every request (copy-on-write on the last block).

    Returns
    -------
    Served

    Raises
    ------
    ValueError
        If the lists differ in length, a count is < 1, or ``share_prefix`` with different prompts.
    MemoryError
        If the pool runs out of blocks; every block the requests held is given back
        first (as on any other error), so the pool can serve again.
    """
    if len(prompts) != len(new_tokens) or not prompts:
        raise ValueError(f"{len(prompts)} prompts for {len(new_tokens)} token counts")
    if min(new_tokens) < 1:
        raise ValueError(f"every request generates >= 1 token, got {new_tokens}")
    if share_prefix and any(not torch.equal(p, prompts[0]) for p in prompts):
        raise ValueError("share_prefix needs every request to have the same prompt")
    model.eval()
    device = pool.k.device
    n = len(prompts)
    sequences: list[PagedSequence | None] = [None] * n
    feeds = [p.to(device)[None, :] for p in prompts]
    tokens: list[list[int]] = [[] for _ in range(n)]
    logits: list[list[torch.Tensor]] = [[] for _ in range(n)]
    served = Served([], [])

    def record(step: int) -> None:
        tables = [[] if s is None else list(s.block_table) for s in sequences]
        lengths = [0 if s is None else len(s) for s in sequences]
        served.states.append(PoolState(step, tables, lengths, list(pool.ref_counts)))
        served.peak_blocks = max(served.peak_blocks, pool.used)

    try:
        for step in range(max(new_tokens)):
            for r in range(n):
                if step >= new_tokens[r]:
                    continue
                if sequences[r] is None:
                    sequences[r] = PagedSequence(pool)
                    out, _ = model(feeds[r], sequences[r].layers())
                    if share_prefix:  # the prompt runs once; the other samples share its blocks
                        shared = out
                        for other in range(1, n):
                            sequences[other] = sequences[r].fork()
                elif share_prefix and step == 0:
                    out = shared
                else:
                    out, _ = model(feeds[r], sequences[r].layers())
                last = out[0, -1]
                token = last.argmax()
                tokens[r].append(int(token))
                logits[r].append(last.cpu())
                feeds[r] = token.view(1, 1)
            record(step)  # before the requests that are done give their blocks back
            for r in range(n):
                if step + 1 == new_tokens[r]:
                    sequences[r].free()
    except BaseException:  # a failed batch must not keep its blocks: the pool would leak
        for sequence in sequences:
            if sequence is not None:
                sequence.free()
        raise
    served.tokens = [torch.tensor(t, dtype=torch.long) for t in tokens]
    served.logits = [torch.stack(rows) for rows in logits]
    return served


@torch.no_grad()
def greedy_with_logits(model: GPT, prompt: torch.Tensor, new_tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Greedy tokens ``(new_tokens,)`` and their logits ``(new_tokens, vocab_size)`` with the contiguous
    :class:`~attncourse.nn.attention.KVCache` (:meth:`GPT.init_cache`): the reference of the paged cache."""
    model.eval()
    caches = model.init_cache(1)
    feed = prompt.to(model.embedding.weight.device)[None, :]
    tokens, rows = [], []
    for _ in range(new_tokens):
        out, _ = model(feed, caches)
        rows.append(out[0, -1].cpu())
        feed = out[:, -1:].argmax(-1)
        tokens.append(int(feed))
    return torch.tensor(tokens, dtype=torch.long), torch.stack(rows)


__all__ = ["BlockPool", "PagedLayerCache", "PagedSequence", "PoolState", "Served", "block_lookup",
           "greedy_with_logits", "serve_greedy"]
