"""The real-model explorer: states by layer and head, the numbers of its captions, the book walk,
a model run on a typed prompt, and a kernel with no front end (nbclient) getting its figure at once."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from attncourse.chapters.ch11_real_model.explorer import (
    ALL_HEADS,
    RealModelExplorer,
    attention_of,
    token_labels,
)
from attncourse.nn import GPT

ROOT = Path(__file__).resolve().parents[3]


def fake_weights(layers=3, heads=4, n=6, seed=0):
    rng = np.random.default_rng(seed)
    w = np.tril(rng.random((layers, heads, n, n)))
    return w / w.sum(-1, keepdims=True)


class Letters:
    """A tokenizer stand-in: one token per character."""

    def encode(self, text):
        return [ord(c) % 32 for c in text]

    def decode(self, ids):
        return "".join(" " if i == 0 else chr(96 + i % 27) for i in ids)


def test_states_follow_layer_and_head_and_the_caption_gives_their_shares():
    w = fake_weights()
    w[1, 2, 1:, :] = 0
    w[1, 2, 1:, 0] = 1.0                                  # layer 1, head 2: a pure sink
    ex = RealModelExplorer(w, list("abcdef"))
    assert ex.shown["layer"] == 0 and ex.shown["head"] is None and ex.shown["weights"].shape == (4, 6, 6)
    ex.layer.value = 1
    ex.head.value = 2
    np.testing.assert_array_equal(ex.shown["weights"], w[1, 2])
    assert ex.shown["first"] == pytest.approx(1.0) and ex.shown["previous"] == pytest.approx(0.2)  # query 1 only
    assert "Layer 1, head 2" in ex.caption.value and "1.00 of a query's attention" in ex.caption.value
    ex.head.value = ALL_HEADS
    expected_first = w[1, :, 1:, 0].mean(-1)
    np.testing.assert_allclose(ex.shown["first"], expected_first, rtol=1e-6)
    rows = np.arange(1, 6)
    np.testing.assert_allclose(ex.shown["previous"], w[1][:, rows, rows - 1].mean(-1), rtol=1e-6)
    assert f"{int((expected_first > 0.5).sum())} put more than half" in ex.caption.value


def test_the_book_walks_the_chosen_layers_and_heads_and_restores_the_controls():
    ex = RealModelExplorer(fake_weights(), list("abcdef"), book_layers=[0, 2], book_heads=[3])
    ex.layer.value = 2
    states = ex.book_states()
    assert [(s.values[0], s.values[1]) for s in states] == [(0, ALL_HEADS), (0, 3), (2, ALL_HEADS), (2, 3)]
    assert ex.layer.value == 2 and ex.head.value == ALL_HEADS
    assert len(RealModelExplorer(fake_weights(), list("abcdef")).book_states()) == 3   # default: every layer
    html = ex.to_html()
    assert "head 3" in html and "head 1</option>" not in html


def test_bad_input_is_refused_in_one_line():
    with pytest.raises(ValueError, match=r"expected \(layers, heads, 5, 5\)"):
        RealModelExplorer(fake_weights(), list("abcde"))
    with pytest.raises(ValueError, match="book_layers"):
        RealModelExplorer(fake_weights(), list("abcdef"), book_layers=[3])
    with pytest.raises(ValueError, match="book_heads"):
        RealModelExplorer(fake_weights(), list("abcdef"), book_heads=[4])


def test_from_model_equals_the_models_weights_and_a_typed_prompt_runs_the_model():
    torch.manual_seed(0)
    model = GPT(vocab_size=32, d_model=16, num_heads=2, num_layers=2).eval()
    ex = RealModelExplorer.from_model(model, Letters(), "abcab")
    with torch.no_grad():
        _, weights = model(torch.tensor([Letters().encode("abcab")]), need_weights=True)
    np.testing.assert_allclose(ex.weights, torch.stack([w[0] for w in weights]).numpy(), atol=1e-6)
    assert ex.labels == ["a", "b", "c", "a", "b"] and ex.prompt.value == "abcab"
    ex.prompt.value = "hello world"
    assert ex.weights.shape == (2, 2, 11, 11) and ex.labels[5] == "␣"
    np.testing.assert_allclose(ex.weights, attention_of(model, Letters().encode("hello world")))
    assert ex.figure is not None and ex.shown["weights"].shape == (2, 11, 11)
    ex.prompt.value = "x"                                   # one token: kept as it was, and said why
    assert ex.weights.shape[-1] == 11 and "at least 2 tokens" in ex.caption.value
    assert token_labels(Letters(), [1, 0]) == ["a", "␣"]


nbclient = pytest.importorskip("nbclient")

CELL = (
    "import torch\n"
    "from attncourse.nn import GPT\nfrom attncourse.chapters.ch11_real_model.explorer import RealModelExplorer\n"
    "class Letters:\n    def encode(self, text):\n        return [ord(c) % 32 for c in text]\n"
    "    def decode(self, ids):\n        return ''.join(chr(97 + i % 26) for i in ids)\n"
    "torch.manual_seed(0)\nmodel = GPT(vocab_size=32, d_model=16, num_heads=2, num_layers=2).eval()\n"
    "e = RealModelExplorer.from_model(model, Letters(), 'abcabc')\n"
    "e.layer.value = 1\ne.head.value = 1\ne.prompt.value = 'abcdabcd'\ne"
)
# The headless client of the other explorers' test: it counts Output-widget captures and times cells.
from tests.widgets.test_headless import (  # noqa: E402
    LIMIT,
    CountingClient,
    headless_outputs,
)


def test_the_explorer_returns_at_once_in_a_kernel_with_no_front_end(tmp_path, monkeypatch):
    outputs = headless_outputs([CELL], tmp_path, monkeypatch)
    assert len(outputs) == 1 and len(outputs[0]) == 1 and "image/png" in outputs[0][0]["data"]
    assert all(s < LIMIT - 5 for s in CountingClient.seconds), CountingClient.seconds
