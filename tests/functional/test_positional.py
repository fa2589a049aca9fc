"""Tests for positional encodings (attncourse.functional.positional, attncourse.nn.positional)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attncourse.functional.positional import (
    positional_frequencies,
    relative_shift_matrix,
    sinusoidal_encoding,
)
from attncourse.nn.positional import (
    LearnedPositionalEncoding,
    SinusoidalPositionalEncoding,
)


def test_sinusoidal_matches_the_formula_entry_by_entry():
    max_len, d_model = 12, 8
    pe = sinusoidal_encoding(max_len, d_model)
    assert pe.shape == (max_len, d_model) and pe.dtype == np.float64
    for pos in range(max_len):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            assert pe[pos, 2 * i] == pytest.approx(math.sin(angle), abs=1e-15)
            assert pe[pos, 2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-15)
    np.testing.assert_array_equal(pe[0], np.tile([0.0, 1.0], d_model // 2))


def test_frequencies_fall_geometrically_from_one():
    omega = positional_frequencies(16)
    assert omega[0] == 1.0
    np.testing.assert_allclose(omega[1:] / omega[:-1], 10000 ** (-2 / 16))


@pytest.mark.parametrize("k", [1, 3, -2, 7])
def test_shift_is_a_linear_map_independent_of_position(k):
    d_model = 16
    pe = sinusoidal_encoding(40, d_model)
    m_k = relative_shift_matrix(k, d_model)
    positions = np.arange(max(0, -k), 40 - max(0, k))
    np.testing.assert_allclose(pe[positions] @ m_k, pe[positions + k], atol=1e-12)


def test_shift_matrix_is_an_orthogonal_block_rotation():
    d_model = 8
    m3, m4 = relative_shift_matrix(3, d_model), relative_shift_matrix(4, d_model)
    np.testing.assert_allclose(m3 @ m3.T, np.eye(d_model), atol=1e-12)
    np.testing.assert_allclose(relative_shift_matrix(-3, d_model), m3.T, atol=1e-12)
    np.testing.assert_allclose(m3 @ m4, relative_shift_matrix(7, d_model), atol=1e-12)
    np.testing.assert_array_equal(relative_shift_matrix(0, d_model), np.eye(d_model))
    off_block = np.ones((d_model, d_model), dtype=bool)
    for i in range(0, d_model, 2):
        off_block[i : i + 2, i : i + 2] = False
    assert np.all(m3[off_block] == 0)


@pytest.mark.parametrize("d_model", [0, 7])
def test_odd_or_empty_width_is_refused(d_model):
    with pytest.raises(ValueError, match="even"):
        sinusoidal_encoding(4, d_model)
    with pytest.raises(ValueError, match="even"):
        relative_shift_matrix(1, d_model)


def test_torch_module_reuses_the_numpy_table_and_offsets():
    module = SinusoidalPositionalEncoding(10, 6)
    assert "pe" not in module.state_dict()  # derived from (max_len, d_model), not saved
    x = torch.zeros(2, 4, 6)
    table = torch.from_numpy(sinusoidal_encoding(10, 6)).float()
    torch.testing.assert_close(module(x), table[:4].expand(2, 4, 6))
    torch.testing.assert_close(module(x, offset=5), table[5:9].expand(2, 4, 6))
    assert module.double()(x.double()).dtype == torch.float64


@pytest.mark.parametrize("cls", [SinusoidalPositionalEncoding, LearnedPositionalEncoding])
def test_positions_beyond_max_len_are_refused(cls):
    module = cls(5, 4)
    with pytest.raises(ValueError, match="max_len=5"):
        module(torch.zeros(1, 6, 4))
    with pytest.raises(ValueError, match="max_len=5"):
        module(torch.zeros(1, 1, 4), offset=5)
    with pytest.raises(ValueError, match="d_model=4"):
        module(torch.zeros(1, 2, 3))


def test_learned_table_is_trainable_and_offset():
    module = LearnedPositionalEncoding(8, 4)
    x = torch.zeros(3, 2, 4)
    torch.testing.assert_close(module(x, offset=3), module.embedding.weight[3:5].expand(3, 2, 4))
    module(x).sum().backward()
    grad = module.embedding.weight.grad
    assert grad[:2].abs().sum() > 0 and grad[2:].abs().sum() == 0
