"""Tests for multi-head attention (attncourse.nn.attention)."""

from __future__ import annotations

import pytest
import torch

from attncourse.functional.torch_attention import attention
from attncourse.nn.attention import (
    KVCache,
    MultiHeadAttention,
    merge_heads,
    split_heads,
)

D_MODEL, HEADS = 16, 2


def make_mha(seed=0, dtype=torch.float64, **kw):
    torch.manual_seed(seed)
    return MultiHeadAttention(D_MODEL, HEADS, **kw).to(dtype)


def inputs(batch=3, tgt_len=4, src_len=5, seed=1, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, tgt_len, D_MODEL, generator=g, dtype=dtype)
    kv = torch.randn(batch, src_len, D_MODEL, generator=g, dtype=dtype)
    return q, kv


def key_padding(lengths, src_len):
    return torch.arange(src_len)[None, :] < torch.tensor(lengths)[:, None]


def test_split_and_merge_are_inverse_and_slice_the_feature_axis():
    x = torch.arange(2 * 3 * 8, dtype=torch.float32).reshape(2, 3, 8)
    heads = split_heads(x, 4)
    assert heads.shape == (2, 4, 3, 2)
    torch.testing.assert_close(heads[:, 1], x[..., 2:4])
    torch.testing.assert_close(merge_heads(heads), x)
    with pytest.raises(ValueError, match="num_heads=3"):
        split_heads(x, 3)


def test_indivisible_width_names_both_sizes():
    with pytest.raises(ValueError, match=r"d_model=10.*num_heads=4"):
        MultiHeadAttention(10, 4)


def test_teaching_path_is_per_head_attention_then_w_o():
    mha = make_mha()
    q_in, kv_in = inputs()
    mask = key_padding([5, 3, 1], 5)[:, None, None, :]
    out, weights = mha(q_in, kv_in, kv_in, mask, need_weights=True)
    d_k = D_MODEL // HEADS
    heads = []
    for i in range(HEADS):
        rows = slice(i * d_k, (i + 1) * d_k)
        q = q_in @ mha.w_q.weight[rows].T + mha.w_q.bias[rows]
        k = kv_in @ mha.w_k.weight[rows].T + mha.w_k.bias[rows]
        v = kv_in @ mha.w_v.weight[rows].T + mha.w_v.bias[rows]
        head, w = attention(q, k, v, mask[:, 0])
        torch.testing.assert_close(weights[:, i], w)
        heads.append(head)
    torch.testing.assert_close(out, mha.w_o(torch.cat(heads, dim=-1)))


@pytest.mark.parametrize("masking", ["none", "padding", "causal"])
def test_fast_and_teaching_paths_agree(masking):
    mha = make_mha()
    q_in, kv_in = inputs(tgt_len=5, src_len=5)
    mask = {"none": None, "padding": key_padding([5, 2, 4], 5)[:, None, None, :],
            "causal": torch.ones(5, 5, dtype=torch.bool).tril()}[masking]
    fast, none = mha(q_in, kv_in, kv_in, mask)
    slow, _ = mha(q_in, kv_in, kv_in, mask, fast=False)
    assert none is None
    torch.testing.assert_close(fast, slow, atol=1e-12, rtol=0)


@pytest.mark.parametrize("fast", [True, False])
def test_fully_masked_query_gives_zeros_and_finite_gradients(fast):
    mha = make_mha(bias=False)
    q_in, kv_in = inputs(batch=2, tgt_len=3, src_len=4)
    kv_in.requires_grad_(True)
    mask = torch.ones(2, 1, 3, 4, dtype=torch.bool)
    mask[0, :, 1] = False  # query 1 of sentence 0 may attend to nothing
    mask[1] = False  # sentence 1: nothing at all
    out, _ = mha(q_in, kv_in, kv_in, mask, fast=fast)
    assert torch.isfinite(out).all()
    assert torch.equal(out[0, 1], torch.zeros(D_MODEL, dtype=out.dtype))
    assert torch.equal(out[1], torch.zeros(3, D_MODEL, dtype=out.dtype))
    assert out[0, 0].abs().sum() > 0
    out.sum().backward()
    assert torch.isfinite(kv_in.grad).all()
    _, weights = mha(q_in, kv_in, kv_in, mask, need_weights=True)
    assert torch.equal(weights[1], torch.zeros_like(weights[1]))


