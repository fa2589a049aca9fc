"""FLOP and byte counts by hand, and tracemalloc's peak against known NumPy allocations."""

import numpy as np
import pytest

from attncourse.functional import (
    attention_bytes,
    attention_flops,
    peak_traced_bytes,
    scaled_dot_product_attention,
    tiled_attention,
)


def test_counts_by_hand():
    assert attention_flops(4, 2) == 4 * 16 * 2
    assert attention_bytes(4, 2) == (4 * 4 * 2 + 4 * 16) * 2
    assert attention_bytes(4, 2, block_q=3, bytes_per_element=4) == (2 * 8 + 2 * 8 * 2) * 4
    # One query block covering everything: K and V are read once.
    assert attention_bytes(10, 8, block_q=10) == 4 * 10 * 8 * 2
    with pytest.raises(ValueError, match="block_q"):
        attention_bytes(4, 2, block_q=0)


def test_peak_traced_bytes_sees_numpy_buffers():
    result, peak = peak_traced_bytes(np.ones, (1000, 1000))
    assert result.shape == (1000, 1000) and 8_000_000 <= peak < 8_100_000


def test_naive_holds_n_squared_and_tiled_does_not():
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(512, 16)).astype(np.float32) for _ in range(3))
    _, naive = peak_traced_bytes(scaled_dot_product_attention, q, k, v)
    _, tiled = peak_traced_bytes(tiled_attention, q, k, v, block_q=32, block_k=32)
    assert naive > 2 * 512 * 512 * 4  # scores and weights at least
    assert tiled < 512 * 512 * 4 / 4


def test_saved_tensor_bytes_counts_what_autograd_keeps():
    import torch

    from attncourse.functional import flash_attention, saved_tensor_bytes

    x = torch.randn(10, 3, requires_grad=True)
    y = torch.randn(10, 3, requires_grad=True)
    assert saved_tensor_bytes(torch.mul, x, y) == 2 * 30 * 4  # x * y keeps both factors
    assert saved_tensor_bytes(torch.add, x, y) == 0
    q, k, v = (torch.randn(1, 2, 16, 4, requires_grad=True) for _ in range(3))
    # q, k, v, the output and the log-sum-exp of each row.
    assert saved_tensor_bytes(flash_attention, q, k, v) == 2 * (4 * 16 * 4 + 16) * 4
