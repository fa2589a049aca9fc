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
