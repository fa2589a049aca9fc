"""Tests of attncourse.chapters.ch07_decoder_only.checks: right answers pass, typical
bugs fail with the hint naming them."""

import numpy as np
import pytest
import torch

from attncourse.chapters.ch07_decoder_only.checks import (
    MASK_NO_CAUSAL_HINT,
    MASK_NO_PADDING_HINT,
    MASK_QUERY_AXIS_HINT,
    REPEAT_TILE_HINT,
    ROPE_FREQ_HINT,
    ROPE_HALVES_HINT,
    ROPE_SIGN_HINT,
    check_left_padded_causal_mask,
    check_repeat_kv,
    check_rope,
)
from tests.check_helpers import (
    assert_failed,
    lenient_hand_offs,  # noqa: F401  (a fixture)
)

# Right and buggy answers built on library functions: the hand-off rules are tested in
# tests/checks/test_hand_offs.py.
pytestmark = pytest.mark.usefixtures("lenient_hand_offs")


def mask_right(is_real):
    n = is_real.shape[1]
    return np.tril(np.ones((n, n), dtype=bool))[None] & is_real[:, None, :]


def test_left_padded_mask():
    assert check_left_padded_causal_mask(mask_right).passed
    def tril(r):
        return np.tril(np.ones((r.shape[1], r.shape[1]), dtype=bool))

    def square(mask, r):
        return np.broadcast_to(mask, (len(r), r.shape[1], r.shape[1]))

    assert_failed(check_left_padded_causal_mask(lambda r: square(tril(r), r)), 1, MASK_NO_PADDING_HINT)
    assert_failed(check_left_padded_causal_mask(lambda r: square(r[:, None, :], r)), 1, MASK_NO_CAUSAL_HINT)
    assert_failed(check_left_padded_causal_mask(lambda r: tril(r)[None] & r[:, :, None]), 1, MASK_QUERY_AXIS_HINT)
    stub = check_left_padded_causal_mask(lambda r: None)
    assert not stub.passed and "None" in stub.message


def rope_right(x, positions):
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], d // 2, 2).contiguous())
    return torch.view_as_real(z * torch.polar(torch.ones_like(theta), positions[:, None] * theta)).flatten(-2)


def test_rope():
    assert check_rope(rope_right).passed

    def halves(x, positions):
        d = x.shape[-1]
        a = positions[:, None].double() * 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
        first, second = x[:, : d // 2], x[:, d // 2:]
        return torch.cat([first * a.cos() - second * a.sin(), first * a.sin() + second * a.cos()], -1)

    assert_failed(check_rope(halves), 2, ROPE_HALVES_HINT)  # d = 2: both layouts agree
    assert_failed(check_rope(lambda x, p: rope_right(x, -p)), 1, ROPE_SIGN_HINT)

    def slow(x, positions):
        d = x.shape[-1]
        theta = 10000.0 ** (-torch.arange(d // 2, dtype=torch.float64) / d)
        z = torch.view_as_complex(x.reshape(x.shape[0], d // 2, 2).contiguous())
        return torch.view_as_real(z * torch.polar(torch.ones_like(theta), positions[:, None] * theta)).flatten(-2)

    assert_failed(check_rope(slow), 2, ROPE_FREQ_HINT)  # d = 2: theta_0 = 1 either way
    assert not check_rope(lambda x, p: ...).passed


def test_repeat_kv():
    assert check_repeat_kv(lambda x, h: x.repeat_interleave(h // x.shape[1], dim=1)).passed
    assert check_repeat_kv(lambda x, h: x[:, torch.arange(h) // (h // x.shape[1])]).passed
    assert_failed(check_repeat_kv(lambda x, h: x.repeat(1, h // x.shape[1], 1, 1)), 1, REPEAT_TILE_HINT)
    assert not check_repeat_kv(lambda x, h: None).passed
