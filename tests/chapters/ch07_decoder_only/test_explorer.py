"""The decoder-only explorer: causal blocks, candidates, book walk."""

import numpy as np
import pytest
import torch

from attncourse.chapters.ch07_decoder_only.explorer import (
    ALL_HEADS,
    DecoderOnlyExplorer,
)
from attncourse.data.text import char_corpus
from attncourse.decode.generation import trace_generation
from attncourse.nn.gpt import GPT


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    corpus = char_corpus("abcab cabca bcabc " * 20)
    model = GPT(len(corpus.vocab), d_model=16, num_heads=4, num_layers=2, d_ff=32).eval()
    return model, corpus.vocab


def test_state_matches_the_model(setup):
    model, vocab = setup
    ex = DecoderOnlyExplorer(model, vocab, ["abc", "ca"], steps=3)
    ex.step.value = 2
    s = ex.shown
    assert s["weights"].shape == (4, 5, 5)
    assert np.allclose(np.triu(s["weights"], 1), 0)          # causal: nothing above the diagonal
    assert np.allclose(s["weights"].sum(-1), 1)
    # the weights of the first 5 positions equal a run on those 5 alone (causality)
    ids = torch.tensor([vocab.encode(list("".join(s["text"])))])
    _, weights = model(ids, need_weights=True)
    np.testing.assert_allclose(s["weights"], weights[1][0].detach().numpy(), atol=1e-6)
    trace = trace_generation(model, torch.tensor(vocab.encode(list("abc"))), 3)
    assert s["chosen"] == vocab.token_of(trace[2].token)
    assert [p for _, p in s["candidates"]] == pytest.approx(trace[2].top_probs)
    ex.head.value = 1
    assert ex.shown["weights"].shape == (5, 5)


def test_book_walk_and_errors(setup):
    model, vocab = setup
    ex = DecoderOnlyExplorer(model, vocab, ["abc", "ca"], steps=2)
    states = ex.book_states()
    assert len(states) == 2 * 2 * 1 * 2 and all(st.shown["head"] is None for st in states)
    assert ex.head.value == ALL_HEADS
    with pytest.raises(ValueError, match="prompts"):
        DecoderOnlyExplorer(model, vocab, [])
