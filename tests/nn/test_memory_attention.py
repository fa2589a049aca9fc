"""The memory variants (nn/memory_attention.py) against references written here from their papers'
equations, per head and per step; what the contract of tests/nn/test_decoder_attention.py leaves out:
the fixed size of the cache, the refusals and the options."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attncourse.functional.linear_attention import linear_attention
from attncourse.nn.gpt import GPT
from attncourse.nn.memory_attention import (
    DeltaNetAttention,
    GatedDeltaNetAttention,
    LinearMemoryAttention,
    MemoryOptions,
)
from attncourse.nn.spec import AttentionSpec, DecoderSpec, PositionSpec

D_MODEL, HEADS, D_K = 12, 3, 4


def _module(cls, seed=0, **kwargs):
    torch.manual_seed(seed)
    module = cls(D_MODEL, HEADS, **kwargs).double()
    for p in module.parameters():
        nn.init.normal_(p, std=0.4)
    return module


def _x(n=6, batch=2, seed=1):
    return torch.randn(batch, n, D_MODEL, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def _head(linear, x, head):
    return linear(x)[..., head * D_K:(head + 1) * D_K]


def test_linear_is_chapter_8s_causal_linear_attention_per_head():
    attn, x = _module(LinearMemoryAttention), _x()
    heads = torch.zeros(2, 6, D_MODEL, dtype=torch.float64)
    for b in range(2):
        for h in range(HEADS):
            q, k, v = (_head(w, x, h)[b].detach().numpy() for w in (attn.w_q, attn.w_k, attn.w_v))
            heads[b, :, h * D_K:(h + 1) * D_K] = torch.from_numpy(linear_attention(q, k, v, causal=True))
    torch.testing.assert_close(attn(x)[0], attn.w_o(heads), rtol=0, atol=1e-12)


@pytest.mark.parametrize("cls", [DeltaNetAttention, GatedDeltaNetAttention])
def test_the_delta_rules_per_head_and_step_as_the_papers_write_them(cls):
    attn, x = _module(cls, chunk_size=4), _x(n=7)
    heads = torch.zeros(2, 7, D_MODEL, dtype=torch.float64)
    eye = torch.eye(D_K, dtype=torch.float64)
    for b in range(2):
        for h in range(HEADS):
            q = F.normalize(F.silu(_head(attn.w_q, x, h)[b]), dim=-1)
            k = F.normalize(F.silu(_head(attn.w_k, x, h)[b]), dim=-1)
            v = _head(attn.w_v, x, h)[b]
            beta = torch.sigmoid(attn.w_beta(x)[b, :, h])
            if cls is GatedDeltaNetAttention:  # Mamba-2's a_t = exp(-A softplus(.)), A = exp(A_log)
                alpha = torch.exp(-torch.exp(attn.a_log[h]) * F.softplus(attn.w_a(x)[b, :, h]))
            else:
                alpha = torch.ones(7, dtype=torch.float64)
            s = torch.zeros(D_K, D_K, dtype=torch.float64)
            for t in range(7):
                s = alpha[t] * (eye - beta[t] * torch.outer(k[t], k[t])) @ s + beta[t] * torch.outer(k[t], v[t])
                heads[b, t, h * D_K:(h + 1) * D_K] = q[t] @ s
    torch.testing.assert_close(attn(x)[0], attn.w_o(heads), rtol=0, atol=1e-12)


@pytest.mark.parametrize("cls", [LinearMemoryAttention, DeltaNetAttention, GatedDeltaNetAttention])
def test_the_cache_keeps_its_size_whatever_the_tokens(cls):
    attn = _module(cls)
    cache = attn.empty_cache(2)
    sizes = []
    for n in (1, 5, 40):
        attn(_x(n=n), kv_cache=cache)
        sizes.append(cache.state.numel())
    rows = D_K + 1 if cls is LinearMemoryAttention else D_K
    assert sizes == [2 * HEADS * rows * D_K] * 3 == [2 * attn.state_numbers()] * 3
    assert len(cache) == 46 and attn.cache_numbers_per_token() == 0


def test_a_hidden_token_neither_writes_nor_makes_the_gated_memory_forget():
    attn, x = _module(GatedDeltaNetAttention), _x(n=5)
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    mask[:, ..., 2] = False
    out = attn(x, mask=mask)[0]
    # the same as the sequence with token 2 left out, at the other positions
    kept = torch.tensor([0, 1, 3, 4])
    torch.testing.assert_close(out[:, kept], attn(x[:, kept])[0], rtol=0, atol=1e-12)
    decay = attn.features(x, None)["decay"]
    assert (decay > 0).all() and (decay < 1).all()


def test_refusals_name_the_option():
    attn, x = _module(DeltaNetAttention), _x()
    per_query = torch.ones(6, 6, dtype=torch.bool).tril()
    with pytest.raises(ValueError, match="not choose them per query"):
        attn(x, mask=per_query)
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        MemoryOptions(chunk_size=0)
    with pytest.raises(ValueError, match="keeps no positions in its state"):
        AttentionSpec("deltanet").build(D_MODEL, HEADS, True, PositionSpec("rope"))
    with pytest.raises(ValueError, match="needs causal=True"):
        AttentionSpec("linear").build(D_MODEL, HEADS, False, PositionSpec("learned"))
    with pytest.raises(ValueError, match="divisible by num_heads"):
        DeltaNetAttention(10, 3)


def test_a_gpt_of_gated_deltanet_blocks_trains_a_step_and_generates_with_a_fixed_cache():
    torch.manual_seed(0)
    spec = DecoderSpec(11, d_model=D_MODEL, num_heads=HEADS, num_layers=2, max_len=32,
                       attention=AttentionSpec("gated-deltanet", {"chunk_size": 4}),
                       positions=PositionSpec("learned"))
    model = GPT(spec=spec)
    tokens = torch.randint(0, 11, (2, 10))
    loss = F.cross_entropy(model(tokens)[0][:, :-1].flatten(0, 1), tokens[:, 1:].flatten())
    loss.backward()
    assert all(p.grad is not None for p in model.parameters())
    assert model.cache_bytes_per_token() == 0
    caches = model.init_cache(2)
    model(tokens, caches)
    assert [len(c) for c in caches] == [10, 10]
    assert np.prod(caches[0].state.shape) == 2 * HEADS * D_K * D_K


def test_the_cache_in_bytes_grows_with_softmax_attention_and_not_with_a_memory():
    sizes = {}
    for name in ("gqa", "deltanet", "linear"):
        spec = DecoderSpec(11, d_model=D_MODEL, num_heads=HEADS, num_layers=2, max_len=32,
                           attention=AttentionSpec(name), positions=PositionSpec("learned"))
        model = GPT(spec=spec)  # float32: 4 bytes a number
        sizes[name] = [model.cache_bytes(n) for n in (0, 64, 512)]
    assert sizes["gqa"] == [0, 2 * 2 * HEADS * D_K * 64 * 4, 2 * 2 * HEADS * D_K * 512 * 4]
    assert sizes["deltanet"] == [2 * HEADS * D_K * D_K * 4] * 3
    assert sizes["linear"] == [2 * HEADS * D_K * (D_K + 1) * 4] * 3
    with pytest.raises(ValueError, match="tokens must be a non-negative int"):
        model.cache_bytes(-1)


@pytest.mark.parametrize("cls", [LinearMemoryAttention, DeltaNetAttention, GatedDeltaNetAttention])
def test_in_float32_the_fast_form_stays_near_the_loop_over_long_sequences(cls):
    torch.manual_seed(0)
    attn = cls(32, 2, chunk_size=16)
    x = torch.randn(2, 200, 32)
    fast, loop = attn(x)[0], attn(x, fast=False)[0]
    assert torch.isfinite(fast).all()
    torch.testing.assert_close(fast, loop, rtol=0, atol=2e-5)


def test_the_short_convolution_mixes_each_projection_with_the_tokens_before_it():
    attn, x = _module(DeltaNetAttention, conv_size=3), _x(n=5)
    q, k, v, tail = attn.projections(x, None, None)
    raw = torch.cat([attn.w_q(x), attn.w_k(x), attn.w_v(x)], -1)  # (batch, n, 3 d_model)
    weight = attn.conv.weight[:, 0]  # (3 d_model, 3): oldest token first
    expected = torch.zeros_like(raw)
    for t in range(5):
        for i, back in enumerate((2, 1, 0)):
            if t - back >= 0:
                expected[:, t] += weight[:, i] * raw[:, t - back]
    got = torch.cat([_merge(t) for t in (q, k, v)], -1)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(tail, raw[:, -2:], rtol=0, atol=0)
    assert MemoryOptions(conv_size=4).conv_size == 4
    with pytest.raises(ValueError, match="conv_size must be a non-negative int"):
        MemoryOptions(conv_size=-1)


def _merge(t):
    return t.transpose(1, 2).flatten(2)  # (batch, heads, n, d_k) -> (batch, n, heads d_k)


@pytest.mark.parametrize("kind", ["linear", "deltanet", "gated-deltanet"])
def test_speculative_decoding_refuses_a_fixed_size_memory_in_one_line(kind):
    # Issue 64: `sample RUN --draft DRAFT` on a memory model ended in AttributeError ('MemoryState' has no k).
    from attncourse.decode.speculative import speculative_generate, validate_draft

    spec = DecoderSpec(11, d_model=D_MODEL, num_heads=HEADS, num_layers=2, max_len=32,
                       attention=AttentionSpec(kind), positions=PositionSpec("learned"))
    memory = GPT(spec=spec)
    plain = GPT(spec=DecoderSpec(11, d_model=D_MODEL, num_heads=HEADS, num_layers=1, max_len=32,
                                 positions=PositionSpec("learned")))
    for target, draft, role in ((memory, plain, "target"), (plain, memory, "draft")):
        with pytest.raises(ValueError, match=f"the {role} model keeps a fixed-size memory") as err:
            validate_draft(target, draft, 2)
        assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="fixed-size memory"):
        speculative_generate(memory, plain, torch.tensor([1, 2, 3]), 4, k=2)
    validate_draft(plain, plain, 2)  # a KV cache on both sides: accepted


@pytest.mark.parametrize("kind", ["linear", "deltanet", "gated-deltanet"])
def test_a_cache_says_its_kind_and_the_paged_pool_refuses_a_state_in_one_line(kind):
    # issue 62: the kind was guessed three ways (hasattr), and BlockPool.for_model on a DeltaNet
    # model raised AttributeError instead of its one-line ValueError
    from attncourse.decode.paged import BlockPool

    spec = DecoderSpec(11, d_model=D_MODEL, num_heads=HEADS, num_layers=2, max_len=32,
                       attention=AttentionSpec(kind), positions=PositionSpec("learned"))
    memory = GPT(spec=spec)
    assert {cache.kind for cache in memory.init_cache(1)} == {"state"}
    with pytest.raises(ValueError, match="keeps a state") as err:
        BlockPool.for_model(memory, 8, 4)
    assert "\n" not in str(err.value)
    plain = GPT(spec=DecoderSpec(11, d_model=D_MODEL, num_heads=HEADS, num_layers=1, max_len=32,
                                 positions=PositionSpec("learned")))
    assert [cache.kind for cache in plain.init_cache(1)] == ["keys and values"]
    assert BlockPool.for_model(plain, 8, 4).num_blocks == 8
    # the state grows by nothing per token: a memory model's bytes are its states' alone
    assert memory.cache_bytes(0) == memory.cache_bytes(100) > 0
