"""Chapter 15's block-mask explorer: its tiles are FlexAttention's, counted by tile_fraction."""

import pytest

from attncourse.chapters.ch15_attention_in_practice.explorer import (
    BLOCK_SIZES,
    BlockMaskExplorer,
)
from attncourse.functional.sparse_masks import tile_fraction


def test_every_mask_and_tile_size_counts_the_tiles_tile_fraction_counts():
    explorer = BlockMaskExplorer(256)
    for label in explorer.masks:
        for block in BLOCK_SIZES:
            explorer.mask.value, explorer.block.value = label, block
            shown = explorer.shown
            assert shown["computed"] == tile_fraction(explorer.dense[label], block), (label, block)
            assert shown["full"] + shown["partial"] + shown["empty"] == (256 // block) ** 2
    explorer.mask.value, explorer.block.value = "causal", 64
    assert (explorer.shown["full"], explorer.shown["partial"]) == (6, 4)   # 4 x 4 tiles, 4 diagonal
    assert "6</b> full" in explorer.caption.value


def test_n_must_be_a_multiple_of_the_largest_tile():
    with pytest.raises(ValueError, match="multiple of 128"):
        BlockMaskExplorer(200)
