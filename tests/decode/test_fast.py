"""Tests for decoding without host overhead: the static cache, the unchecked step, compile."""

from __future__ import annotations

import pytest
import torch

from attncourse.decode.fast import Decoder, fast_path_supported
from attncourse.decode.generation import SUPPRESSED_IDS, generate, next_token_probs
from attncourse.nn.attention import KVCache, StaticKVCache
from attncourse.nn.gpt import GPT
from attncourse.nn.protocol import DecoderCache
from attncourse.nn.spec import FFNSpec, NormSpec

VOCAB = 40


def reference_generate(
    model, prompt, n, temperature=1.0, top_k=None, seed=0, suppress_ids=SUPPRESSED_IDS
):
    """The reference loop: the model's checked forward with its growing KVCache, one
    token read
    back to the host per step (temperature 0: argmax)."""
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    caches = model.init_cache(1)
    feed, new = prompt[None, :], []
    with torch.no_grad():
        for _ in range(n):
            logits = model(feed, caches)[0][0, -1].float()
            ids = [i for i in suppress_ids if i < logits.shape[-1]]
            if ids:
                logits = logits.index_fill(-1, torch.tensor(ids), float("-inf"))
            if temperature == 0:
                token = int(logits.argmax())
            else:
                token = int(
                    torch.multinomial(
                        next_token_probs(logits, temperature, top_k),
                        1,
                        generator=generator,
                    )
                )
            new.append(token)
            feed = torch.tensor([[token]])
    return torch.tensor(new, dtype=torch.long)


def model_of(seed=0, **kwargs):
    torch.manual_seed(seed)
    options = dict(
        vocab_size=VOCAB, d_model=32, num_heads=4, num_layers=2, d_ff=64, max_len=64
    )
    options.update(kwargs)
    return scrambled(GPT(**options).eval())


def scrambled(model):
    """Large random weights: an untrained model's greedy text would repeat one token."""
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0.0, 0.5)
    return model


def llama_like(seed=0, num_layers=3):
    torch.manual_seed(seed)
    base = GPT(
        vocab_size=VOCAB,
        d_model=32,
        num_heads=4,
        num_layers=num_layers,
        d_ff=64,
        max_len=64,
        num_kv_heads=2,
    )
    spec = base.spec.__class__(
        **{
            **base.spec.__dict__,
            "norm": NormSpec("rmsnorm"),
            "ffn": FFNSpec("swiglu", 48),
        }
    )
    return scrambled(GPT(spec=spec).eval())


PROMPT = torch.tensor([3, 7, 11, 5, 9])
FAST = {
    "rope": {},
    "gqa": {"num_kv_heads": 2},
    "mqa": {"num_kv_heads": 1},
    "sinusoidal": {"positional": "sinusoidal"},
    "learned": {"positional": "learned"},
    "none": {"positional": "none"},
}
FALLBACK = {
    "alibi": {"positional": "alibi"},
    "window": {"window": 4},
    "mla": {"latent_dim": 8},
}


@pytest.mark.parametrize("name", list(FAST) + list(FALLBACK))
def test_greedy_tokens_identical_to_the_dynamic_cache(name):
    model = model_of(**{**FAST, **FALLBACK}[name])
    assert fast_path_supported(model) == (name in FAST)
    expected = reference_generate(model, PROMPT, 20, temperature=0)
    assert torch.equal(generate(model, PROMPT, 20, temperature=0), expected)


@pytest.mark.parametrize("name", FAST)
def test_logits_bit_identical_to_the_forward(name):
    model = model_of(**FAST[name])
    ids = torch.tensor([[1, 4, 9, 16, 25, 36, 2, 3, 5, 8, 13, 21]])
    caches = model.init_cache(1)
    decoder = Decoder(model, ids.shape[1])
    with torch.no_grad():
        assert torch.equal(
            decoder.prefill(ids[:, :6]), model(ids[:, :6], caches)[0][:, -1]
        )
        for t in range(6, ids.shape[1]):
            assert torch.equal(
                decoder.step(ids[:, t : t + 1]),
                model(ids[:, t : t + 1], caches)[0][:, -1],
            )