def test_padded_keys_get_exactly_zero_weight():
    mha = make_mha()
    q_in, kv_in = inputs()
    padding = key_padding([5, 3, 1], 5)
    _, weights = mha(q_in, kv_in, kv_in, padding[:, None, None, :], need_weights=True)
    assert torch.all(weights.masked_select(~padding[:, None, None, :].expand_as(weights)) == 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, HEADS, 4, dtype=weights.dtype))


def test_bad_masks_and_shapes_are_refused():
    mha = make_mha()
    q_in, kv_in = inputs()
    with pytest.raises(ValueError, match=r"mask\[:, None, None, :\]"):
        mha(q_in, kv_in, kv_in, key_padding([5, 3, 1], 5))  # (batch, src_len) needs broadcasting
    with pytest.raises(TypeError, match="boolean"):
        mha(q_in, kv_in, kv_in, torch.ones(4, 5))
    with pytest.raises(ValueError, match="d_model=16"):
        mha(q_in[..., :8], kv_in, kv_in)
    with pytest.raises(ValueError, match="batch"):
        mha(q_in[:2], kv_in, kv_in)


def test_weights_dropout_only_in_training():
    mha = make_mha(dropout=0.5)
    q_in, kv_in = inputs()
    mha.eval()
    a, _ = mha(q_in, kv_in, kv_in)
    b, _ = mha(q_in, kv_in, kv_in, fast=False)
    torch.testing.assert_close(a, b)
    mha.train()
    torch.manual_seed(0)
    c, _ = mha(q_in, kv_in, kv_in, fast=False)
    assert not torch.allclose(a, c)


def test_cache_appends_and_equals_full_attention():
    mha = make_mha()
    x, _ = inputs(batch=2, tgt_len=4)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    full, _ = mha(x, x, x, causal)
    cache = mha.empty_cache(2)
    steps = []
    for t in range(4):
        old_k = cache.k
        out, _ = mha(x[:, t : t + 1], x[:, t : t + 1], x[:, t : t + 1], kv_cache=cache)
        assert len(cache) == t + 1 and old_k.shape[2] == t  # rebound, the old tensor untouched
        steps.append(out)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=1e-12, rtol=0)
    # Keys and values only from the cache (cross-attention while decoding).
    projected = mha.project_kv(x, x)
    assert isinstance(projected, KVCache)
    from_cache, _ = mha(x, None, None, kv_cache=projected)
    torch.testing.assert_close(from_cache, mha(x, x, x)[0], atol=1e-12, rtol=0)
    with pytest.raises(ValueError, match="kv_cache"):
        mha(x, None, None)


@pytest.mark.parametrize("fast", [True, False])
def test_equals_torch_multihead_attention_with_padding_and_causal_masks(fast):
    mha = make_mha(seed=3)
    ref = mha.to_torch()
    q_in, kv_in = inputs(batch=3, tgt_len=5, src_len=5, seed=4)
    padding = key_padding([5, 4, 2], 5)
    # Key padding: ours True = attend, torch's key_padding_mask True = ignore.
    ours, ours_w = mha(q_in, kv_in, kv_in, padding[:, None, None, :], need_weights=not fast, fast=fast)
    theirs, theirs_w = ref(q_in, kv_in, kv_in, key_padding_mask=~padding, average_attn_weights=False)
    torch.testing.assert_close(ours, theirs, atol=1e-10, rtol=0)
    if not fast:
        torch.testing.assert_close(ours_w, theirs_w, atol=1e-10, rtol=0)
    # Causal self-attention: torch's boolean attn_mask is also True = not allowed.
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    ours, _ = mha(kv_in, kv_in, kv_in, causal, fast=fast)
    theirs, _ = ref(kv_in, kv_in, kv_in, attn_mask=~causal, need_weights=False)
    torch.testing.assert_close(ours, theirs, atol=1e-10, rtol=0)


def test_the_torch_copy_without_biases_is_a_copy():
    mha = make_mha(seed=5, bias=False)
    ref = mha.to_torch()
    assert ref.in_proj_bias is None and ref.out_proj.bias is None
    q_in, kv_in = inputs(seed=6)
    ours, _ = mha(q_in, kv_in, kv_in)
    theirs, _ = ref(q_in, kv_in, kv_in, need_weights=False)
    torch.testing.assert_close(ours, theirs, atol=1e-10, rtol=0)
    with torch.no_grad():
        mha.w_o.weight.zero_()
    assert ref.out_proj.weight.abs().sum() > 0  # a copy, not a view
