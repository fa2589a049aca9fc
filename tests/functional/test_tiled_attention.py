"""The tiled (FlashAttention) forward and backward against SDPA and the textbook formula."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attncourse.functional import (
    attention,
    causal_mask,
    flash_attention,
    online_softmax_step,
    online_softmax_trace,
    padding_mask,
    scaled_dot_product_attention,
    softmax,
    tiled_attention,
    weights_from_lse,
)


def qkv(n_q=7, n_k=9, d_k=5, d_v=3, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n_q, d_k)).astype(dtype), rng.normal(size=(n_k, d_k)).astype(dtype),
            rng.normal(size=(n_k, d_v)).astype(dtype))


def sdpa_numpy(q, k, v, mask=None, is_causal=False):
    """torch's SDPA (math reference) on NumPy inputs, one sequence."""
    t = [torch.from_numpy(np.ascontiguousarray(a)) for a in (q, k, v)]
    m = None if mask is None else torch.from_numpy(np.ascontiguousarray(mask))
    return F.scaled_dot_product_attention(*t, attn_mask=m, is_causal=is_causal).numpy()


# ----------------------------------------------------------------------------- NumPy path


@pytest.mark.parametrize("block_q, block_k", [(1, 1), (3, 4), (7, 9), (64, 64), (2, 5)])
def test_tiled_equals_sdpa_for_any_blocks(block_q, block_k):
    q, k, v = qkv()
    result = tiled_attention(q, k, v, block_q=block_q, block_k=block_k)
    np.testing.assert_allclose(result.output, sdpa_numpy(q, k, v), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n_q, n_k", [(9, 9), (5, 9), (9, 4)])
def test_tiled_causal_equals_sdpa_is_causal(n_q, n_k):
    q, k, v = qkv(n_q, n_k, seed=1)
    result = tiled_attention(q, k, v, causal=True, block_q=2, block_k=3)
    np.testing.assert_allclose(result.output, sdpa_numpy(q, k, v, is_causal=True), rtol=1e-12, atol=1e-12)


def test_causal_skips_future_key_blocks():
    q, k, v = qkv(8, 8)
    full = tiled_attention(q, k, v, block_q=2, block_k=2, trace=True)
    causal = tiled_attention(q, k, v, causal=True, block_q=2, block_k=2, trace=True)
    assert len(full.steps) == 16 and len(causal.steps) == 10  # 4 + 3 + 2 + 1 blocks under the diagonal
    assert all(step.k_block <= step.q_block for step in causal.steps)


def test_tiled_float32_matches_sdpa():
    q, k, v = qkv(33, 40, 8, 6, seed=2, dtype=np.float32)
    result = tiled_attention(q, k, v, block_q=8, block_k=16)
    assert result.output.dtype == np.float32
    np.testing.assert_allclose(result.output, sdpa_numpy(q, k, v), rtol=1e-5, atol=1e-6)


def test_padding_and_fully_masked_rows_give_zeros():
    q, k, v = qkv(6, 6, seed=3)
    mask = np.broadcast_to(padding_mask([4], 6)[0], (6, 6)).copy()
    mask[2] = False  # a query with no key at all
    result = tiled_attention(q, k, v, mask=mask, block_q=4, block_k=4)
    ref, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    np.testing.assert_allclose(result.output, ref, rtol=1e-12, atol=1e-12)
    assert (result.output[2] == 0).all() and result.lse[2] == -np.inf
    kept = mask.any(axis=1)
    np.testing.assert_allclose(result.output[kept], sdpa_numpy(q, k, v, mask=mask)[kept], atol=1e-12)


def test_lse_rebuilds_the_weights():
    q, k, v = qkv(5, 8, seed=4)
    mask = causal_mask(8)[:5]
    result = tiled_attention(q, k, v, mask=mask, block_q=2, block_k=3)
    expected = softmax(q @ k.T / np.sqrt(5), mask=mask)
    np.testing.assert_allclose(weights_from_lse(q, k, result.lse, mask), expected, rtol=1e-12, atol=1e-15)
    s = q @ k.T / np.sqrt(5)
    np.testing.assert_allclose(result.lse, np.log(np.where(mask, np.exp(s), 0).sum(axis=1)), rtol=1e-12)


def test_trace_sees_one_tile_and_converges():
    q, k, v = qkv(6, 10, seed=5)
    result = tiled_attention(q, k, v, block_q=4, block_k=3, trace=True)
    assert [(s.q_block, s.k_block) for s in result.steps] == [(i, j) for i in range(2) for j in range(4)]
    assert all(s.scores.shape[0] <= 4 and s.scores.shape[1] <= 3 for s in result.steps)
    last = result.steps[-1]
    np.testing.assert_allclose(last.output, sdpa_numpy(q, k, v), atol=1e-12)
    # After the first tile of the first block, rows of the second block are untouched.
    assert np.isneginf(result.steps[0].m[4:]).all() and (result.steps[0].l[4:] == 0).all()


def test_online_softmax_trace_by_hand():
    # One query, scores 0, log 2, log 3 (q . k / sqrt(1)), two blocks: [0, log 2] then [log 3].
    q = np.array([1.0])
    k = np.array([[0.0], [np.log(2)], [np.log(3)]])
    v = np.array([[1.0], [2.0], [3.0]])
    trace = online_softmax_trace(q, k, v, block_size=2)
    np.testing.assert_allclose(trace.running_max, [np.log(2), np.log(3)])
    np.testing.assert_allclose(trace.normaliser, [1.5, 2.0])  # (1 + 2) / 2, then 1.5 * 2/3 + 1
    np.testing.assert_allclose(trace.output[:, 0], [(1 + 4) / 3, (1 + 4 + 9) / 6])
    np.testing.assert_allclose(trace.lse, np.log(6))
    assert trace.blocks == [(0, 2), (2, 3)] and [len(s) for s in trace.scores] == [2, 1]


def test_online_softmax_step_starts_from_nothing():
    m, l, acc = online_softmax_step(np.array([-np.inf]), np.zeros(1), np.zeros((1, 2)),
                                    np.array([[-np.inf, -np.inf]]), np.ones((2, 2)))
    assert np.isneginf(m[0]) and l[0] == 0 and (acc == 0).all()


@pytest.mark.parametrize("kwargs, match", [({"block_q": 0}, "block_q"), ({"block_k": 1.5}, "block_k")])
def test_bad_blocks_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        tiled_attention(*qkv(), **kwargs)


def test_bad_shapes_are_named():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="d_k"):
        tiled_attention(q[:, :3], k, v)
    with pytest.raises(ValueError, match="flash_attention"):
        tiled_attention(q[None], k, v)
    with pytest.raises(ValueError, match="one query"):
        online_softmax_trace(q, k, v, 2)


