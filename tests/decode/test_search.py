"""Tests for greedy decoding and beam search against the model interface."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attncourse.decode.search import (
    beam_search,
    greedy_decode,
    sequence_log_probs,
    wu_length_penalty,
)
from attncourse.nn.rnn import Seq2Seq

SRC_VOCAB, TGT_VOCAB, EOS = 30, 12, 2


def random_model(attention="bahdanau", seed=0):
    """A small untrained model; v_a is randomised so attention is not uniform."""
    torch.manual_seed(seed)
    model = Seq2Seq(SRC_VOCAB, TGT_VOCAB, emb_dim=8, hidden_dim=16, attention=attention)
    if model.attention is not None:
        torch.nn.init.normal_(model.attention.v_a)
    return model


def random_batch(lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, SRC_VOCAB, (len(lengths), max(lengths)), generator=g)
    mask = torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]
    return src.masked_fill(~mask, 0), mask


class ScriptedModel:
    """A fake model whose next-token distribution depends only on the step: tests stopping rules."""

    def __init__(self, script, vocab=6):
        self.script = script  # token preferred at each step
        self.vocab = vocab
        self.training = False

    def parameters(self):
        return iter(())

    def eval(self):
        return self

    def train(self, mode=True):
        return self

    def encode(self, src, src_mask):
        return {"mask": src_mask}

    def init_state(self, enc):
        return torch.zeros(enc["mask"].shape[0], dtype=torch.long)

    def decode_step(self, prev, state, enc):
        step = int(state[0])
        logits = torch.zeros(prev.shape[0], self.vocab)
        logits[:, self.script[min(step, len(self.script) - 1)]] = 5.0
        return logits, state + 1, None

    def reorder(self, obj, index):
        if isinstance(obj, dict):
            return {k: v.index_select(0, index) for k, v in obj.items()}
        return obj.index_select(0, index)


@pytest.mark.parametrize("attention", ["bahdanau", None])
def test_greedy_shapes_and_attention_rows(attention):
    model = random_model(attention)
    src, mask = random_batch([6, 3, 4])
    tokens, attn = greedy_decode(model, src, mask, max_len=7)
    assert len(tokens) == len(attn) == 3
    for b, (toks, a) in enumerate(zip(tokens, attn)):
        assert len(toks) <= 7 and EOS not in toks
        if attention is None:
            assert a is None
        else:
            assert a.shape == (len(toks), int(mask[b].sum()))
            np.testing.assert_allclose(a.sum(-1), 1.0, atol=1e-5)


def test_greedy_is_batch_independent_and_restores_training_flag():
    model = random_model().train()
    src, mask = random_batch([6, 2, 4])
    tokens, attn = greedy_decode(model, src, mask, max_len=8)
    assert model.training
    alone, alone_attn = greedy_decode(model, src[1:2, :2], mask[1:2, :2], max_len=8)
    assert alone[0] == tokens[1]
    np.testing.assert_allclose(alone_attn[0], attn[1], atol=1e-6)


@pytest.mark.parametrize("attention", ["bahdanau", None])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_of_one_equals_greedy(attention, seed):
    model = random_model(attention, seed=seed)
    src, mask = random_batch([5, 2, 7, 3], seed=seed)
    greedy_tokens, greedy_attn = greedy_decode(model, src, mask, max_len=9)
    for alpha in (0.0, 0.6):
        beam_tokens, beam_attn = beam_search(model, src, mask, beam_size=1, max_len=9, length_penalty=alpha)
        assert beam_tokens == greedy_tokens
        for g, b in zip(greedy_attn, beam_attn):
            if attention is None:
                assert g is None and b is None
            else:
                np.testing.assert_allclose(b, g, atol=1e-6)


class TreeModel(ScriptedModel):
    """Next-token probabilities depend on the previous token only; greedy is led astray.

    After bos: p(4) = 0.55, p(5) = 0.45. After 4: p(6) = 0.3, p(7) = p(8) = 0.25, p(eos) = 0.2.
    After 5: p(eos) = 0.9. After 6, 7, 8: p(eos) = 0.99.
    Greedy takes 4, 6, eos: 0.55 * 0.3 * 0.99 = 0.163; the best output is 5, eos: 0.45 * 0.9 = 0.405.
    """

    TABLE = {1: {4: 0.55, 5: 0.45}, 4: {6: 0.3, 7: 0.25, 8: 0.25, EOS: 0.2}, 5: {EOS: 0.9, 9: 0.1}}

    def __init__(self):
        super().__init__(script=[], vocab=10)

    def decode_step(self, prev, state, enc):
        probs = torch.full((prev.shape[0], self.vocab), 1e-6)
        for row, token in enumerate(prev.tolist()):
            for word, p in self.TABLE.get(token, {EOS: 0.99}).items():
                probs[row, word] = p
        return probs.log(), state + 1, None


def test_beam_recovers_from_a_greedy_mistake():
    src, mask = torch.tensor([[5]]), torch.tensor([[True]])
    model = TreeModel()
    assert greedy_decode(model, src, mask, max_len=5)[0] == [[4, 6]]
    assert beam_search(model, src, mask, beam_size=1, max_len=5, length_penalty=0.0)[0] == [[4, 6]]
    assert beam_search(model, src, mask, beam_size=2, max_len=5, length_penalty=0.0)[0] == [[5]]


@pytest.mark.parametrize("attention", ["bahdanau", None])
@pytest.mark.parametrize("max_len", [4, 15])
def test_beam_search_of_a_batch_equals_each_sentence_searched_alone(attention, max_len):
    # The sentences of a batch share one decoder call per step: each must still get what it
    # gets alone, as its beam shrinks at its own pace (varied lengths, some cut at max_len).
    lengths = set()
    for seed in range(3):
        model = random_model(attention, seed=seed)
        with torch.no_grad():
            model.output.weight.mul_(3.0)  # peakier distributions: outputs of varied lengths
        src, mask = random_batch([5, 2, 7, 3, 6, 1], seed=seed)
        for beam_size, alpha in ((3, 0.6), (5, 0.0)):
            tokens, attn = beam_search(model, src, mask, beam_size=beam_size, max_len=max_len, length_penalty=alpha)
            for b in range(src.shape[0]):
                alone, alone_attn = beam_search(model, src[b : b + 1], mask[b : b + 1], beam_size=beam_size,
                                                max_len=max_len, length_penalty=alpha)
                assert tokens[b] == alone[0], (seed, b)
                lengths.add(len(tokens[b]))
                if attention is None:
                    assert attn[b] is None and alone_attn[0] is None
                else:
                    assert attn[b].shape == (len(tokens[b]), int(mask[b].sum()))
                    np.testing.assert_allclose(attn[b], alone_attn[0], atol=1e-6)
    assert len(lengths) >= 3  # the beams ended at different steps


def test_beam_finds_at_least_greedy_log_prob_on_random_models():
    # Not a theorem of beam search (greedy's prefix can be pruned), but what it should do; it holds
    # here. Only outputs that greedy finished (ended with eos) are compared, as complete hypotheses.
    max_len, compared = 15, 0
    for seed in range(3):
        model = random_model(seed=seed)
        with torch.no_grad():  # peakier distributions and a likelier eos give short, varied outputs
            model.output.weight.mul_(3.0)
            model.output.bias[EOS] += 1.0
        src, mask = random_batch([5, 2, 7, 3, 6], seed=seed)
        greedy_tokens, _ = greedy_decode(model, src, mask, max_len=max_len)
        beam_tokens, _ = beam_search(model, src, mask, beam_size=5, max_len=max_len, length_penalty=0.0)
        greedy_lp = sequence_log_probs(model, src, mask, greedy_tokens)
        beam_lp = sequence_log_probs(model, src, mask, beam_tokens)
        for g, b, g_lp, b_lp in zip(greedy_tokens, beam_tokens, greedy_lp, beam_lp):
            if len(g) < max_len:
                compared += 1
                assert len(b) < max_len and b_lp >= g_lp - 1e-5
    assert compared >= 5


def test_sequence_log_probs_matches_teacher_forcing():
    model = random_model().eval()
    src, mask = random_batch([4, 3])
    hyps = [[5, 6, 7], [4]]
    tgt_in = torch.tensor([[1, 5, 6, 7], [1, 4, 0, 0]])
    gold = torch.tensor([[5, 6, 7, EOS], [4, EOS, 0, 0]])
    with torch.no_grad():
        log_probs = torch.log_softmax(model(src, mask, tgt_in).logits, -1)
    picked = log_probs.gather(-1, gold[..., None]).squeeze(-1)
    expected = [picked[0].sum().item(), picked[1, :2].sum().item()]
    np.testing.assert_allclose(sequence_log_probs(model, src, mask, hyps), expected, atol=1e-5)


def test_decoders_stop_at_eos_and_respect_max_len():
    src, mask = torch.tensor([[5, 6]]), torch.tensor([[True, True]])
    stops = ScriptedModel([4, 5, EOS, 4])
    assert greedy_decode(stops, src, mask, max_len=10)[0] == [[4, 5]]
    assert beam_search(stops, src, mask, beam_size=3, max_len=10)[0] == [[4, 5]]
    never = ScriptedModel([4])
    assert greedy_decode(never, src, mask, max_len=5)[0] == [[4] * 5]
    beam_tokens, _ = beam_search(never, src, mask, beam_size=3, max_len=5)
    assert len(beam_tokens[0]) <= 5
    model = random_model()
    src, mask = random_batch([5, 3])
    for tokens in (greedy_decode(model, src, mask, max_len=2)[0], beam_search(model, src, mask, max_len=2)[0]):
        assert all(len(t) <= 2 for t in tokens)


def test_length_penalty_and_argument_checks():
    assert wu_length_penalty(1, 0.0) == 1.0
    assert wu_length_penalty(1, 0.6) == pytest.approx(1.0)
    assert wu_length_penalty(7, 1.0) == pytest.approx(2.0)
    model = random_model()
    src, mask = random_batch([3])
    with pytest.raises(ValueError, match="beam_size"):
        beam_search(model, src, mask, beam_size=0)
    with pytest.raises(ValueError, match="max_len"):
        greedy_decode(model, src, mask, max_len=0)
    with pytest.raises(ValueError, match=r"\(1, 3\).*\(1, 2\)"):
        greedy_decode(model, src, mask[:, :2])


def test_translate_equals_greedy_decode_on_one_sentence():
    from attncourse.data.vocab import Vocabulary
    from attncourse.decode.search import greedy_decode, translate
    from attncourse.nn.rnn import Seq2Seq

    torch.manual_seed(0)
    src_vocab, tgt_vocab = Vocabulary(["a", "b", "c"]), Vocabulary(["x", "y", "z"])
    model = Seq2Seq(len(src_vocab), len(tgt_vocab), emb_dim=8, hidden_dim=8)
    words, attention = translate(model, src_vocab, tgt_vocab, "a c b", max_len=6)
    src = torch.tensor([src_vocab.encode(["a", "c", "b"], add_eos=True)])
    tokens, weights = greedy_decode(model, src, torch.ones_like(src, dtype=torch.bool), max_len=6)
    assert words == tgt_vocab.decode(tokens[0])
    assert np.allclose(attention, weights[0]) and attention.shape[1] == 4


def test_the_encoder_decoders_implement_the_decoder_protocol():
    from attncourse.nn import EncoderDecoder, LuongSeq2Seq, Seq2Seq, Transformer

    models = [Seq2Seq(7, 9, emb_dim=4, hidden_dim=4), LuongSeq2Seq(7, 9, emb_dim=4, hidden_dim=4),
              Transformer(7, 9, d_model=8, num_heads=2, num_encoder_layers=1, num_decoder_layers=1, d_ff=16)]
    for model in models:
        assert isinstance(model, EncoderDecoder) and EncoderDecoder in type(model).__mro__
        assert type(model).from_config(model.config).config == model.config
    # a model without the decoder's methods is not one (the check can fail)
    assert not isinstance(torch.nn.Linear(2, 2), EncoderDecoder)
