"""RoPE and ALiBi against independent references: complex multiplication, the paper's slopes."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attncourse.nn.alibi import alibi_bias, alibi_slopes
from attncourse.nn.rope import apply_rope, rope_frequencies


def test_rope_equals_complex_multiplication():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 7, 8, dtype=torch.float64)
    positions = torch.tensor([0, 1, 2, 5, 9, 100, 1000])
    z = torch.view_as_complex(x.reshape(2, 3, 7, 4, 2).contiguous())
    theta = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    expected = torch.view_as_real(z * torch.polar(torch.ones(7, 4, dtype=torch.float64),
                                                  positions[:, None] * theta)).reshape(2, 3, 7, 8)
    torch.testing.assert_close(apply_rope(x, positions), expected, rtol=1e-12, atol=1e-12)


def test_rope_position_zero_is_identity_and_norms_are_kept():
    x = torch.randn(5, 6, dtype=torch.float64)
    out = apply_rope(x, torch.arange(5))
    torch.testing.assert_close(out[0], x[0])
    torch.testing.assert_close(out.norm(dim=-1), x.norm(dim=-1))


def test_rope_frequencies_hand_computed():
    torch.testing.assert_close(rope_frequencies(4, 100.0), torch.tensor([1.0, 0.1], dtype=torch.float64))


@settings(max_examples=40, deadline=None)
@given(m=st.integers(0, 500), n=st.integers(0, 500), shift=st.integers(0, 500))
def test_rope_score_depends_only_on_the_offset(m, n, shift):
    gen = torch.Generator().manual_seed(m * 1000 + n)
    q = torch.randn(1, 16, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 16, generator=gen, dtype=torch.float64)
    score = (apply_rope(q, torch.tensor([m])) @ apply_rope(k, torch.tensor([n])).T).item()
    shifted = (apply_rope(q, torch.tensor([m + shift])) @ apply_rope(k, torch.tensor([n + shift])).T).item()
    assert math.isclose(score, shifted, rel_tol=1e-9, abs_tol=1e-9)


@pytest.mark.parametrize("d_k", [0, 3])
def test_rope_rejects_odd_width(d_k):
    with pytest.raises(ValueError, match="even d_k"):
        rope_frequencies(d_k)


def test_rope_rejects_positions_of_wrong_length():
    with pytest.raises(ValueError, match="positions"):
        apply_rope(torch.zeros(4, 8), torch.arange(3))


def test_alibi_slopes_for_8_heads_are_the_papers():
    torch.testing.assert_close(alibi_slopes(8), torch.tensor([1 / 2 ** k for k in range(1, 9)], dtype=torch.float64))


def test_alibi_slopes_for_16_and_not_powers_of_two():
    torch.testing.assert_close(alibi_slopes(16), torch.tensor([2 ** (-k / 2) for k in range(1, 17)],
                                                              dtype=torch.float64))
    # 12 heads: the 8 slopes of 8 heads, then slopes 1, 3, 5, 7 of 16 heads (Press et al.'s code)
    expected = [1 / 2 ** k for k in range(1, 9)] + [2 ** (-k / 2) for k in (1, 3, 5, 7)]
    torch.testing.assert_close(alibi_slopes(12), torch.tensor(expected, dtype=torch.float64))
    with pytest.raises(ValueError):
        alibi_slopes(0)


def test_alibi_bias_hand_computed():
    bias = alibi_bias(2, 3, 3)
    slopes = [1 / 16, 1 / 256]  # 2 heads: 2^-4, 2^-8
    for h, m in enumerate(slopes):
        expected = torch.tensor([[0, -m, -2 * m], [-m, 0, -m], [-2 * m, -m, 0]], dtype=torch.float32)
        torch.testing.assert_close(bias[h], expected)
    # the last query over a cache of 5 keys: distances 4, 3, 2, 1, 0
    torch.testing.assert_close(alibi_bias(8, 1, 5)[0, 0], -0.5 * torch.tensor([4.0, 3, 2, 1, 0]))


# ----------------------------------------------------------------------------- alibi_bias dtype and errors


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_alibi_bias_follows_the_dtype_asked_for(dtype):
    bias = alibi_bias(6, 3, 7, dtype=dtype)
    assert bias.dtype == dtype
    exact = -alibi_slopes(6)[:, None, None] * (torch.arange(3.0)[:, None] + 4 - torch.arange(7.0)).abs()
    torch.testing.assert_close(bias, exact.to(dtype), rtol=0, atol=0)
    assert alibi_bias(2, 1, 1).dtype == torch.get_default_dtype()


def test_alibi_bias_refuses_more_queries_than_keys():
    with pytest.raises(ValueError, match="tgt_len=5 > src_len=3"):
        alibi_bias(4, 5, 3)
    with pytest.raises(ValueError, match="offset"):
        alibi_bias(4, 2, 3, offset=2)


def test_alibi_model_in_float64_uses_a_float64_bias():
    from attncourse.nn.causal_attention import CausalSelfAttention

    torch.manual_seed(1)
    attn = CausalSelfAttention(24, 6, positional="alibi").double()   # 6 heads: slopes not exact in float32
    x = torch.randn(1, 9, 24, dtype=torch.float64)
    _, weights = attn(x, need_weights=True)
    q = attn.w_q(x).view(9, 6, 4).transpose(0, 1)
    k = attn.w_k(x).view(9, 6, 4).transpose(0, 1)
    scores = q @ k.transpose(-2, -1) / 2 + alibi_bias(6, 9, 9, dtype=torch.float64)
    expected = scores.masked_fill(~torch.ones(9, 9, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
    torch.testing.assert_close(weights[0], expected, rtol=1e-14, atol=1e-14)
