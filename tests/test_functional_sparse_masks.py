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
