"""GPT.forward's ``positions``: absolute positions of the tokens, default as before.

The default, passed explicitly, gives bit-identical logits; cached decoding one
token at a time with explicit positions equals the full forward; the positions
are used (RoPE depends on their differences only, the tables on the positions
themselves); and what a scheme cannot take is refused in one line.
"""

from __future__ import annotations

import pytest
import torch

from attncourse.nn.gpt import GPT

VOCAB, BATCH, SEQ = 23, 2, 9
VARIANTS = {
    "sinusoidal": {"positional": "sinusoidal"},
    "learned": {"positional": "learned"},
    "rope": {"positional": "rope"},
    "alibi": {"positional": "alibi"},
    "rope-gqa-window": {"positional": "rope", "num_kv_heads": 2, "window": 4},
    "mla-rope": {"positional": "rope", "latent_dim": 8},
}


def _model(name: str) -> GPT:
    torch.manual_seed(0)
    model = GPT(VOCAB, d_model=16, num_heads=4, num_layers=2, d_ff=32, max_len=32, **VARIANTS[name])
    return model.double().eval()


def _tokens(seed: int = 0) -> torch.Tensor:
    return torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", VARIANTS)
def test_the_default_positions_given_explicitly_give_bit_identical_logits(name):
    model, tokens = _model(name), _tokens()
    with torch.no_grad():
        default, _ = model(tokens)
        row, _ = model(tokens, positions=torch.arange(SEQ))
        rows, _ = model(tokens, positions=torch.arange(SEQ).expand(BATCH, SEQ))
    assert torch.equal(row, default) and torch.equal(rows, default)


@pytest.mark.parametrize("name", VARIANTS)
def test_cached_decoding_with_explicit_positions_equals_the_full_forward(name):
    model, tokens = _model(name), _tokens(1)
    with torch.no_grad():
        full, _ = model(tokens)
        caches = model.init_cache(BATCH)
        prefix, _ = model(tokens[:, :4], caches, positions=torch.arange(4))
        steps = [prefix]
        for t in range(4, SEQ):
            logits, _ = model(tokens[:, t:t + 1], caches, positions=torch.tensor([[t]] * BATCH))
            steps.append(logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", ["rope", "mla-rope"])
def test_rope_depends_on_the_differences_of_positions_only(name):
    model, tokens = _model(name), _tokens(2)
    with torch.no_grad():
        base, _ = model(tokens)
        shifted, _ = model(tokens, positions=torch.arange(SEQ) + 100)
        spread, _ = model(tokens, positions=2 * torch.arange(SEQ))
    torch.testing.assert_close(shifted, base, rtol=0, atol=1e-9)  # relative: a shift changes nothing
    assert (spread - base).abs().max() > 1e-3  # other distances: other logits


@pytest.mark.parametrize("name", ["sinusoidal", "learned"])
def test_a_table_adds_its_rows_at_the_given_positions_per_sequence(name):
    model, tokens = _model(name), _tokens(3)
    positions = torch.stack([torch.arange(SEQ) + 5, torch.arange(SEQ) + 11])
    with torch.no_grad():
        both, _ = model(tokens, positions=positions)
        for b in range(BATCH):
            alone, _ = model(tokens[b:b + 1], positions=positions[b])
            torch.testing.assert_close(both[b:b + 1], alone, rtol=0, atol=1e-12)
        plain, _ = model(tokens)
    assert (both - plain).abs().max() > 1e-3  # absolute: another position, another row


def test_positions_a_scheme_cannot_take_are_refused_in_one_line():
    tokens = _tokens()
    with pytest.raises(ValueError, match=r"positions must be a \(seq_len=9,\) or \(batch=2, seq_len=9\) integer"):
        _model("rope")(tokens, positions=torch.arange(SEQ + 1))
    with pytest.raises(ValueError, match="integer tensor, got"):
        _model("rope")(tokens, positions=torch.arange(SEQ).double())
    with pytest.raises(ValueError, match="positions must be >= 0"):
        _model("rope")(tokens, positions=torch.arange(SEQ) - 1)
    with pytest.raises(ValueError, match="one row of positions for the whole batch"):
        _model("rope")(tokens, positions=torch.stack([torch.arange(SEQ), torch.arange(SEQ) + 1]))
    with pytest.raises(ValueError, match="ALiBi's distances follow the cache's order"):
        _model("alibi")(tokens, positions=torch.arange(SEQ) + 1)
    with pytest.raises(ValueError, match="does not fit the learned table of max_len=32 rows"):
        _model("learned")(tokens, positions=torch.arange(SEQ) + 30)