@settings(max_examples=40, deadline=None)
@given(n_q=st.integers(1, 12), n_k=st.integers(1, 12), d=st.integers(1, 6), block_q=st.integers(1, 13),
       block_k=st.integers(1, 13), causal=st.booleans(), seed=st.integers(0, 10_000))
def test_tiled_equals_the_formula_hypothesis(n_q, n_k, d, block_q, block_k, causal, seed):
    q, k, v = qkv(n_q, n_k, d, d, seed=seed)
    mask = np.tril(np.ones((n_q, n_k), dtype=bool)) if causal else None
    ref, _ = scaled_dot_product_attention(q, k, v, mask=mask)
    result = tiled_attention(q, k, v, causal=causal, block_q=block_q, block_k=block_k)
    np.testing.assert_allclose(result.output, ref, rtol=1e-10, atol=1e-12)
    flash = flash_attention(*(torch.from_numpy(a) for a in (q, k, v)), is_causal=causal, block_q=block_q,
                            block_k=block_k)
    np.testing.assert_allclose(flash.numpy(), ref, rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------- torch path


def tensors(shape_q=(2, 3, 10, 8), n_k=12, d_v=6, dtype=torch.float32, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(*shape_q, generator=g, dtype=dtype)
    k = torch.randn(*shape_q[:-2], n_k, shape_q[-1], generator=g, dtype=dtype)
    v = torch.randn(*shape_q[:-2], n_k, d_v, generator=g, dtype=dtype)
    return [t.requires_grad_(grad) for t in (q, k, v)]


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.float64, 1e-12)])
@pytest.mark.parametrize("is_causal", [False, True])
@pytest.mark.parametrize("blocks", [(4, 5), (16, 16), (3, 12)])
def test_flash_equals_sdpa(dtype, tol, is_causal, blocks):
    q, k, v = tensors(dtype=dtype)
    out = flash_attention(q, k, v, is_causal=is_causal, block_q=blocks[0], block_k=blocks[1])
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal)
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)


