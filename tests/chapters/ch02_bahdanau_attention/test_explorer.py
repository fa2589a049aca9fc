"""Tests of attncourse.chapters.ch02_bahdanau_attention.explorer, driven programmatically as a learner would click.

The model is tiny and untrained: the mechanics do not depend on training. Its
v_a is set to random values so that the weights are not uniform.
"""

import matplotlib

matplotlib.use("Agg")

import ipywidgets as widgets  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from attncourse.chapters.ch02_bahdanau_attention.explorer import (  # noqa: E402
    BahdanauStepper,
)
from attncourse.data import Vocabulary  # noqa: E402
from attncourse.data.pairs import tokenize  # noqa: E402
from attncourse.decode.search import greedy_decode  # noqa: E402
from attncourse.nn.rnn import Seq2Seq  # noqa: E402

EXAMPLES = ("soixante et onze", "deux mille vingt quatre", "cent")
MAX_LEN = 6
SRC_VOCAB = Vocabulary.build([tokenize(e, "word") for e in EXAMPLES])
TGT_VOCAB = Vocabulary(["seventy", "one", "two", "thousand", "twenty", "four", "hundred"])


def tiny_model(attention="bahdanau", seed=0):
    torch.manual_seed(seed)
    model = Seq2Seq(len(SRC_VOCAB), len(TGT_VOCAB), emb_dim=8, hidden_dim=6, attention=attention)
    if model.attention is not None:
        with torch.no_grad():
            model.attention.v_a.copy_(3.0 * torch.randn(model.attention.attn_dim,
                                                        generator=torch.Generator().manual_seed(seed)))
    return model


@pytest.fixture(scope="module")
def model():
    return tiny_model()


@pytest.fixture(scope="module")
def stepper(model):
    s = BahdanauStepper(model, SRC_VOCAB, TGT_VOCAB, EXAMPLES, max_len=MAX_LEN)
    yield s
    plt.close("all")


def reference(model, text):
    """Tokens and weights of attncourse.decode.search.greedy_decode for one sentence."""
    ids = torch.tensor([SRC_VOCAB.encode(tokenize(text, "word"), add_eos=True)])
    tokens, attention = greedy_decode(model, ids, torch.ones_like(ids, dtype=torch.bool), max_len=MAX_LEN)
    # token_of, not decode: an untrained model may output <pad> or <bos>, which decode would drop.
    return [TGT_VOCAB.token_of(i) for i in tokens[0]], attention[0]


def test_starts_on_step_one_of_the_first_example(stepper):
    fresh = BahdanauStepper(tiny_model(), SRC_VOCAB, TGT_VOCAB, EXAMPLES, max_len=MAX_LEN)
    assert fresh.src_tokens == tokenize(EXAMPLES[0], "word") + ["<eos>"]
    assert fresh.t.value == 1 and fresh.t.min == 1 and fresh.t.max == len(fresh.tokens_out)
    assert fresh.shown["t"] == 1 and fresh.shown["output_token"] == fresh.tokens_out[0]
    assert fresh.previous.disabled
    assert isinstance(fresh.figure, Figure)
    assert isinstance(fresh.widget, widgets.VBox)
    assert isinstance(fresh.out, widgets.Output) and isinstance(fresh.caption, widgets.HTML)
    assert "Step 1 of" in fresh.caption.value


def test_translation_matches_greedy_decode(model, stepper):
    for text in EXAMPLES:
        stepper.example.value = text
        words, attention = reference(model, text)
        out = stepper.tokens_out
        assert 1 <= len(out) <= MAX_LEN
        assert (out[:-1] if out[-1] == Vocabulary.EOS else out) == words
        assert stepper.translation == " ".join(words)
        # greedy_decode drops the eos step; the stepper keeps it.
        np.testing.assert_allclose(stepper.attention[: len(words)], attention, atol=1e-6)


def test_trace_weights_equal_the_models_weights_at_every_step(stepper):
    for text in EXAMPLES:
        stepper.example.value = text
        src_len = len(stepper.src_tokens)
        assert stepper.attention.shape == (len(stepper.tokens_out), src_len)
        for t in range(1, len(stepper.tokens_out) + 1):
            stepper.t.value = t
            shown = stepper.shown
            assert shown["t"] == t and shown["output_token"] == stepper.tokens_out[t - 1]
            np.testing.assert_allclose(shown["weights"], stepper.attention[t - 1], atol=1e-5)
            assert shown["weights"].shape == (src_len,)
            assert shown["weights"].sum() == pytest.approx(1.0)
            assert np.all(shown["weights"] > 0)


def test_weights_are_not_uniform(stepper):
    stepper.example.value = EXAMPLES[1]
    stepper.t.value = 1
    assert np.ptp(stepper.shown["weights"]) > 0.05


def test_scores_and_context_follow_the_paper(model, stepper):
    """e_tj = v_a^T tanh(W_a s_{t-1} + U_a h_j), written out here; c_t = alpha_t @ h."""
    attn = model.attention
    w_a, u_a, v_a = (p.detach().double().numpy() for p in (attn.w_a, attn.u_a, attn.v_a))
    stepper.example.value = EXAMPLES[1]
    with torch.no_grad():
        ids = torch.tensor([SRC_VOCAB.encode(stepper.src_tokens[:-1], add_eos=True)])
        h = model.encode(ids, torch.ones_like(ids, dtype=torch.bool)).states[0].double().numpy()
    for t in range(1, len(stepper.tokens_out) + 1):
        stepper.t.value = t
        trace = stepper.traces[t - 1]
        np.testing.assert_allclose(trace.h, h, atol=1e-6)
        scores = np.array([v_a @ np.tanh(w_a @ trace.s_prev + u_a @ h_j) for h_j in h])
        np.testing.assert_allclose(stepper.shown["scores"], scores, atol=1e-10)
        e = np.exp(scores - scores.max())
        np.testing.assert_allclose(stepper.shown["weights"], e / e.sum(), atol=1e-10)
        np.testing.assert_allclose(stepper.shown["context"], stepper.shown["weights"] @ h, atol=1e-10)