def test_logits_bit_identical_to_the_forward_on_a_llama_shaped_model():
    model = llama_like()
    assert fast_path_supported(model)
    ids = torch.tensor([[1, 4, 9, 16, 25, 36, 2, 3, 5, 8, 13, 21]])
    caches = model.init_cache(1)
    decoder = Decoder(model, ids.shape[1])
    with torch.no_grad():
        ours = [decoder.prefill(ids[:, :6])]
        theirs = [model(ids[:, :6], caches)[0][:, -1]]
        for t in range(6, ids.shape[1]):
            ours.append(decoder.step(ids[:, t : t + 1]))
            theirs.append(model(ids[:, t : t + 1], caches)[0][:, -1])
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)
    for static, dynamic in zip(decoder.caches, caches):
        assert torch.equal(static.k, dynamic.k) and torch.equal(static.v, dynamic.v)


@pytest.mark.parametrize("temperature, top_k", [(1.0, None), (0.7, 5)])
def test_sampled_tokens_identical_to_the_loop_that_synchronised_every_step(
    temperature, top_k
):
    model = llama_like(1)
    expected = reference_generate(model, PROMPT, 16, temperature, top_k, seed=3)
    assert torch.equal(
        generate(model, PROMPT, 16, temperature, top_k, seed=3), expected
    )
    assert torch.equal(
        generate(model, PROMPT, 16, temperature, top_k, seed=3, use_cache=False),
        expected,
    )


def test_generate_checks_its_arguments_and_reports_timings():
    model = model_of()
    with pytest.raises(ValueError, match="temperature"):
        generate(model, PROMPT, 3, temperature=-1.0)
    with pytest.raises(ValueError, match="top_k"):
        generate(model, PROMPT, 3, top_k=0)
    assert generate(model, PROMPT, 0).shape == (0,)
    timings = {}
    generate(model, PROMPT, 4, timings=timings)
    assert timings["compile"] == 0.0 and timings["decode"] > 0


def test_static_cache_is_a_decoder_cache_written_in_place():
    cache = StaticKVCache(1, 2, 5, 4)
    assert isinstance(cache, DecoderCache) and cache.kind == KVCache.kind
    keys = cache.keys
    k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    cache.append(k, v)
    assert len(cache) == 3 and torch.equal(cache.k, k) and torch.equal(cache.v, v)
    cache.append(k[:, :, :1], v[:, :, :1])
    assert (
        cache.keys is keys and cache.k.data_ptr() == keys.data_ptr() and len(cache) == 4
    )
    dynamic = KVCache(k, v)
    dynamic.append(k[:, :, :1], v[:, :, :1])
    assert torch.equal(cache.k, dynamic.k)
    with pytest.raises(ValueError, match="capacity"):
        cache.append(k, v)
    with pytest.raises(ValueError, match="batch, num_heads"):
        cache.append(torch.randn(1, 3, 1, 4), torch.randn(1, 3, 1, 4))
    cache.truncate(2)
    assert len(cache) == 2 and torch.equal(cache.k, k[:, :, :2])
    with pytest.raises(ValueError, match="positive"):
        StaticKVCache(0, 2, 5, 4)


def test_decoder_refuses_what_does_not_fit():
    model = model_of(positional="learned")
    with pytest.raises(ValueError, match="max_len"):
        Decoder(model, 65)
    decoder = Decoder(model, 4)
    with pytest.raises(ValueError, match="capacity"):
        decoder.prefill(torch.arange(5)[None])
    with pytest.raises(ValueError, match="token ids"):
        decoder.prefill(torch.tensor([[1, VOCAB]]))
    with pytest.raises(
        ValueError, match="token ids"
    ):  # as the model's forward refuses it
        generate(model, torch.tensor([2, -1]), 3)
    decoder.prefill(torch.arange(3)[None])
    with pytest.raises(ValueError, match="empty"):
        decoder.prefill(torch.arange(3)[None])
    decoder.step(torch.tensor([[1]]))
    with pytest.raises(ValueError, match="capacity"):
        decoder.step(torch.tensor([[1]]))


def test_compiled_step_gives_the_same_greedy_tokens():
    model = llama_like(2, num_layers=1)  # one layer: a shorter compile
    expected = reference_generate(model, PROMPT, 12, temperature=0)
    timings = {}
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert torch.equal(
        generate(model, PROMPT, 12, temperature=0, compile=True, timings=timings),
        expected,
    )
    assert timings["compile"] > 0 and timings["decode"] > 0
    # one graph for the prefill, one for every step: no step compiled again for its position
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs == 2
