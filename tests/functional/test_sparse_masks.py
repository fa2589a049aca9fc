"""Sliding-window masks against hand-written cases and the full causal mask."""

import numpy as np
import pytest

from attncourse.functional import causal_mask, sliding_window_mask


def test_causal_window_by_hand():
    expected = np.array(
        [
            [1, 0, 0, 0],
            [1, 1, 0, 0],
            [0, 1, 1, 0],
            [0, 0, 1, 1],
        ],
        dtype=bool,
    )
    np.testing.assert_array_equal(sliding_window_mask(4, 2), expected)


def test_centred_window_by_hand():
    expected = np.array(
        [
            [1, 1, 0, 0],
            [1, 1, 1, 0],
            [0, 1, 1, 1],
            [0, 0, 1, 1],
        ],
        dtype=bool,
    )
    np.testing.assert_array_equal(sliding_window_mask(4, 3, causal=False), expected)


@pytest.mark.parametrize("seq_len", [1, 5, 9])
def test_wide_causal_window_is_the_causal_mask(seq_len):
    np.testing.assert_array_equal(sliding_window_mask(seq_len, seq_len), causal_mask(seq_len))


def test_each_query_sees_at_most_window_keys():
    mask = sliding_window_mask(12, 4)
    assert mask.sum(axis=1).max() == 4
    assert mask.diagonal().all()


@pytest.mark.parametrize("args, name", [((0, 2), "seq_len"), ((3, 0), "window")])
def test_bad_sizes_are_named(args, name):
    with pytest.raises(ValueError, match=name):
        sliding_window_mask(*args)


# ----------------------------------------------------------------------------- strided, global tokens

from attncourse.functional import (  # noqa: E402
    global_tokens_mask,
    mask_density,
    strided_mask,
)


def test_strided_mask_by_hand():
    # stride 2: the band j in {i - 1, i} plus every key an even distance back.
    expected = np.array(
        [
            [1, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0],
            [1, 1, 1, 0, 0, 0],
            [0, 1, 1, 1, 0, 0],
            [1, 0, 1, 1, 1, 0],
            [0, 1, 0, 1, 1, 1],
        ],
        dtype=bool,
    )
    np.testing.assert_array_equal(strided_mask(6, 2), expected)


def test_strided_both_ways_is_symmetric_and_contains_the_band():
    mask = strided_mask(10, 3, causal=False)
    np.testing.assert_array_equal(mask, mask.T)
    assert (mask >= sliding_window_mask(10, 5, causal=False)).all()
    assert mask[9, 0] and not mask[9, 1]


def test_global_tokens_mask_by_hand():
    mask = global_tokens_mask(5, 3, [0])
    expected = np.array(
        [
            [1, 1, 1, 1, 1],
            [1, 1, 1, 0, 0],
            [1, 1, 1, 1, 0],
            [1, 0, 1, 1, 1],
            [1, 0, 0, 1, 1],
        ],
        dtype=bool,
    )
    np.testing.assert_array_equal(mask, expected)
    with pytest.raises(ValueError, match="global_tokens"):
        global_tokens_mask(5, 3, [5])


def test_mask_density_counts_kept_scores():
    assert mask_density(causal_mask(4)) == 10 / 16
    assert mask_density(sliding_window_mask(100, 10)) == pytest.approx((100 * 10 - 45) / 100 ** 2)
    with pytest.raises(ValueError, match="stride"):
        strided_mask(4, 0)


# ----------------------------------------------------------------------------- one window definition

from attncourse.functional import fixed_mask  # noqa: E402


