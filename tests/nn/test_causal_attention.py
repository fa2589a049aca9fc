"""Grouped-query attention against MultiHeadAttention, scaled_dot_product_attention(enable_gqa) and a loop."""

import math

import pytest
import torch
import torch.nn.functional as F

from attncourse.nn.alibi import alibi_bias
from attncourse.nn.attention import MultiHeadAttention
from attncourse.nn.causal_attention import CausalSelfAttention, allowed_keys, repeat_kv
from attncourse.nn.rope import apply_rope


def _copy_mha(gqa: CausalSelfAttention) -> MultiHeadAttention:
    mha = MultiHeadAttention(gqa.d_model, gqa.num_heads, bias=False)
    for name in ("w_q", "w_k", "w_v", "w_o"):
        getattr(mha, name).weight.data.copy_(getattr(gqa, name).weight.data)
    return mha


@pytest.mark.parametrize("fast", [True, False])
def test_equals_multihead_attention_when_kv_heads_equal_heads(fast):
    torch.manual_seed(0)
    gqa = CausalSelfAttention(32, 4, num_kv_heads=4).double()
    mha = _copy_mha(gqa).double()
    x = torch.randn(3, 9, 32, dtype=torch.float64)
    causal = torch.ones(9, 9, dtype=torch.bool).tril()
    expected, _ = mha(x, x, x, causal, fast=False)
    out, _ = gqa(x, fast=fast)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("num_kv_heads", [1, 2, 4, 8])
def test_equals_sdpa_with_enable_gqa(num_kv_heads):
    torch.manual_seed(1)
    gqa = CausalSelfAttention(64, 8, num_kv_heads=num_kv_heads).double()
    x = torch.randn(2, 11, 64, dtype=torch.float64)
    q = gqa.w_q(x).view(2, 11, 8, 8).transpose(1, 2)
    k = gqa.w_k(x).view(2, 11, num_kv_heads, 8).transpose(1, 2)
    v = gqa.w_v(x).view(2, 11, num_kv_heads, 8).transpose(1, 2)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    expected = gqa.w_o(ref.transpose(1, 2).reshape(2, 11, 64))
    for fast in (True, False):
        out, _ = gqa(x, fast=fast)
        torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


def test_parameters_shrink_with_kv_heads():
    sizes = {g: sum(p.numel() for p in CausalSelfAttention(64, 8, g).parameters()) for g in (1, 2, 4, 8)}
    for g, n in sizes.items():
        assert n == 2 * 64 * 64 + 2 * 64 * (8 * g)  # W^Q, W^O full; W^K, W^V g heads of d_k = 8


def test_repeat_kv_hand_computed():
    x = torch.arange(2.0).view(1, 2, 1, 1)
    assert repeat_kv(x, 4).flatten().tolist() == [0.0, 0.0, 1.0, 1.0]
    with pytest.raises(ValueError, match="multiple"):
        repeat_kv(x, 3)


def _loop_reference(gqa, x, bias=None, window=None):
    """Each query head attends with its group's key/value head, one query at a time."""
    h, g, d = gqa.num_heads, gqa.num_kv_heads, gqa.d_k
    T = x.shape[1]
    q = gqa.w_q(x).view(1, T, h, d).transpose(1, 2)[0]
    k = gqa.w_k(x).view(1, T, g, d).transpose(1, 2)[0]
    v = gqa.w_v(x).view(1, T, g, d).transpose(1, 2)[0]
    if gqa.positional == "rope":
        q, k = apply_rope(q, torch.arange(T)), apply_rope(k, torch.arange(T))
    out = torch.zeros(h, T, d, dtype=x.dtype)
    for head in range(h):
        kv = head // (h // g)
        for i in range(T):
            lo = 0 if window is None else max(0, i - window + 1)
            scores = k[kv, lo:i + 1] @ q[head, i] / math.sqrt(d)
            if bias is not None:
                scores = scores + bias[head, i, lo:i + 1]
            out[head, i] = torch.softmax(scores, 0) @ v[kv, lo:i + 1]
    return gqa.w_o(out.transpose(0, 1).reshape(1, T, h * d))


@pytest.mark.parametrize("positional,window", [("rope", None), ("alibi", None), (None, 3), ("alibi", 4)])
def test_positions_and_window_against_a_loop(positional, window):
    torch.manual_seed(2)
    gqa = CausalSelfAttention(32, 4, 2, positional=positional, window=window).double()
    x = torch.randn(1, 10, 32, dtype=torch.float64)
    bias = alibi_bias(4, 10, 10).double() if positional == "alibi" else None
    expected = _loop_reference(gqa, x, bias, window)
    for fast in (True, False):
        out, _ = gqa(x, fast=fast)
        torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("positional", [None, "rope", "alibi"])
def test_cache_gives_the_same_outputs(positional):
    torch.manual_seed(3)
    gqa = CausalSelfAttention(32, 4, 1, positional=positional).double()
    x = torch.randn(2, 8, 32, dtype=torch.float64)
    full, _ = gqa(x)
    cache = gqa.empty_cache(2)
    steps = [gqa(x[:, :3], kv_cache=cache)[0]] + [gqa(x[:, t:t + 1], kv_cache=cache)[0] for t in range(3, 8)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-10, atol=1e-10)
    assert cache.k.shape == (2, 1, 8, 8)  # one kv head: the cache holds 1 head, not 4


