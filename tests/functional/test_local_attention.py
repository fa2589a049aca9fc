"""windowed_attention: reads only the window, equals the NumPy Luong step and the masked module."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attncourse.functional.local_attention import windowed_attention
from attncourse.functional.luong import luong_step
from attncourse.nn import LuongAttention

D_K, SRC_LEN = 4, 11


def inputs(seed=0, batch=5, src_len=SRC_LEN, d_k=D_K):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(batch, d_k, generator=g, dtype=torch.float64),
            3 * torch.randn(batch, src_len, d_k, generator=g, dtype=torch.float64))


# p_t on integers, between them, at both edges and beyond the last real word.
P_T = torch.tensor([0.0, 3.4, 5.0, 9.7, 10.0], dtype=torch.float64)
LENGTHS = torch.tensor([11, 11, 8, 11, 6])


@pytest.mark.parametrize("gaussian", [True, False])
@pytest.mark.parametrize("D", [1, 2, 3])
def test_equals_the_numpy_luong_step_for_each_sentence(D, gaussian):
    query, keys = inputs()
    out = windowed_attention(query, keys, keys, P_T, D, src_lengths=LENGTHS, gaussian=gaussian)
    full = out.full_weights(SRC_LEN)
    for b in range(len(P_T)):
        S = int(LENGTHS[b])
        step = luong_step(query[b].numpy(), keys[b, :S].numpy(), "dot", mode="local-p", D=D,
                          p_t=float(P_T[b]), gaussian=gaussian)
        np.testing.assert_allclose(full[b, :S].numpy(), step.weights, rtol=1e-12, atol=1e-15)
        np.testing.assert_allclose(out.context[b].numpy(), step.context, rtol=1e-12, atol=1e-14)
        assert (full[b, S:] == 0).all()


def test_equals_the_masked_module_and_reads_at_most_2d_plus_1_positions():
    torch.manual_seed(0)
    module = LuongAttention(D_K, score="general", mode="local-p", window=2).double()
    query, keys = inputs(1)
    mask = torch.arange(SRC_LEN)[None, :] < LENGTHS[:, None]
    context, weights, p_t = module(query, keys, mask)
    out = windowed_attention(query, module.project_keys(keys), keys, p_t, 2, src_lengths=LENGTHS)
    assert out.weights.shape == (5, 5) and out.positions.shape == (5, 5)
    torch.testing.assert_close(out.full_weights(SRC_LEN), weights, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(out.context, context, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(module.aligned_positions(query, LENGTHS), p_t)


def test_slots_outside_the_window_or_sentence_weigh_zero():
    query, keys = inputs(2)
    out = windowed_attention(query, keys, keys, P_T, 2, src_lengths=LENGTHS)
    outside = ((out.positions.double() - P_T[:, None]).abs() > 2) | (out.positions >= LENGTHS[:, None])
    assert outside.any() and (out.weights[outside] == 0).all()
    # p_t = 0: the window [-2, 2] is cut at the sentence start, positions are clamped into it
    assert out.positions[0].min() == 0 and (out.weights[0] > 0).sum() == 3


def test_gradient_reaches_p_t_through_the_gaussian_only():
    query, keys = inputs(3)
    query.requires_grad_(True)
    for gaussian in (True, False):
        p_t = P_T.clone().requires_grad_(True)
        windowed_attention(query, keys, keys, p_t, 2, src_lengths=LENGTHS, gaussian=gaussian).context.sum().backward()
        reached = p_t.grad is not None and bool((p_t.grad.abs() > 0).any())
        assert reached == gaussian


def test_empty_window_gives_zeros_not_nan():
    query, keys = inputs(4, batch=1)
    out = windowed_attention(query, keys, keys, torch.tensor([30.0], dtype=torch.float64), 2)
    assert torch.equal(out.weights, torch.zeros(1, 5)) and torch.equal(out.context, torch.zeros(1, D_K))


def test_bad_inputs_name_the_shapes():
    query, keys = inputs(5)
    with pytest.raises(ValueError, match="D must be a positive int, got 0"):
        windowed_attention(query, keys, keys, P_T, 0)
    with pytest.raises(ValueError, match=r"query \(5, 4\), keys \(5, 11, 4\), values \(5, 11, 4\), p_t \(4,\)"):
        windowed_attention(query, keys, keys, P_T[:4], 2)
    with pytest.raises(ValueError, match=r"got query \(4,\)"):
        windowed_attention(query[0], keys, keys, P_T, 2)