@pytest.mark.parametrize("n, w", [(9, 1), (9, 3), (12, 5), (6, 11)])
def test_window_is_the_w_keys_a_query_sees(n, w):
    causal, centred = sliding_window_mask(n, w), sliding_window_mask(n, w, causal=False)
    for i in range(n):
        assert set(np.flatnonzero(causal[i])) == set(range(max(0, i - w + 1), i + 1))
        half = (w - 1) // 2
        assert set(np.flatnonzero(centred[i])) == set(range(max(0, i - half), min(n, i + half + 1)))
    # Away from the edges a query sees exactly w keys, both ways.
    if n > w:
        assert causal[-1].sum() == w and centred[n // 2].sum() == min(w, n)


def test_mistral_window_counts_the_distance_back():
    # Mistral 7B's W: keys i - W .. i, that is W + 1 keys, our window w = W + 1.
    W, n = 4, 12
    mask = sliding_window_mask(n, W + 1)
    assert all(set(np.flatnonzero(mask[i])) == set(range(max(0, i - W), i + 1)) for i in range(n))


@pytest.mark.parametrize("window, causal", [(2.5, True), (2.0, True), (True, True), (0, True), (4, False)])
def test_bad_windows_are_refused_with_one_line(window, causal):
    with pytest.raises(ValueError, match="window"):
        sliding_window_mask(8, window, causal=causal)


def _fixed_reference(n, l, c, causal):
    """Child et al. (2019), section 4.2: A1 = same block, A2 = last c positions of a block."""
    mask = np.zeros((n, n), dtype=bool)
    for i in range(n):
        a1 = {j for j in range(n) if j // l == i // l}
        a2 = {j for j in range(n) if j % l in range(l - c, l)}
        for j in a1 | a2:
            mask[i, j] = j <= i or not causal
    return mask


@pytest.mark.parametrize("n, l, c", [(16, 4, 1), (17, 5, 2), (9, 3, 3), (8, 8, 1), (7, 1, 1)])
@pytest.mark.parametrize("causal", [True, False])
def test_fixed_mask_against_the_papers_index_sets(n, l, c, causal):
    np.testing.assert_array_equal(fixed_mask(n, l, c, causal=causal), _fixed_reference(n, l, c, causal))


def test_fixed_mask_by_hand_and_errors():
    expected = np.array(
        [
            [1, 0, 0, 0, 0, 0],
            [1, 1, 0, 0, 0, 0],
            [0, 1, 1, 0, 0, 0],
            [0, 1, 1, 1, 0, 0],
            [0, 1, 0, 1, 1, 0],
            [0, 1, 0, 1, 1, 1],
        ],
        dtype=bool,
    )  # blocks of 2, the last position of each block (1, 3, 5) a summary
    np.testing.assert_array_equal(fixed_mask(6, 2), expected)
    with pytest.raises(ValueError, match="summary"):
        fixed_mask(6, 2, summary=3)
    with pytest.raises(ValueError, match="stride"):
        fixed_mask(6, 1.5)


def test_one_global_token_adds_one_row_and_one_column():
    n, w = 20, 5
    extra = global_tokens_mask(n, w, [7]) & ~sliding_window_mask(n, w, causal=False)
    rows, cols = np.nonzero(extra)
    assert set(rows) | set(cols) >= {7} and all(r == 7 or c == 7 for r, c in zip(rows, cols))
    # Two layers, not one, connect two distant tokens through it.
    reach_1 = global_tokens_mask(n, w, [7]).astype(int)
    reach_2 = (reach_1 @ reach_1) > 0
    assert not reach_1[19, 0] and reach_2[19, 0]


def test_tile_fraction_counts_the_tiles_flexattentions_block_mask_computes():
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    from attncourse.functional.sparse_masks import tile_fraction

    for n, block, mask_mod in ((1024, 64, lambda b, h, q, k: k <= q),
                               (200, 32, lambda b, h, q, k: (k <= q) & (q - k < 30)),
                               (128, 64, lambda b, h, q, k: k < 0)):
        dense = (mask_mod(0, 0, torch.arange(n)[:, None], torch.arange(n)[None, :])
                 .broadcast_to(n, n).numpy())
        blocks = create_block_mask(mask_mod, None, None, n, n, device="cpu", BLOCK_SIZE=block)
        tiles = ((n + block - 1) // block) ** 2
        computed = int(blocks.kv_num_blocks.sum() + blocks.full_kv_num_blocks.sum())
        assert tile_fraction(dense, block) == computed / tiles
    assert tile_fraction(np.tril(np.ones((1024, 1024), dtype=bool))) == 17 / 32  # chapter 8's count
    with pytest.raises(ValueError, match="square"):
        tile_fraction(np.ones((4, 6), dtype=bool))
    with pytest.raises(ValueError, match="block must be a positive int"):
        tile_fraction(np.ones((4, 4), dtype=bool), 0)