def test_flash_with_padding_mask_and_fully_masked_rows():
    q, k, v = tensors((2, 4, 7, 8), n_k=7, dtype=torch.float64)
    keep = torch.from_numpy(padding_mask([7, 3], 7))[:, None, None, :]  # (batch, 1, 1, src_len)
    out = flash_attention(q, k, v, mask=keep, block_q=3, block_k=2)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=keep))
    rows = torch.ones(7, 7, dtype=torch.bool)
    rows[4] = False
    out = flash_attention(q, k, v, mask=rows, block_q=3, block_k=2)
    torch.testing.assert_close(out, attention(q, k, v, mask=rows)[0])
    assert (out[..., 4, :] == 0).all()


def test_flash_lse_matches_logsumexp():
    q, k, v = tensors(dtype=torch.float64)
    out, lse = flash_attention(q, k, v, block_q=4, block_k=5, return_lse=True)
    s = q @ k.transpose(-2, -1) / 8 ** 0.5
    torch.testing.assert_close(lse, torch.logsumexp(s, dim=-1))
    assert not lse.requires_grad


@pytest.mark.parametrize("is_causal, with_mask", [(False, False), (True, False), (False, True)])
def test_flash_gradcheck_float64(is_causal, with_mask):
    q, k, v = tensors((1, 2, 5, 3), n_k=5, d_v=2, dtype=torch.float64, grad=True)
    mask = torch.from_numpy(padding_mask([3], 5))[:, None, :] if with_mask else None
    assert torch.autograd.gradcheck(
        lambda a, b, c: flash_attention(a, b, c, mask=mask, is_causal=is_causal, block_q=2, block_k=3), (q, k, v))


@pytest.mark.parametrize("is_causal", [False, True])
def test_flash_gradients_equal_sdpa(is_causal):
    q, k, v = tensors((2, 2, 9, 4), n_k=9, d_v=5, dtype=torch.float64, grad=True)
    g = torch.randn(2, 2, 9, 5, dtype=torch.float64)
    ours = torch.autograd.grad(flash_attention(q, k, v, is_causal=is_causal, block_q=4, block_k=2), (q, k, v), g)
    ref = torch.autograd.grad(F.scaled_dot_product_attention(q, k, v, is_causal=is_causal), (q, k, v), g)
    for a, b in zip(ours, ref):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_flash_fully_masked_row_has_zero_gradient():
    q, k, v = tensors((1, 4, 3), n_k=4, d_v=2, dtype=torch.float64, grad=True)
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[1] = False
    flash_attention(q, k, v, mask=mask, block_q=2, block_k=2).sum().backward()
    assert (q.grad[:, 1] == 0).all() and torch.isfinite(k.grad).all() and torch.isfinite(v.grad).all()


def test_flash_bad_input_is_named():
    q, k, v = tensors()
    with pytest.raises(ValueError, match="block_k"):
        flash_attention(q, k, v, block_k=0)
    with pytest.raises(ValueError, match="leading"):
        flash_attention(q, k[:1], v[:1])
    with pytest.raises(TypeError, match="boolean"):
        flash_attention(q, k, v, mask=torch.ones(10, 12))