def test_first_state_is_the_models_initial_state(model, stepper):
    stepper.example.value = EXAMPLES[0]
    with torch.no_grad():
        ids = torch.tensor([SRC_VOCAB.encode(stepper.src_tokens[:-1], add_eos=True)])
        s0 = model.init_state(model.encode(ids, torch.ones_like(ids, dtype=torch.bool)))[0].double().numpy()
    np.testing.assert_allclose(stepper.traces[0].s_prev, s0, atol=1e-7)


def test_next_and_previous_clamp(stepper):
    stepper.example.value = EXAMPLES[0]
    last = stepper.t.max
    stepper.t.value = 1
    stepper.previous.click()
    assert stepper.t.value == 1
    for _ in range(last + 2):
        stepper.next.click()
    assert stepper.t.value == last and stepper.shown["t"] == last
    assert stepper.next.disabled
    stepper.previous.click()
    assert stepper.t.value == max(1, last - 1)


def test_another_example_refreshes_tokens_slider_and_figure(stepper):
    stepper.example.value = EXAMPLES[0]
    stepper.t.value = stepper.t.max
    stepper.example.value = EXAMPLES[1]
    assert stepper.src_tokens == tokenize(EXAMPLES[1], "word") + ["<eos>"]
    assert stepper.t.value == 1 and stepper.t.max == len(stepper.tokens_out)
    assert stepper.shown["weights"].shape == (5,)
    assert [t.get_text() for t in stepper.figure.axes[0].get_xticklabels()] == stepper.src_tokens
    assert [t.get_text() for t in stepper.figure.axes[-1].get_yticklabels()] == stepper.tokens_out


def test_slider_max_follows_the_number_of_steps():
    model = tiny_model()
    with torch.no_grad():
        model.output.bias[TGT_VOCAB.eos_id] = 100.0  # the model stops at once
    s = BahdanauStepper(model, SRC_VOCAB, TGT_VOCAB, EXAMPLES, max_len=MAX_LEN)
    assert s.tokens_out == ["<eos>"] and s.translation == ""
    assert s.t.max == 1 and s.previous.disabled and s.next.disabled
    assert "stops" in s.caption.value
    with torch.no_grad():
        model.output.bias[TGT_VOCAB.eos_id] = -100.0  # the model never stops
    s.example.value = EXAMPLES[1]
    assert len(s.tokens_out) == MAX_LEN and s.t.max == MAX_LEN


def test_figure_shows_the_step_and_the_framed_alignment(stepper):
    stepper.example.value = EXAMPLES[1]
    stepper.t.value = 2
    fig = stepper.figure
    assert len(fig.subfigs) == 2
    step_fig, align_fig = fig.subfigs
    assert step_fig.get_suptitle().startswith("Decoding step 2 of")
    assert f"next output '{stepper.tokens_out[1]}'" in step_fig.get_suptitle()
    align_ax = align_fig.axes[0]
    texts = [t.get_text() for t in align_ax.texts]
    assert texts == [f"{v:.2f}" for v in stepper.attention.ravel()]
    assert len(align_ax.patches) == 1  # the frame around row t


def test_figures_do_not_accumulate(stepper):
    stepper.example.value = EXAMPLES[0]
    before = len(plt.get_fignums())
    for t in range(1, stepper.t.max + 1):
        stepper.t.value = t
    stepper.example.value = EXAMPLES[2]
    assert len(plt.get_fignums()) == before == 0


def test_display_hooks(stepper):
    bundle = stepper._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_char_level_and_unknown_tokens(model):
    s = BahdanauStepper(model, SRC_VOCAB, TGT_VOCAB, ["ab c"], level="char", max_len=3)
    assert s.src_tokens == ["a", "b", " ", "c", "<eos>"]
    assert s.shown["weights"].shape == (5,)


def test_model_without_attention_is_rejected():
    with pytest.raises(ValueError, match="no attention"):
        BahdanauStepper(tiny_model(attention=None), SRC_VOCAB, TGT_VOCAB, EXAMPLES)


@pytest.mark.parametrize("examples, match", [((), "empty"), (("  ",), "no token")])
def test_bad_examples_are_rejected(model, examples, match):
    with pytest.raises(ValueError, match=match):
        BahdanauStepper(model, SRC_VOCAB, TGT_VOCAB, examples)


def test_bad_max_len_is_rejected(model):
    with pytest.raises(ValueError, match="max_len"):
        BahdanauStepper(model, SRC_VOCAB, TGT_VOCAB, EXAMPLES, max_len=0)


def test_training_flag_is_restored(model):
    model.train()
    BahdanauStepper(model, SRC_VOCAB, TGT_VOCAB, EXAMPLES[:1], max_len=2)
    assert model.training
    model.eval()


def test_source_ends_with_eos_as_in_translate(model, stepper):
    """The stepper feeds the source as training and decoding.translate do: with its <eos>."""
    from attncourse.decode.search import translate

    for text in EXAMPLES:
        stepper.example.value = text
        words, weights = translate(model, SRC_VOCAB, TGT_VOCAB, text, max_len=MAX_LEN)
        # decode drops the <pad> and <bos> an untrained model may output, as translate does.
        assert TGT_VOCAB.decode(TGT_VOCAB.encode(stepper.tokens_out)) == words
        steps = len(weights)
        np.testing.assert_allclose(stepper.attention[:steps], weights, atol=1e-6)
