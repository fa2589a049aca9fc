"""Chapter 10's figures: the blocks of a paged KV cache.

:func:`plot_paged_cache` draws one moment of a pool of KV blocks (Kwon et al. 2023,
section 4): every physical block as a row of ``block_size`` slots coloured by the
request that owns it (grey when several requests share it), with its
filled slots solid, and beneath it each request's block table, logical block i
pointing to its physical block.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

#: One colour per request (tab10).
REQUEST_COLORS = plt.get_cmap("tab10").colors


def plot_paged_cache(tables: Sequence[Sequence[int]], lengths: Sequence[int], ref_counts: Sequence[int],
                     block_size: int, labels: Sequence[str] | None = None, title: str = "") -> Figure:
    """The pool and the block tables at one step.

    Parameters
    ----------
    tables : sequence over requests of sequences of int
        Each request's block table (physical block of each logical block).
    lengths : sequence of int
        Tokens each request holds.
    ref_counts : sequence of int
        Requests using each physical block (its length is the pool's size).
    block_size : int
        Slots per block.
    labels : sequence of str, optional
        The requests' names (default ``request 0``, ...).
    title : str

    Returns
    -------
    Figure
    """
    labels = list(labels) if labels is not None else [f"request {r}" for r in range(len(tables))]
    n_blocks = len(ref_counts)
    per_row = min(n_blocks, 8)
    pool_rows = -(-n_blocks // per_row)
    longest = max([len(t) for t in tables] + [1])
    fig, (pool_ax, table_ax) = plt.subplots(
        2, 1, figsize=(8, 1.0 + 0.55 * pool_rows + 0.45 * len(tables)), layout="constrained",
        height_ratios=[pool_rows, max(1, len(tables)) * 0.8])
    owner: dict[int, int] = {}
    filled: dict[int, int] = {}
    for r, (table, length) in enumerate(zip(tables, lengths)):
        for i, block in enumerate(table):
            owner.setdefault(block, r)
            filled[block] = max(filled.get(block, 0), min(block_size, length - i * block_size))
    for block in range(n_blocks):
        x0, y0 = (block % per_row) * (block_size + 1), -(block // per_row)
        shared = ref_counts[block] > 1
        color = "0.55" if shared else REQUEST_COLORS[owner[block] % 10] if block in owner else "white"
        for slot in range(block_size):
            used = block in owner and slot < filled.get(block, 0)
            pool_ax.add_patch(Rectangle((x0 + slot, y0), 1, 0.8, facecolor=color if used else "white",
                                        edgecolor=color if block in owner else "0.8",
                                        hatch="//" if shared and used else None, linewidth=1))
        pool_ax.text(x0 + block_size / 2, y0 + 0.4, str(block), ha="center", va="center", fontsize=8,
                     color="black")
    pool_ax.set_xlim(-0.2, per_row * (block_size + 1))
    pool_ax.set_ylim(-pool_rows + 0.9, 0.9)
    pool_ax.set_axis_off()
    used = sum(1 for c in ref_counts if c)
    pool_ax.set_title(f"{title}pool: {used} of {n_blocks} blocks in use ({block_size} tokens each; "
                      "grey = shared by several requests)", fontsize=9)
    for r, (table, length) in enumerate(zip(tables, lengths)):
        y = -r
        table_ax.text(-0.3, y + 0.4, f"{labels[r]} ({length} tok.)", ha="right", va="center", fontsize=8)
        for i, block in enumerate(table):
            shared = ref_counts[block] > 1
            table_ax.add_patch(Rectangle((i * 1.2, y), 1, 0.8, facecolor="0.55" if shared else
                                         REQUEST_COLORS[r % 10], alpha=0.8))
            table_ax.text(i * 1.2 + 0.5, y + 0.4, str(block), ha="center", va="center", fontsize=8,
                          color="white")
        if not table:
            table_ax.text(0, y + 0.4, "(no blocks)", va="center", fontsize=8, color="0.5")
    table_ax.set_xlim(-4.5, max(longest, 4) * 1.2)
    table_ax.set_ylim(-len(tables) + 0.8, 1.0)
    table_ax.set_axis_off()
    table_ax.set_title("block tables: logical block i -> physical block", fontsize=9)
    return fig


__all__ = ["plot_paged_cache"]
