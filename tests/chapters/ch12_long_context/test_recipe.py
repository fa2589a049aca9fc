"""Chapter 12's recipe: specs with other positions or the gate, copies with a new spec, the
first-token share, the largest activation, the passkey model, the fixed-size state."""

import dataclasses

import numpy as np
import pytest
import torch

from attncourse.chapters.ch12_long_context.recipe import (
    PasskeyConfig,
    first_token_share,
    largest_activation,
    outer_product_recall,
    passkey_accuracy,
    train_lm_variant,
    train_passkey,
    uniform_first_token_share,
)
from attncourse.data.text import char_corpus
from attncourse.nn.gated import GatedSelfAttention
from attncourse.nn.gpt import GPT
from attncourse.nn.spec import PositionSpec
from attncourse.recipes.lm import LMConfig, build_lm, lm_spec, with_spec


def test_lm_spec_is_chapter_7s_model_with_the_changes():
    config = LMConfig(num_kv_heads=2)
    assert lm_spec(config, 30) == build_lm(config, 30).spec
    gated = dataclasses.replace(config, attention="gated")
    spec = lm_spec(gated, 30, PositionSpec("rope", rope_scaling="pi", rope_factor=2))
    assert spec.attention.name == "gated" and spec.attention.options.num_kv_heads == 2
    assert spec.positions.scaling.factor == 2
    with pytest.raises(ValueError, match="has no option 'latent_dim'"):
        lm_spec(LMConfig(latent_dim=16, attention="gated"), 30)


def test_with_spec_keeps_the_weights_and_refuses_a_longer_learned_table():
    torch.manual_seed(0)
    model = GPT(30, d_model=16, num_heads=2, max_len=32, positional="rope")
    tokens = torch.randint(0, 30, (1, 10))
    same = with_spec(model, positions=PositionSpec("rope", rope_scaling="ntk", rope_factor=1.0))
    torch.testing.assert_close(same(tokens)[0], model(tokens)[0])
    stretched = with_spec(model, positions=PositionSpec("rope", rope_scaling="pi", rope_factor=2))
    assert not torch.allclose(stretched(tokens)[0], model(tokens)[0])
    sinusoidal = GPT(30, d_model=16, num_heads=2, max_len=32, positional="sinusoidal")
    longer = with_spec(sinusoidal, max_len=64)
    torch.testing.assert_close(longer(tokens)[0], sinusoidal(tokens)[0])
    assert longer(torch.randint(0, 30, (1, 50)))[0].shape == (1, 50, 30)
    learned = GPT(30, d_model=16, num_heads=2, max_len=32, positional="learned")
    with pytest.raises(ValueError, match="positional_encoding.embedding.weight"):
        with_spec(learned, max_len=64)


def test_first_token_share_of_uniform_attention():
    torch.manual_seed(0)
    model = GPT(30, d_model=16, num_heads=2, num_layers=2, positional="none")
    for block in model.blocks:  # zero queries: every score 0, uniform causal weights
        torch.nn.init.zeros_(block.attn.w_q.weight)
    ids = torch.randint(0, 30, (200,))
    share = first_token_share(model, ids, 32, skip=4)
    expected = np.mean(1 / (np.arange(4, 32) + 1))
    np.testing.assert_allclose(share, [expected, expected], rtol=1e-6)
    assert uniform_first_token_share(32, skip=4) == pytest.approx(expected)
    with pytest.raises(ValueError, match="skip"):
        first_token_share(model, ids, 32, skip=32)


def test_largest_activation_is_the_residual_streams_max():
    torch.manual_seed(0)
    model = GPT(30, d_model=16, num_heads=2, num_layers=2)
    ids = torch.randint(0, 30, (64,))
    found = largest_activation(model, ids, 32)
    outputs = []
    hooks = [b.register_forward_hook(lambda _m, _i, out: outputs.append(out[0])) for b in model.blocks]
    model(ids.view(2, 32))
    for h in hooks:
        h.remove()
    np.testing.assert_allclose(found, [float(o.detach().abs().max()) for o in outputs])


def test_the_passkey_model_learns_and_a_learned_table_stops_at_its_length():
    config = PasskeyConfig(positional="none", steps=120, length=32)
    model = train_passkey(config)
    assert passkey_accuracy(model, config, 20, n_examples=64) > 0.9
    learned = PasskeyConfig(positional="learned", steps=1, length=16)
    with pytest.raises(ValueError, match="max_len=16"):
        passkey_accuracy(train_passkey(learned), learned, 20)


def test_a_fixed_state_keeps_about_d_k_pairs_apart():
    assert outer_product_recall(4, 64) == 1.0
    assert outer_product_recall(256, 16) < 0.1 < 0.9 < outer_product_recall(256, 256)
    assert outer_product_recall(64, 16) < outer_product_recall(16, 16)


def test_a_gated_fine_tune_starts_from_its_init_and_is_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(tmp_path))
    corpus = char_corpus("abcdefgh " * 300, valid_fraction=0.2)
    config = LMConfig(d_model=16, num_heads=2, num_layers=1, d_ff=32, context=16, steps=4, steps_per_epoch=2,
                      batch_size=4, corpus="test")
    base = train_lm_variant(config, corpus, gate=True)
    assert isinstance(base.model.blocks[0].attn, GatedSelfAttention) and len(base.history) == 2
    fine = train_lm_variant(config.__class__(**{**config.__dict__, "context": 32, "steps": 2}), corpus,
                            gate=True, positions=PositionSpec("rope", rope_scaling="yarn", rope_factor=2,
                                                              original_len=16), init=base)
    assert fine.model.blocks[0].attn.rope_scaling.method == "yarn"
    again = train_lm_variant(config, corpus, gate=True)
    assert again.out_dir == base.out_dir and again.history == base.history
    with pytest.raises(ValueError, match="corpus"):
        train_lm_variant(LMConfig(), corpus)
