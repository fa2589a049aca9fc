"""attncourse/nn/cla.py: cross-layer attention, layers reading an earlier one's keys."""

import math

import pytest
import torch

from attncourse.data.text import char_corpus
from attncourse.nn.attention import KVCache
from attncourse.nn.cla import CLAOptions, CrossLayerAttention, SharedKVCache
from attncourse.nn.gpt import GPT
from attncourse.nn.rope import apply_rope
from attncourse.nn.spec import AttentionSpec, DecoderSpec, PositionSpec
from attncourse.recipes.lm import LMConfig, train_lm

D, H = 16, 4


def pair(scheme="none", num_kv_heads=2, seed=0):
    torch.manual_seed(seed)
    spec = AttentionSpec("cla", {"num_kv_heads": num_kv_heads, "kv_share": 2})
    first, second = (
        spec.build(D, H, True, PositionSpec(scheme)).double() for _ in range(2)
    )
    for layer in (first, second):
        layer.link_layers([first, second].index(layer), [first, second])
    return first, second


def model(attention, num_layers=4, scheme="rope", seed=0):
    torch.manual_seed(seed)
    spec = DecoderSpec(
        13,
        d_model=D,
        num_heads=H,
        num_layers=num_layers,
        max_len=32,
        attention=attention,
        positions=PositionSpec(scheme),
    )
    return GPT(spec=spec).double().eval()


def reference(x1, x2, first, second, rope):
    """Hand-written: the second layer's queries, the first layer's keys and values."""
    batch, n, _ = x1.shape
    g, d_k = 2, D // H

    def heads(y, count):
        return y.view(batch, n, count, d_k).transpose(1, 2)

    k = heads(x1 @ first.w_k.weight.T, g)
    v = heads(x1 @ first.w_v.weight.T, g)
    q = heads(x2 @ second.w_q.weight.T, H)
    if rope:
        k, q = apply_rope(k, torch.arange(n)), apply_rope(q, torch.arange(n))
    k, v = k.repeat_interleave(H // g, dim=1), v.repeat_interleave(H // g, dim=1)
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
    scores = scores.masked_fill(
        torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf")
    )
    out = torch.softmax(scores, -1) @ v
    return out.transpose(1, 2).reshape(batch, n, D) @ second.w_o.weight.T


@pytest.mark.parametrize("scheme", ["none", "rope"])
@pytest.mark.parametrize("fast", [True, False])
def test_the_second_layer_attends_with_the_first_layers_keys_and_values(scheme, fast):
    first, second = pair(scheme)
    assert (
        isinstance(second, CrossLayerAttention)
        and second.reads_shared
        and not first.reads_shared
    )
    assert not hasattr(second, "w_k") and not hasattr(second, "w_v")
    assert {n for n, _ in second.named_parameters()} == {"w_q.weight", "w_o.weight"}
    x1, x2 = torch.randn(2, 2, 6, D, dtype=torch.float64)
    first(x1, fast=fast)
    out, _ = second(x2, fast=fast)
    torch.testing.assert_close(
        out, reference(x1, x2, first, second, scheme == "rope"), rtol=0, atol=1e-12
    )
    with pytest.raises(
        RuntimeError, match="run that layer first"
    ):  # the keys were handed over once
        second(x2)


def test_gradients_of_the_second_layer_reach_the_first_layers_keys():
    first, second = pair()
    x1, x2 = torch.randn(2, 1, 5, D, dtype=torch.float64)
    first(x1)
    second(x2)[0].sum().backward()
    assert (
        first.w_k.weight.grad.abs().sum() > 0 and first.w_v.weight.grad.abs().sum() > 0
    )
    assert first.w_q.weight.grad is None  # the first layer's own output was not used


def test_kv_share_1_is_gqa_to_the_bit():
    cla = model(AttentionSpec("cla", {"num_kv_heads": 2}))
    gqa = model(AttentionSpec("gqa", {"num_kv_heads": 2}))
    assert list(cla.state_dict()) == list(gqa.state_dict())
    assert all(
        torch.equal(a, b)
        for a, b in zip(cla.state_dict().values(), gqa.state_dict().values())
    )
    tokens = torch.randint(0, 13, (2, 9))
    assert torch.equal(cla(tokens)[0], gqa(tokens)[0])
    assert cla.cache_bytes_per_token() == gqa.cache_bytes_per_token()


@pytest.mark.parametrize(
    ("kv_share", "num_layers", "scheme"),
    [(2, 4, "rope"), (2, 2, "alibi"), (3, 4, "rope"), (2, 3, "learned")],
)
def test_cached_decoding_equals_the_full_forward(kv_share, num_layers, scheme):
    gpt = model(
        AttentionSpec("cla", {"num_kv_heads": 2, "kv_share": kv_share}),
        num_layers,
        scheme,
    )
    readers = [i for i, block in enumerate(gpt.blocks) if block.attn.reads_shared]
    assert readers == [i for i in range(num_layers) if i % kv_share]
    tokens = torch.randint(0, 13, (2, 9))
    full, full_weights = gpt(tokens, need_weights=True)
    caches = gpt.init_cache(2)
    assert [type(c) for c in caches] == [
        SharedKVCache if i in readers else KVCache for i in range(num_layers)
    ]
    steps = [gpt(tokens[:, :4], caches)[0]] + [
        gpt(tokens[:, t : t + 1], caches)[0] for t in range(4, 9)
    ]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-10)
    assert all(len(cache) == 9 for cache in caches)
    last, weights = gpt(
        tokens[:, :1], [c for c in gpt.init_cache(2)], need_weights=True
    )
    torch.testing.assert_close(
        weights[-1], full_weights[-1][:, :, :1, :1], rtol=0, atol=1e-12
    )
    for cache in caches:  # speculative decoding cuts every cache back alike
        cache.truncate(5)
    assert [len(c) for c in caches] == [5] * num_layers


