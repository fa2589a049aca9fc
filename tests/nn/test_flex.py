"""FlexAttention from the course's masks and score-only variants, against the course's own attention."""

import warnings

import pytest
import torch

from attncourse.nn.alibi import alibi_bias
from attncourse.nn.attend import allowed_keys, softmax_attend
from attncourse.nn.causal_attention import CausalSelfAttention
from attncourse.nn.flex import flex_heads, mask_mod_from_allowed, use_flex
from attncourse.nn.softcap import SoftCapAttention, SoftCapOptions

warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")


def _qkv(h=4, g=2, n=24, m=None, d=8, batch=2, seed=0):
    gen = torch.Generator().manual_seed(seed)
    m = n if m is None else m
    q = torch.randn(batch, h, n, d, generator=gen, dtype=torch.float64)
    k = torch.randn(batch, g, m, d, generator=gen, dtype=torch.float64)
    return q, k, torch.randn(batch, g, m, d, generator=gen, dtype=torch.float64)


@pytest.mark.parametrize("causal, window", [(True, None), (True, 5), (False, 7), (False, None)])
def test_flex_heads_equal_the_courses_softmax_attend(causal, window):
    q, k, v = _qkv()
    allowed = allowed_keys(24, 24, causal, window)
    want, _ = softmax_attend(q, k, v, allowed)
    assert torch.allclose(flex_heads(q, k, v, allowed), want, rtol=0, atol=1e-12)


def test_a_padding_mask_per_sequence_and_rows_with_no_key_give_zeros():
    q, k, v = _qkv(g=4, n=20)
    allowed = torch.ones(2, 1, 20, 20, dtype=torch.bool)
    allowed[1, :, :, 15:] = False  # the second sequence is padded after 15 tokens
    allowed[1, :, 3] = False  # and one query sees nothing
    want, _ = softmax_attend(q, k, v, allowed)
    got = flex_heads(q, k, v, allowed, block_size=8)
    assert torch.allclose(got, want, rtol=0, atol=1e-12)
    assert got[1, :, 3].abs().max() == 0


def test_a_score_mod_adds_alibis_bias():
    q, k, v = _qkv(g=4, n=16)
    bias = alibi_bias(4, 16, 16, dtype=torch.float64)
    want, _ = softmax_attend(q, k, v, allowed_keys(16, 16), bias)
    got = flex_heads(q, k, v, allowed_keys(16, 16), lambda s, b, h, i, j: s + bias[h, i, j])
    assert torch.allclose(got, want, rtol=0, atol=1e-12)


def test_bad_masks_and_heads_are_refused_in_one_line():
    q, k, v = _qkv()
    with pytest.raises(ValueError, match="allowed must be a bool"):
        mask_mod_from_allowed(torch.ones(24, 24))
    with pytest.raises(ValueError, match="allowed must be a bool"):
        mask_mod_from_allowed(torch.ones(2, 4, 24, 24, dtype=torch.bool))
    with pytest.raises(ValueError, match="g dividing h"):
        flex_heads(q, k[:, :1].expand(-1, 3, -1, -1), v[:, :1].expand(-1, 3, -1, -1))


def _softcap(cap, positional="rope", seed=0):
    torch.manual_seed(seed)
    return SoftCapAttention.from_options(SoftCapOptions(num_kv_heads=2, softcap=cap), d_model=32, num_heads=4,
                                         causal=True, positional=positional, rope_base=10000.0).double()


@pytest.mark.parametrize("positional", ["rope", "alibi"])
def test_use_flex_gives_the_variants_own_outputs_and_puts_attend_back(positional):
    module = _softcap(2.0, positional)
    x = torch.randn(2, 20, 32, dtype=torch.float64)
    with torch.no_grad():
        own, _ = module(x)
        with use_flex(module) as routed:
            flexed, _ = module(x)
            weighted, weights = module(x, need_weights=True)  # flex gives no weights: its own path
    assert routed == 1 and "attend" not in module.__dict__
    assert torch.allclose(flexed, own, rtol=0, atol=1e-12)
    assert torch.allclose(weighted, own, rtol=0, atol=1e-12) and weights.shape == (2, 4, 20, 20)


def test_use_flex_routes_nothing_without_a_score_mod_and_restores_after_an_error():
    plain = CausalSelfAttention(32, 4)
    with use_flex(plain) as routed:
        assert routed == 0
    module = _softcap(2.0)
    with pytest.raises(RuntimeError, match="inside"), use_flex(module):
        raise RuntimeError("inside")
    assert "attend" not in module.__dict__


def test_softcap_scores_are_capped_before_the_softmax_and_a_huge_cap_is_plain_attention():
    module = _softcap(0.5)
    q, k, v = _qkv(n=10)
    allowed = allowed_keys(10, 10)
    heads, weights = module.attend(q, k, v, allowed, None, need_weights=True)
    scores = q @ k.repeat_interleave(2, 1).transpose(-2, -1) / 8 ** 0.5
    capped = (0.5 * torch.tanh(scores / 0.5)).masked_fill(~allowed, float("-inf"))
    assert torch.allclose(weights, capped.softmax(-1), rtol=0, atol=1e-12)
    assert torch.allclose(heads, weights @ v.repeat_interleave(2, 1), rtol=0, atol=1e-12)
    # a cap of 0.5 keeps every score within 0.5 of 0: in a row, no weight above e^1 times another's
    logs = weights.log()
    span = logs.masked_fill(~allowed, -1e9).amax(-1) - logs.masked_fill(~allowed, 1e9).amin(-1)
    assert span.max() < 1.0 and span.max() > 0.5
    big = _softcap(1e6)
    plain, _ = softmax_attend(q, k, v, allowed)
    assert torch.allclose(big.attend(q, k, v, allowed, None)[0], plain, rtol=0, atol=1e-9)


def test_softcap_is_a_registered_variant_with_its_option():
    from attncourse.nn.registry import ATTENTION_VARIANTS
    from attncourse.recipes.lm_config import LMConfig

    assert ATTENTION_VARIANTS["softcap"].options is SoftCapOptions
    assert LMConfig(attention="softcap", softcap=30.0).softcap == 30.0
    with pytest.raises(ValueError, match="softcap must be a positive"):
        SoftCapOptions(softcap=0.0)
