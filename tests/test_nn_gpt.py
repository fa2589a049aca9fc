"""The decoder-only model: cache == no cache, causal mask, sizes, errors."""

import pytest
import torch

from attncourse.nn.gpt import GPT
from attncourse.train.generation import generate, next_token_probs, seconds_per_token, trace_generation


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rope", "alibi"])
def test_cache_equals_no_cache(positional):
    torch.manual_seed(0)
    model = GPT(20, d_model=32, num_heads=4, num_layers=2, d_ff=64, max_len=32, positional=positional,
                num_kv_heads=2).double().eval()
    x = torch.randint(0, 20, (2, 12))
    full, _ = model(x)
    caches = model.init_cache(2)
    steps = [model(x[:, :4], caches)[0]] + [model(x[:, t:t + 1], caches)[0] for t in range(4, 12)]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=1e-10, atol=1e-10)
    assert len(caches[0]) == 12


def test_causal_model_does_not_see_the_future():
    torch.manual_seed(1)
    model = GPT(20, d_model=32, num_heads=4, num_layers=2, d_ff=64).double().eval()
    x = torch.randint(0, 20, (1, 10))
    y = x.clone()
    y[0, 6:] = (y[0, 6:] + 1) % 20
    torch.testing.assert_close(model(x)[0][:, :6], model(y)[0][:, :6])
    no_mask = GPT(20, d_model=32, num_heads=4, num_layers=2, d_ff=64, causal=False).double().eval()
    no_mask.load_state_dict(model.state_dict())
    assert not torch.allclose(no_mask(x)[0][:, :6], no_mask(y)[0][:, :6])


def test_weights_shapes_tied_output_and_cache_bytes():
    model = GPT(30, d_model=64, num_heads=8, num_layers=3, num_kv_heads=2)
    _, weights = model(torch.randint(0, 30, (2, 5)), need_weights=True)
    assert len(weights) == 3 and weights[0].shape == (2, 8, 5, 5)
    assert model.output_proj.weight is model.embedding.weight
    caches = model.init_cache(1)
    model(torch.randint(0, 30, (1, 7)), caches)
    stored = sum(c.k.nbytes + c.v.nbytes for c in caches)
    assert model.cache_bytes_per_token() == 2 * 3 * 2 * 8 * 4 == stored // 7


def test_config_round_trip_and_errors():
    model = GPT(10, positional="alibi", num_kv_heads=1, window=4)
    assert GPT.from_config(model.config).config == model.config
    with pytest.raises(ValueError, match="positional"):
        GPT(10, positional="xpos")
    with pytest.raises(ValueError, match="max_len"):
        GPT(10, max_len=8, positional="learned")(torch.zeros(1, 9, dtype=torch.long))


def test_generation_same_tokens_with_and_without_cache():
    torch.manual_seed(2)
    model = GPT(15, d_model=32, num_heads=4, num_layers=2, d_ff=64, positional="rope").eval()
    prompt = torch.tensor([3, 4, 5])
    a = generate(model, prompt, 20, temperature=0.8, top_k=5, seed=7, use_cache=True)
    b = generate(model, prompt, 20, temperature=0.8, top_k=5, seed=7, use_cache=False)
    assert a.tolist() == b.tolist() and a.shape == (20,)
    trace = trace_generation(model, prompt, 4, k=5)
    greedy = generate(model, prompt, 4, temperature=1e-4, seed=0)
    assert [s.token for s in trace] == greedy.tolist()
    assert all(s.top_probs == sorted(s.top_probs, reverse=True) for s in trace)
    assert seconds_per_token(model, prompt, 5, use_cache=True).shape == (5,)
    with pytest.raises(ValueError, match="prompt"):
        generate(model, torch.tensor([], dtype=torch.long), 3)


def test_next_token_probs_top_k_and_temperature():
    logits = torch.tensor([2.0, 1.0, 0.0, -1.0])
    probs = next_token_probs(logits, top_k=2)
    expected = torch.softmax(torch.tensor([2.0, 1.0]), 0)
    torch.testing.assert_close(probs, torch.cat([expected, torch.zeros(2)]))
    torch.testing.assert_close(next_token_probs(logits, temperature=2.0), torch.softmax(logits / 2, 0))
    with pytest.raises(ValueError, match="temperature"):
        next_token_probs(logits, temperature=0.0)
