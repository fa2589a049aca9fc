"""A paged KV cache: blocks of a shared pool, read through a block table.

Blocks are reference-counted and copied on write; bad block ids raise ``ValueError``.
Source: Kwon et al. (2023), "Efficient Memory Management for Large Language Model
Serving with PagedAttention", sections 4.1-4.4.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass, field

import torch

from attncourse.nn.gpt import GPT


class BlockPool:
    """Physical KV blocks for all sequences, with reference counts, a free list.

    Storage ``k, v``: (num_layers, num_blocks, num_kv_heads, block_size, d_k). Raises
    ``ValueError`` for a non-positive size, and from the methods for an id not in the
    pool or a free block.
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
        """A pool for ``model``; ``ValueError`` unless it caches keys and values."""
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
        # a block is on the free list exactly when its count is 0: no scan of every block
        return len(self.ref_counts) - len(self._free)

    def allocate(self) -> int:
        """A free block's id, count 1; ``MemoryError`` if none is free."""
        if not self._free:
            raise MemoryError(f"the pool's {self.num_blocks} blocks of {self.block_size} tokens are all in use")
        block = self._free.pop()
        self.ref_counts[block] = 1
        return block

    def validate_block(self, block: int, action: str = "use") -> int:
        """``block`` as an int if held in this pool, else ``ValueError``."""
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
        """A block table's ids, each held here, none twice (else ValueError)."""
        for block in table:
            self.validate_block(block, "read or write through")
        if len(set(table)) != len(table):
            raise ValueError(f"block table {table} holds a block twice: its sequences would "
                             "overwrite each other")

    def share(self, block: int) -> None:
        """One more sequence uses ``block`` (a held block)."""
        self.ref_counts[self.validate_block(block, "share")] += 1

    def release(self, block: int) -> None:
        """One sequence fewer uses ``block``; at 0 it returns to the free list."""
        block = self.validate_block(block, "release")
        self.ref_counts[block] -= 1
        if self.ref_counts[block] == 0:
            self._free.append(block)

    def copy(self, block: int) -> int:
        """Copy-on-write: a new block with ``block``'s keys and values."""
        self.validate_block(block, "copy")
        new = self.allocate()
        self.k[:, new] = self.k[:, block]
        self.v[:, new] = self.v[:, block]
        self.release(block)
        return new


def block_lookup(block_table: list[int], position: int, block_size: int) -> tuple[int, int]:
    """Token ``position`` t's (physical block, slot) = (table[t // B], t % B).

    Raises ``ValueError`` if ``block_size < 1``, ``position < 0`` or it lies past the
    table's last block.
    """
    if block_size < 1:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    if position < 0 or position // block_size >= len(block_table):
        raise ValueError(f"position {position} is outside a block table of {len(block_table)} "
                         f"blocks of {block_size} tokens")
    return block_table[position // block_size], position % block_size


class PagedSequence:
    """One sequence's ``block_table`` in a :class:`BlockPool`, with tokens per layer."""

    def __init__(self, pool: BlockPool) -> None:
        self.pool = pool
        self.block_table: list[int] = []
        self.lengths = [0] * pool.k.shape[0]

    def __len__(self) -> int:
        return self.lengths[-1]

    def layers(self) -> list[PagedLayerCache]:
        """One KVCache-like view per layer, for ``GPT.forward``."""
        return [PagedLayerCache(self, i) for i in range(len(self.lengths))]

    def fork(self) -> PagedSequence:
        """A sequence continuing this one, sharing every block (copy-on-write)."""
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
        """Blocks for ``count`` positions from ``start``, allocated or copied."""
        self.pool.validate_table(self.block_table)
        size = self.pool.block_size
        while len(self.block_table) * size < start + count:
            self.block_table.append(self.pool.allocate())
        for logical in range(start // size, (start + count - 1) // size + 1):
            block = self.block_table[logical]
            if self.pool.ref_counts[block] > 1:
                self.block_table[logical] = self.pool.copy(block)

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Append ``k, v`` (1, num_kv_heads, new_len, d_k) to ``layer``."""
        start, count = self.lengths[layer], k.shape[2]
        self._reserve(start, count)
        for i in range(count):
            block, slot = block_lookup(self.block_table, start + i, self.pool.block_size)
            self.pool.k[layer, block, :, slot] = k[0, :, i]
            self.pool.v[layer, block, :, slot] = v[0, :, i]
        self.lengths[layer] = start + count

    def read(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of ``layer``, (1, num_kv_heads, len, d_k) each."""
        n = self.lengths[layer]
        self.pool.validate_table(self.block_table)
        table = torch.tensor(self.block_table, dtype=torch.long, device=self.pool.k.device)

        def gather(store: torch.Tensor) -> torch.Tensor:
            blocks = store[layer, table]  # (n_blocks, g, B, d_k)
            return blocks.permute(1, 0, 2, 3).flatten(1, 2)[None, :, :n]

        return gather(self.pool.k), gather(self.pool.v)


@dataclass
class PagedLayerCache:
    """One layer of a :class:`PagedSequence`, with ``KVCache``'s interface."""

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
    """The pool after one step of :func:`serve_greedy`: tables, lengths, ref counts."""

    step: int
    tables: list[list[int]]
    lengths: list[int]
    ref_counts: list[int]


@dataclass
class Served:
    """:func:`serve_greedy`'s tokens, logits, pool states per step and peak blocks."""

    tokens: list[torch.Tensor]
    logits: list[torch.Tensor]
    states: list[PoolState] = field(default_factory=list)
    peak_blocks: int = 0


@torch.no_grad()
def serve_greedy(model: GPT, prompts: list[torch.Tensor], new_tokens: list[int], pool: BlockPool,
                 share_prefix: bool = False) -> Served:
    """Serve several requests from one paged pool, one greedy token each per step.

    ``share_prefix``: all prompts are equal, run once, their blocks shared. Raises
    ``ValueError`` for lists of different lengths, a count < 1 or unequal shared
    prompts; ``MemoryError`` when the pool runs out (every block given back first).
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
    """Greedy tokens and logits (new_tokens, vocab_size), contiguous cache."""
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