def test_the_cache_holds_half_the_layers():
    tokens = torch.randint(0, 13, (1, 7))
    gqa = model(AttentionSpec("gqa", {"num_kv_heads": 2}))
    cla = model(AttentionSpec("cla", {"num_kv_heads": 2, "kv_share": 2}))
    assert (
        cla.cache_bytes_per_token() * 2
        == gqa.cache_bytes_per_token()
        == 4 * 2 * 2 * (D // H) * 8
    )
    numbers = []
    for gpt in (gqa, cla):
        caches = gpt.init_cache(1)
        gpt(tokens, caches)
        numbers.append(
            sum(
                t.numel()
                for c in caches
                for t in vars(c).values()
                if isinstance(t, torch.Tensor)
            )
        )
    assert numbers[1] * 2 == numbers[0] == 7 * gqa.cache_bytes_per_token() // 8
    # 8 kv heads shared by 2 layers cache what 4 kv heads per layer do
    wide = model(AttentionSpec("cla", {"num_kv_heads": 4, "kv_share": 2}))
    assert wide.cache_bytes_per_token() == gqa.cache_bytes_per_token()


def test_a_layer_can_share_only_with_a_cla_layer_of_the_same_sizes():
    with pytest.raises(ValueError, match="layer 1 shares"):
        GPT(
            spec=DecoderSpec(
                13,
                d_model=D,
                num_heads=H,
                num_layers=2,
                layer_attention=("gqa", {"name": "cla", "kv_share": 2}),
            )
        )
    with pytest.raises(ValueError, match="kv_share"):
        CLAOptions(kv_share=0)
    first, second = pair()
    with pytest.raises(ValueError, match="not this layer"):
        second.link_layers(0, [first, second])
    first(torch.randn(1, 3, D, dtype=torch.float64))
    with pytest.raises(ValueError, match="SharedKVCache"):
        second(torch.randn(1, 3, D, dtype=torch.float64), kv_cache=first.empty_cache(1))


def test_train_lm_trains_cla_and_the_loss_falls(tmp_path):
    text = "the cat sat on the mat. " * 60
    corpus = char_corpus(text)
    config = LMConfig(
        d_model=16,
        num_heads=2,
        num_layers=2,
        d_ff=32,
        context=16,
        batch_size=8,
        steps=40,
        steps_per_epoch=20,
        lr=1e-2,
        warmup=5,
        attention="cla",
        num_kv_heads=1,
        kv_share=2,
    )
    assert "cla-num-kv-heads1-kv-share2" in config.run_name
    run = train_lm(config, corpus, text, progress=False, out_dir=tmp_path)
    assert run.model.blocks[1].attn.reads_shared
    assert run.history[-1]["valid_loss"] < run.history[0]["valid_loss"]
    assert run.history[-1]["valid_loss"] < math.log(len(corpus.vocab)) - 0.5


def test_a_copy_reads_its_own_first_layer_and_no_tensor_is_left_behind():
    import copy

    gpt = model(AttentionSpec("cla", {"kv_share": 2})).train()
    tokens = torch.randint(0, 13, (2, 9))
    gpt(tokens)[0].sum().backward()
    assert all(block.attn._handoff is None for block in gpt.blocks)  # readers let go
    twin = copy.deepcopy(gpt)
    assert twin.blocks[1].attn.source[0] is twin.blocks[0].attn
    assert torch.equal(twin(tokens)[0], gpt(tokens)[0])
