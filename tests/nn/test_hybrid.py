"""A hybrid decoder (nn/spec.py's ``layer_attention``): each block its own registered attention.

The contract of the variants (tests/nn/test_decoder_attention.py) holds for a model whose blocks
differ: cached decoding equals the full forward in float64, gradients pass gradcheck; a saved
hybrid loads back with ``weights_only=True`` to the same logits, and a file or spec whose
blocks do not match is refused in one line.
"""

from __future__ import annotations

import pytest
import torch

from attncourse.nn.gpt import GPT
from attncourse.nn.memory_attention import (
    DeltaNetAttention,
    GatedDeltaNetAttention,
    MemoryOptions,
)
from attncourse.nn.spec import AttentionSpec, DecoderSpec, PositionSpec
from attncourse.train.checkpoint import (
    load_checkpoint,
    load_model,
    save_checkpoint,
    validate_compatible,
)

QWEN_LIKE = ("gated-deltanet",) * 3 + ("gqa",)  # three memory blocks, then one softmax block


def hybrid_spec(layers=QWEN_LIKE, num_layers=4, positions="none"):
    return DecoderSpec(13, d_model=16, num_heads=2, num_layers=num_layers, max_len=32,
                       positions=PositionSpec(positions),
                       layer_attention=DecoderSpec.layer_pattern(layers, num_layers))


def hybrid(layers=QWEN_LIKE, num_layers=4, seed=0):
    torch.manual_seed(seed)
    return GPT(spec=hybrid_spec(layers, num_layers)).double().eval()


def test_each_block_gets_its_own_attention_and_the_pattern_repeats():
    model = hybrid(("deltanet", AttentionSpec("gqa")), num_layers=4)
    kinds = [type(block.attn).__name__ for block in model.blocks]
    assert kinds == ["DeltaNetAttention", "CausalSelfAttention"] * 2
    assert model.spec.attentions() == (AttentionSpec("deltanet"), AttentionSpec("gqa")) * 2
    gated = hybrid()
    assert [type(b.attn) for b in gated.blocks[:3]] == [GatedDeltaNetAttention] * 3
    assert not isinstance(gated.blocks[3].attn, DeltaNetAttention)
    # without layer_attention every block has `attention`; the dict rebuilds the spec
    plain = DecoderSpec(13, num_layers=3)
    assert plain.attentions() == (plain.attention,) * 3 and plain.to_dict()["layer_attention"] is None
    assert DecoderSpec(**plain.to_dict()) == plain


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("layers", [QWEN_LIKE, ("linear", "deltanet", "gqa", "deltanet")])
def test_cached_decoding_of_a_hybrid_equals_the_full_forward(layers, fast):
    model = hybrid(layers)
    tokens = torch.randint(0, 13, (2, 11), generator=torch.Generator().manual_seed(1))
    full, _ = model(tokens, fast=fast)
    caches = model.init_cache(2)
    steps = [model(tokens[:, :5], caches, fast=fast)[0]]
    steps += [model(tokens[:, t:t + 1], caches, fast=fast)[0] for t in range(5, 11)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-10)
    assert [len(cache) for cache in caches] == [11] * 4
    # the softmax block's cache grows by one key and value per token, the memories' do not
    grows = 2 * 16 * 8  # d_model keys and d_model values, float64
    assert model.cache_bytes_per_token() == grows * layers.count("gqa")
    fixed = sum(b.attn.state_numbers() for b, c in zip(model.blocks, model.init_cache(1))
                if c.kind == "state")
    assert model.cache_bytes(100) == 100 * model.cache_bytes_per_token() + 8 * fixed


def test_gradients_through_a_hybrid_pass_gradcheck():
    model = hybrid(("deltanet", "gqa"), num_layers=2)
    x = torch.randn(1, 5, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(2)).requires_grad_()

    def blocks(h):
        for block in model.blocks:
            h = block(h)[0]
        return h

    assert torch.autograd.gradcheck(blocks, (x,))


def test_a_saved_hybrid_loads_back_and_a_mismatched_model_is_refused(tmp_path):
    model = hybrid().float()  # files hold float32 weights
    tokens = torch.randint(0, 13, (2, 9), generator=torch.Generator().manual_seed(3))
    save_checkpoint(tmp_path / "hybrid.pt", model=model)
    loaded, _ = load_model(tmp_path / "hybrid.pt")  # torch.load(weights_only=True) inside
    assert loaded.spec == model.spec and loaded.config["spec"]["layer_attention"][3]["name"] == "gqa"
    torch.testing.assert_close(loaded(tokens)[0], model(tokens)[0], rtol=0, atol=0)
    checkpoint = load_checkpoint(tmp_path / "hybrid.pt")
    other = hybrid(("gated-deltanet", "gqa") * 2).float()  # the same sizes, the blocks in another order
    with pytest.raises(ValueError, match="does not match this run") as refused:
        validate_compatible(checkpoint, other)
    assert "\n" not in str(refused.value) and "layer_attention" in str(refused.value)


