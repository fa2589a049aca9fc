"""Gated attention (Qiu et al. 2025): the gate's limits, gradients, the cache, the spec."""

import pytest
import torch

from attncourse.nn.attention import merge_heads
from attncourse.nn.causal_attention import CausalSelfAttention
from attncourse.nn.gated import GatedOptions, GatedSelfAttention
from attncourse.nn.gpt import GPT
from attncourse.nn.spec import (
    ATTENTION_VARIANTS,
    AttentionSpec,
    DecoderSpec,
    PositionSpec,
)


def pair(positional="rope", num_kv_heads=2, seed=0):
    torch.manual_seed(seed)
    gated = GatedSelfAttention(16, 4, num_kv_heads, positional).double()
    plain = CausalSelfAttention(16, 4, num_kv_heads, positional).double()
    state = {k: v for k, v in gated.state_dict().items() if not k.startswith("w_g")}
    plain.load_state_dict(state)
    return gated, plain


@pytest.mark.parametrize("positional", [None, "rope", "alibi"])
def test_a_gate_of_one_is_the_ungated_attention(positional):
    gated, plain = pair(positional)
    with torch.no_grad():
        gated.w_g.weight.zero_()
        gated.w_g.bias.fill_(40.0)  # sigmoid(40) = 1 - 4e-18
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    torch.testing.assert_close(gated(x)[0], plain(x)[0], rtol=0, atol=1e-12)


def test_the_gate_multiplies_each_head_feature_before_w_o():
    gated, plain = pair(None)
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    out, weights = gated(x, need_weights=True)
    v = plain.w_v(x).view(2, 5, 2, 4).transpose(1, 2).repeat_interleave(2, dim=1)
    heads = merge_heads(weights @ v)                        # (batch, n, h d_k)
    gate = torch.sigmoid(x @ gated.w_g.weight.T + gated.w_g.bias)
    torch.testing.assert_close(out, (heads * gate) @ gated.w_o.weight.T, rtol=0, atol=1e-12)
    torch.testing.assert_close(gated.last_gate, gate)
    assert gate.shape == (2, 5, 16)  # elementwise, head-specific


def test_gradients_reach_the_gate_and_the_input():
    gated, _ = pair()
    x = torch.randn(2, 5, 16, dtype=torch.float64, requires_grad=True)
    gated(x)[0].sum().backward()
    assert x.grad.abs().sum() > 0 and gated.w_g.weight.grad.abs().sum() > 0 and gated.w_g.bias.grad.abs().sum() > 0
    assert torch.autograd.gradcheck(lambda t: gated(t)[0], (x[:1, :3].detach().requires_grad_(),))


def test_cached_decoding_equals_the_full_forward():
    gated, _ = pair("rope")
    x = torch.randn(1, 7, 16, dtype=torch.float64)
    cache = gated.empty_cache(1)
    steps = [gated(x[:, :3], kv_cache=cache)[0]] + [gated(x[:, t:t + 1], kv_cache=cache)[0] for t in range(3, 7)]
    torch.testing.assert_close(torch.cat(steps, 1), gated(x)[0], rtol=0, atol=1e-12)


def test_registered_and_built_from_a_spec_with_the_gqa_options():
    assert ATTENTION_VARIANTS["gated"].options is GatedOptions
    spec = DecoderSpec(12, d_model=16, num_heads=4, attention=AttentionSpec("gated", {"num_kv_heads": 2}),
                       positions=PositionSpec("rope", rope_scaling="pi", rope_factor=2))
    model = GPT(spec=spec)
    assert all(isinstance(b.attn, GatedSelfAttention) and b.attn.num_kv_heads == 2 for b in model.blocks)
    assert GPT.from_config(model.config).spec == spec
    extra = sum(p.numel() for p in model.parameters()) - sum(
        p.numel() for p in GPT(spec=DecoderSpec(12, d_model=16, num_heads=4, attention={"name": "gqa",
                               "num_kv_heads": 2})).parameters())
    assert extra == 2 * (16 * 16 + 16)  # W_g and b_g per layer