def test_weights_and_fully_masked_rows():
    gqa = CausalSelfAttention(16, 2, 1)
    x = torch.randn(2, 5, 16)
    pad = torch.tensor([[False, False, True, True, True], [True] * 5])  # left padding in row 0
    out, weights = gqa(x, mask=pad[:, None, None, :], need_weights=True)
    fast, _ = gqa(x, mask=pad[:, None, None, :])
    assert torch.all(weights[0, :, :2] == 0)  # queries at padding see nothing
    torch.testing.assert_close(weights[0, :, 2:].sum(-1), torch.ones(2, 3))
    torch.testing.assert_close(out, fast, rtol=1e-5, atol=1e-6)
    assert torch.isfinite(fast).all()


def test_allowed_keys_and_errors():
    assert allowed_keys(3, 3).tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    assert allowed_keys(1, 4, window=2).tolist() == [[False, False, True, True]]
    assert allowed_keys(2, 2, causal=False) is None
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        CausalSelfAttention(64, 8, 3)
    with pytest.raises(ValueError, match="positional"):
        CausalSelfAttention(64, 8, positional="xpos")
    with pytest.raises(ValueError, match="d_model"):
        CausalSelfAttention(64, 8)(torch.zeros(1, 2, 32))


def test_window_mask_is_the_functional_sliding_window_mask():
    from attncourse.functional import sliding_window_mask

    for n, w in [(6, 1), (7, 3), (5, 9)]:
        assert (allowed_keys(n, n, window=w).numpy() == sliding_window_mask(n, w)).all()


@pytest.mark.parametrize("positional", [None, "alibi"])
def test_fast_and_written_out_paths_have_the_same_gradients(positional):
    torch.manual_seed(4)
    gqa = CausalSelfAttention(32, 4, 2, positional=positional).double()
    x = torch.randn(2, 6, 32, dtype=torch.float64, requires_grad=True)
    grads = []
    for fast in (True, False):
        out, _ = gqa(x, fast=fast)
        (out ** 2).sum().backward()
        grads.append(x.grad.clone())
        x.grad = None
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-10, atol=1e-10)


# ----------------------------------------------------------------------------- one window, clear errors


@pytest.mark.parametrize("n, w", [(9, 3), (8, 5), (6, 1), (5, 9)])
def test_non_causal_window_is_the_centred_sliding_window_mask(n, w):
    from attncourse.functional import sliding_window_mask

    allowed = allowed_keys(n, n, causal=False, window=w)
    expected = sliding_window_mask(n, w, causal=False)
    assert (torch.ones(n, n, dtype=torch.bool) if allowed is None else allowed).numpy().tolist() == expected.tolist()


def test_non_causal_window_attention_against_a_band_loop():
    torch.manual_seed(5)
    gqa = CausalSelfAttention(16, 2, 1, causal=False, window=3).double()
    x = torch.randn(1, 7, 16, dtype=torch.float64)
    q = gqa.w_q(x).view(7, 2, 8).transpose(0, 1)
    k, v = gqa.w_k(x).view(7, 8), gqa.w_v(x).view(7, 8)
    out = torch.zeros(2, 7, 8, dtype=torch.float64)
    for head in range(2):
        for i in range(7):
            keys = slice(max(0, i - 1), i + 2)   # |i - j| <= 1: three keys
            weights = torch.softmax(k[keys] @ q[head, i] / math.sqrt(8), 0)
            out[head, i] = weights @ v[keys]
    expected = gqa.w_o(out.transpose(0, 1).reshape(1, 7, 16))
    for fast in (True, False):
        torch.testing.assert_close(gqa(x, fast=fast)[0], expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kwargs, name", [
    (dict(num_kv_heads=0), "num_kv_heads"), (dict(num_kv_heads=-2), "num_kv_heads"),
    (dict(num_kv_heads=2.5), "num_kv_heads"), (dict(window=2.5), "window"),
    (dict(window=0), "window"), (dict(window=4, causal=False), "odd"), (dict(num_heads=0), "num_heads"),
])
def test_bad_arguments_are_named(kwargs, name):
    args = dict(d_model=16, num_heads=4) | kwargs
    with pytest.raises(ValueError, match=name) as info:
        CausalSelfAttention(**args)
    assert "\n" not in str(info.value)


def test_bad_masks_and_caches_get_one_line_errors():
    gqa = CausalSelfAttention(16, 4, 2)
    x = torch.randn(2, 5, 16)
    with pytest.raises(ValueError, match="bool"):
        gqa(x, mask=torch.ones(2, 1, 1, 5))
    with pytest.raises(ValueError, match=r"\(2, 4, 5, 5\)"):
        gqa(x, mask=torch.ones(2, 1, 1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="d_k=4"):
        gqa(x, kv_cache=CausalSelfAttention(32, 4, 2).empty_cache(2))
    with pytest.raises(ValueError, match="num_kv_heads=2"):
        gqa(x, kv_cache=CausalSelfAttention(16, 4, 4).empty_cache(2))
    # A right mask still works, on both paths.
    keep = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    torch.testing.assert_close(gqa(x, mask=keep)[0], gqa(x)[0])