def test_a_file_whose_blocks_do_not_fit_is_refused_in_one_line(tmp_path):
    model = hybrid().float()
    save_checkpoint(tmp_path / "hybrid.pt", model=model)
    checkpoint = load_checkpoint(tmp_path / "hybrid.pt")
    for change, words in (
            (lambda s: s["layer_attention"].pop(), "3 entries for num_layers=4"),
            (lambda s: s["layer_attention"][0].update(window=2), r"layer_attention\[0\].*'window'"),
            (lambda s: s.update(layer_attention="deltanet"), "not a list")):
        broken = load_checkpoint(tmp_path / "hybrid.pt")
        change(broken["model_config"]["spec"])
        torch.save(broken, tmp_path / "broken.pt")
        with pytest.raises(ValueError, match=words) as refused:
            load_model(tmp_path / "broken.pt")
        assert "\n" not in str(refused.value)
    assert checkpoint["model_config"]["spec"]["layer_attention"][0]["name"] == "gated-deltanet"


def test_a_pattern_that_does_not_fit_the_layers_is_refused_in_one_line():
    with pytest.raises(ValueError, match="3 entries for num_layers=4: give one attention per block"):
        DecoderSpec(13, num_layers=4, positions=PositionSpec("none"), layer_attention=("deltanet",) * 3)
    with pytest.raises(ValueError, match="a layer pattern of 3 blocks does not tile num_layers=4"):
        DecoderSpec.layer_pattern(("deltanet",) * 3, 4)
    with pytest.raises(ValueError, match="a layer pattern of 0 blocks"):
        DecoderSpec.layer_pattern((), 4)
    with pytest.raises(TypeError, match="one AttentionSpec per block"):
        DecoderSpec(13, num_layers=1, positions=PositionSpec("none"), layer_attention="deltanet")
    with pytest.raises(TypeError, match="an AttentionSpec, a dict or a name"):
        DecoderSpec(13, num_layers=1, positions=PositionSpec("none"), layer_attention=(3,))
    # every block's variant checks the shared positions: a memory refuses RoPE
    with pytest.raises(ValueError, match="keeps no positions"):
        hybrid_spec(positions="rope")
    # and its own options
    with pytest.raises(ValueError, match="chunk_size"):
        DecoderSpec(13, num_layers=1, positions=PositionSpec("none"),
                    layer_attention=({"name": "deltanet", "chunk_size": 0},))
    assert hybrid_spec(("deltanet",) * 4).attentions()[0].options == MemoryOptions()


def test_train_lms_hybrid_option_builds_the_pattern_and_names_its_run(tmp_path, monkeypatch):
    from attncourse.data.text import char_corpus
    from attncourse.recipes.lm import LMConfig, build_lm, lm_settings, lm_spec, train_lm

    config = LMConfig(positional="none", attention="deltanet", softmax_every=2, num_layers=4, d_model=16,
                      num_heads=2, d_ff=32, context=16, batch_size=4, steps=4, steps_per_epoch=2, chunk_size=5)
    model = build_lm(config, 20)
    deltanet = AttentionSpec("deltanet", MemoryOptions(chunk_size=5))  # the chunk reaches the memory blocks
    assert model.spec.attentions() == (deltanet, AttentionSpec("gqa")) * 2
    assert "chunk-size5-softmax-every2" in config.run_name and lm_settings(config)["softmax_every"] == 2
    assert "chunk_size" not in lm_settings(LMConfig())  # unset: the variant's default
    for changes, words in ((dict(attention=None, positional="rope", chunk_size=None), "needs another attention"),
                           (dict(softmax_every=3), "softmax_every=3 must divide num_layers=4"),
                           (dict(softmax_every=None, attention=None, positional="rope"),
                            "attention 'gqa' has no option 'chunk_size'")):
        with pytest.raises(ValueError, match=words):
            lm_spec(LMConfig(**{**vars(config), **changes}), 20)
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(tmp_path))
    text = "the cat sat on the mat; " * 40
    corpus = char_corpus(text, valid_fraction=0.2)
    trained = train_lm(config, corpus, text, progress=False).model
    again = train_lm(config, corpus, text, progress=False).model  # loaded from its checkpoint
    assert [type(b.attn) for b in again.blocks] == [type(b.attn) for b in trained.blocks]
    for name, tensor in trained.state_dict().items():
        torch.testing.assert_close(again.state_dict()[name], tensor, rtol=0, atol=0)


def test_a_forged_hybrid_file_is_held_to_the_limits_by_its_largest_block():
    from attncourse.cli.limits import validate_model_config

    spec = hybrid_spec(("gqa", "deltanet")).to_dict()
    validate_model_config({"spec": spec}, "hybrid.pt")  # within the limits
    spec["layer_attention"][2] = {"name": "gqa", "num_kv_heads": 10**6, "window": None, "bias": False}
    with pytest.raises(ValueError, match="hybrid.pt asks for a model with num_kv_heads 1,000,000"):
        validate_model_config({"spec": spec}, "hybrid.pt")
