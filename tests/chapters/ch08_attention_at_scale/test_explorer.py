"""The FlashAttention tile explorer, driven as a learner would, and its book rendering."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from attncourse.chapters.ch08_attention_at_scale.explorer import (  # noqa: E402
    FlashAttentionExplorer,
)
from attncourse.chapters.ch08_attention_at_scale.figures import (  # noqa: E402
    tile_states,
)
from attncourse.functional import (  # noqa: E402
    causal_mask,
    scaled_dot_product_attention,
)


def test_tiles_play_in_order_and_converge_to_the_exact_output():
    explorer = FlashAttentionExplorer(seq_len=8, block=2)
    assert explorer.tile.max == 16 and explorer.previous.disabled
    seen = []
    for tile in range(1, 17):
        explorer.tile.value = tile
        seen.append((explorer.shown["q_block"], explorer.shown["k_block"]))
    assert seen == [(i, j) for i in range(4) for j in range(4)]
    assert explorer.next.disabled and explorer.shown["finished"] == list(range(8))
    exact, _ = scaled_dot_product_attention(explorer.q, explorer.k, explorer.v)
    np.testing.assert_allclose(explorer.shown["output"], exact, atol=1e-12)
    assert "Rows 0..7 have seen all their keys" in explorer.caption.value


def test_partial_rows_are_not_exact_until_their_last_key_block():
    explorer = FlashAttentionExplorer(seq_len=8, block=4)
    explorer.tile.value = 1  # rows 0..3 against keys 0..3 only
    s = explorer.shown
    assert s["finished"] == [] and s["error"][:4].max() > 1e-3
    assert np.isneginf(s["m"][4:]).all() and (s["l"][4:] == 0).all()
    explorer.tile.value = 2
    assert explorer.shown["finished"] == [0, 1, 2, 3] and explorer.shown["error"][:4].max() < 1e-12


def test_causal_skips_future_tiles_and_matches_the_masked_formula():
    explorer = FlashAttentionExplorer(seq_len=8, block=2, causal=False)
    explorer.tile.value = 16
    explorer.causal.value = True
    assert explorer.tile.max == 10 and explorer.tile.value == 10
    exact, _ = scaled_dot_product_attention(explorer.q, explorer.k, explorer.v, mask=causal_mask(8))
    np.testing.assert_allclose(explorer.shown["output"], exact, atol=1e-12)
    states = tile_states(explorer.result, 8, 8, 9, causal=True)
    assert (states == 3).sum() == 6 and (states == 2).sum() == 1 and "instead of 16" in explorer.caption.value


def test_book_rendering_holds_every_tile_and_stays_small():
    explorer = FlashAttentionExplorer(seq_len=4, block=4)
    states = explorer.book_states()
    assert len(states) == 4 + 3 + 1 + 1  # block 2: 4 tiles, 3 causal; block 4: one tile
    assert [s.values for s in states[:4]] == [(2, False, t) for t in range(1, 5)]
    html = explorer.to_html()
    assert len(html) < 2_000_000 and "FlashAttention tile explorer" in html
    assert explorer.tile.value == 1 and explorer.block.value == 4


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="seq_len"):
        FlashAttentionExplorer(seq_len=40)
    with pytest.raises(ValueError, match="block"):
        FlashAttentionExplorer(block=5)
