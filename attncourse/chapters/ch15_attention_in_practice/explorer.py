"""An explorer of FlexAttention's block masks: which tiles a mask lets a kernel skip.

:class:`BlockMaskExplorer` builds a mask (causal, a sliding window, a prefix-LM, packed
documents, sinks and a window) as a FlexAttention ``mask_mod`` over ``n`` positions, and a
menu and a slider choose the mask and the tile size. The figure shows the mask itself and
its tiles as :func:`torch.nn.attention.flex_attention.create_block_mask` sorts them: full
(computed without the mask), partial (computed with it) and empty (skipped); the caption
compares the share of scores the mask keeps with the share of tiles a kernel computes.

References
----------
Dong et al. (2025), "FlexAttention: A Programming Model for Generating Fused Attention
Variants", MLSys (block masks); Child et al. (2019), section 4.3 (block-sparse kernels).
"""

from __future__ import annotations

from collections.abc import Callable

import ipywidgets as widgets
import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.colors import ListedColormap
from torch.nn.attention.flex_attention import create_block_mask, create_mask

from attncourse.widgets.base import Explorer
from attncourse.widgets.static import BookAxis

#: Tile sizes the slider offers (FlexAttention's default is 128).
BLOCK_SIZES: tuple[int, ...] = (16, 32, 64, 128)


def explorer_masks(n: int) -> dict[str, Callable]:
    """The explorer's masks over ``n`` positions, by label: FlexAttention ``mask_mod``s."""
    window, prefix, sinks = n // 4, n // 4, 4
    # four packed documents of unequal lengths
    bounds = torch.tensor([0, n * 3 // 10, n // 2, n * 9 // 10, n])
    doc = torch.repeat_interleave(torch.arange(4), bounds.diff())
    return {
        "causal": lambda b, h, q, k: k <= q,
        f"sliding window, w = {window}": lambda b, h, q, k: (k <= q) & (q - k < window),
        f"prefix-LM, prefix {prefix}": lambda b, h, q, k: (k <= q) | (k < prefix),
        "4 packed documents": lambda b, h, q, k: (doc[q] == doc[k]) & (k <= q),
        f"{sinks} sinks + window {window}": lambda b, h, q, k: (k <= q) & ((q - k < window) | (k < sinks)),
    }


class BlockMaskExplorer(Explorer):
    """A menu of masks and a slider of tile sizes, with the tiles a kernel computes or skips.

    Display the explorer by making it the last expression of a notebook cell.

    Parameters
    ----------
    n : int
        Positions (queries and keys); a multiple of the largest tile size, 128.

    Attributes
    ----------
    mask : ipywidgets.Dropdown
        The mask, one of :func:`explorer_masks`'s labels.
    block : ipywidgets.SelectionSlider
        The tile size, one of :data:`BLOCK_SIZES`.
    shown : dict
        ``"mask"``, ``"block"``, ``"full"``, ``"partial"``, ``"empty"`` (tile counts),
        ``"kept"`` (share of the ``n x n`` scores allowed) and ``"computed"`` (share of
        tiles full or partial).

    Raises
    ------
    ValueError
        If ``n`` is not a positive multiple of 128.
    """

    book_title = "Block masks: the tiles a FlexAttention kernel computes and skips"

    def __init__(self, n: int = 512) -> None:
        if isinstance(n, bool) or int(n) != n or n < 128 or n % 128:
            raise ValueError(f"n must be a positive multiple of 128, got {n!r}")
        self.n = int(n)
        self.masks = explorer_masks(self.n)
        self.dense = {label: create_mask(fn, None, None, self.n, self.n, device="cpu")[0, 0].numpy()
                      for label, fn in self.masks.items()}
        self.mask = widgets.Dropdown(options=list(self.masks), value="causal", description="Mask")
        self.block = widgets.SelectionSlider(options=list(BLOCK_SIZES), value=64, description="Tile",
                                             continuous_update=False)
        super().__init__(widgets.HBox([self.mask, self.block]))
        self.mask.observe(self._on_change, names="value")
        self.block.observe(self._on_change, names="value")
        self._update()

    def _book_axes(self) -> list[BookAxis]:
        return [BookAxis(self.mask, label="Mask"), BookAxis(self.block, label="Tile")]

    def _book_note(self, n_states: int) -> str:
        return f"All {n_states} masks and tile sizes, drawn in advance."

    def _tiles(self, label: str, block: int) -> np.ndarray:
        """``(n / block, n / block)``: 2 full, 1 partial, 0 empty, from FlexAttention's BlockMask."""
        blocks = create_block_mask(self.masks[label], None, None, self.n, self.n, device="cpu",
                                   BLOCK_SIZE=block)
        tiles = self.n // block
        grid = np.zeros((tiles, tiles), dtype=int)
        for kind, counts, indices in ((1, blocks.kv_num_blocks, blocks.kv_indices),
                                      (2, blocks.full_kv_num_blocks, blocks.full_kv_indices)):
            for row in range(tiles):
                grid[row, indices[0, 0, row, :int(counts[0, 0, row])].numpy()] = kind
        return grid

    def _update(self) -> None:
        label, block = self.mask.value, self.block.value
        grid, dense = self._tiles(label, block), self.dense[label]
        full, partial = int((grid == 2).sum()), int((grid == 1).sum())
        empty = grid.size - full - partial
        self.shown = {"mask": label, "block": block, "full": full, "partial": partial, "empty": empty,
                      "kept": float(dense.mean()), "computed": (full + partial) / grid.size}
        fig, (ax_mask, ax_tiles) = plt.subplots(1, 2, figsize=(8.5, 3.8))
        ax_mask.imshow(dense, cmap="Greys", interpolation="nearest")
        ax_mask.set(title=f"the mask: {self.shown['kept']:.1%} of the scores", xlabel="key",
                    ylabel="query")
        ax_tiles.imshow(grid, cmap=ListedColormap(["white", "#f4a261", "#2a6f97"]), vmin=0, vmax=2,
                        interpolation="nearest")
        ax_tiles.set(title=f"tiles of {block}: {self.shown['computed']:.1%} computed", xlabel="key tile",
                     ylabel="query tile")
        fig.tight_layout()
        self.caption.value = (
            f"<b>{label}</b>, n = {self.n}, tiles of {block} x {block}: <b>{full}</b> full (blue, no "
            f"mask applied), <b>{partial}</b> partial (orange, masked) and <b>{empty}</b> skipped of "
            f"{grid.size}. The mask keeps {self.shown['kept']:.1%} of the scores; a kernel computes "
            f"{self.shown['computed']:.1%} of the tiles: smaller tiles follow the mask more closely "
            "but each costs a fixed overhead.")
        self._render(fig)


__all__ = ["BLOCK_SIZES", "BlockMaskExplorer", "explorer_masks"]
