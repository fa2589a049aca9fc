"""Multi-head latent attention: absorbed = plain (float64), against a hand-written loop, in the GPT."""

import dataclasses
import math

import pytest
import torch

from attncourse.nn.gpt import GPT
from attncourse.nn.mla import MultiHeadLatentAttention
from attncourse.nn.rope import apply_rope
from attncourse.recipes.lm import LMConfig, build_lm, lm_settings


def _loop_reference(mla: MultiHeadLatentAttention, x: torch.Tensor) -> torch.Tensor:
    """Eqs. (9)-(19) one head, one query at a time, from the weights."""
    batch, n, _ = x.shape
    h, d_h, d_r = mla.num_heads, mla.d_k, mla.rope_dim
    pos = torch.arange(n)
    c = x @ mla.w_dkv.weight.T
    k_r = apply_rope(x @ mla.w_kr.weight.T, pos)
    out = torch.zeros(batch, n, h * d_h, dtype=x.dtype)
    for i in range(h):
        rows = slice(i * d_h, (i + 1) * d_h)
        k = c @ mla.w_uk.weight[rows].T
        v = c @ mla.w_uv.weight[rows].T
        q = x @ mla.w_q.weight[rows].T
        q_r = apply_rope(x @ mla.w_qr.weight[i * d_r:(i + 1) * d_r].T, pos)
        for t in range(n):
            scores = (q[:, t:t + 1] @ k[:, :t + 1].transpose(1, 2)
                      + q_r[:, t:t + 1] @ k_r[:, :t + 1].transpose(1, 2)) / math.sqrt(d_h + d_r)
            out[:, t, rows] = (torch.softmax(scores, -1) @ v[:, :t + 1])[:, 0]
    return out @ mla.w_o.weight.T


def test_plain_form_equals_a_loop_over_heads_and_queries():
    torch.manual_seed(0)
    mla = MultiHeadLatentAttention(24, 3, latent_dim=10, rope_dim=4).double()
    x = torch.randn(2, 7, 24, dtype=torch.float64)
    expected = _loop_reference(mla, x)
    for fast in (True, False):
        out, _ = mla(x, fast=fast)
        torch.testing.assert_close(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("rope_dim", [0, 4])
def test_absorbed_form_equals_plain_form_in_float64(rope_dim):
    torch.manual_seed(1)
    mla = MultiHeadLatentAttention(32, 4, latent_dim=12, rope_dim=rope_dim).double()
    x = torch.randn(2, 9, 32, dtype=torch.float64)
    full, weights = mla(x, need_weights=True)
    for absorbed in (False, True):
        mla.absorbed = absorbed
        cache = mla.empty_cache(2)
        parts = [mla(x[:, a:b], kv_cache=cache, need_weights=True) for a, b in ((0, 4), (4, 5), (5, 9))]
        out = torch.cat([p[0] for p in parts], 1)
        assert (out - full).abs().max() < 1e-13
        torch.testing.assert_close(parts[0][1], weights[:, :, :4, :4], rtol=0, atol=1e-14)
        assert tuple(cache.c_kv.shape) == (2, 9, 12) and tuple(cache.k_rope.shape) == (2, 9, rope_dim)


def test_gpt_with_latent_attention_caches_d_c_plus_d_r_numbers():
    torch.manual_seed(2)
    gpt = GPT(30, d_model=32, num_heads=4, num_layers=3, d_ff=64, latent_dim=16).double()
    attn = gpt.blocks[0].attn
    assert (attn.latent_dim, attn.rope_dim) == (16, 4)  # d_k / 2 by default
    assert gpt.cache_bytes_per_token() == 3 * (16 + 4) * 8
    tokens = torch.randint(0, 30, (2, 10))
    full, _ = gpt(tokens)
    caches = gpt.init_cache(2)
    steps = [gpt(tokens[:, :6], caches)[0]] + [gpt(tokens[:, t:t + 1], caches)[0] for t in range(6, 10)]
    assert (torch.cat(steps, 1) - full).abs().max() < 1e-12
    rebuilt = GPT.from_config(gpt.config)
    assert type(rebuilt.blocks[0].attn) is MultiHeadLatentAttention


def test_latent_dim_chooses_mla_and_names_the_run():
    assert GPT(30).spec.attention.name == "gqa"
    config = LMConfig()
    assert "latent_dim" not in lm_settings(config)
    mla = dataclasses.replace(config, latent_dim=16)
    assert lm_settings(mla)["latent_dim"] == 16 and mla.run_name == "lm/rope-default-latent-dim16-causal-seed0"
    assert build_lm(mla, 30).config["spec"]["attention"] == {"name": "mla", "latent_dim": 16, "rope_dim": None}


@pytest.mark.parametrize("kwargs, name", [
    ({"latent_dim": 0}, "latent_dim"), ({"latent_dim": 8, "num_kv_heads": 2}, "num_kv_heads"),
    ({"latent_dim": 8, "positional": "alibi"}, "ALiBi"), ({"latent_dim": 8, "rope_dim": 3}, "rope_dim"),
    ({"latent_dim": 8, "positional": "learned", "rope_dim": 4}, "rope_dim"), ({"rope_dim": 4}, "latent_dim"),
])
def test_bad_latent_options_get_one_line_errors(kwargs, name):
    with pytest.raises(ValueError, match=name) as err:
        GPT(30, d_model=32, num_heads=4, **kwargs)
    assert "\n" not in str(err.value)
