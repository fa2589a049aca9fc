"""Tests for LuongAttention (against the NumPy step) and LuongSeq2Seq (decoding protocol)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attncourse.decode.search import beam_search, greedy_decode
from attncourse.functional.luong import (
    LUONG_MODES,
    LUONG_SCORES,
    gaussian_weights,
    luong_step,
)
from attncourse.nn.luong import (
    LuongAttention,
    LuongDecoderState,
    LuongSeq2Seq,
    LuongSeq2SeqOutput,
)
from attncourse.nn.rnn import Seq2SeqOutput
from tests.seq2seq_helpers import padded_batch

HIDDEN, SRC_LEN, MAX_LEN = 6, 7, 9
LENGTHS = [7, 4, 1]
SRC_VOCAB, TGT_VOCAB = 30, 40


def make_module(score, mode, window=2, seed=0, **kw):
    torch.manual_seed(seed)
    attn = LuongAttention(HIDDEN, score=score, mode=mode, window=window, max_src_len=MAX_LEN, **kw)
    with torch.no_grad():  # larger than U(-0.1, 0.1) so that the weights are far from uniform
        for p in attn.parameters():
            p.mul_(10.0)
    return attn.double()


def make_inputs(seed=0, lengths=LENGTHS):
    g = torch.Generator().manual_seed(seed)
    h_t = torch.randn(len(lengths), HIDDEN, generator=g, dtype=torch.float64)
    h_s = torch.randn(len(lengths), SRC_LEN, HIDDEN, generator=g, dtype=torch.float64)
    mask = torch.arange(SRC_LEN)[None, :] < torch.tensor(lengths)[:, None]
    return h_t, h_s * mask[..., None], mask


def numpy_params(attn):
    return {name: p.detach().numpy() for name, p in attn.named_parameters()}


# ---------------------------------------------------------------- LuongAttention vs the NumPy step


@pytest.mark.parametrize("mode", LUONG_MODES)
@pytest.mark.parametrize("score", LUONG_SCORES)
def test_module_equals_numpy_step(score, mode):
    attn = make_module(score, mode)
    h_t, h_s, mask = make_inputs()
    t = 5
    context, weights, p_t = attn(h_t, h_s, mask, t=t)
    assert context.shape == (3, HIDDEN) and weights.shape == (3, SRC_LEN)
    assert (p_t is None) == (mode == "global")
    for b in range(3):
        kw = {} if mode == "global" else {"D": 2}
        tr = luong_step(h_t[b].numpy(), h_s[b].numpy(), score, numpy_params(attn), mode=mode, t=t,
                        mask=mask[b].numpy(), **kw)
        np.testing.assert_allclose(weights[b].detach().numpy(), tr.weights, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(context[b].detach().numpy(), tr.context, rtol=1e-10, atol=1e-13)
        if mode != "global":
            assert float(p_t[b].detach()) == pytest.approx(tr.p_t, rel=1e-12)


def test_projected_keys_give_the_same_result():
    for score in ("general", "concat"):
        attn = make_module(score, "global")
        h_t, h_s, mask = make_inputs(1)
        a = attn(h_t, h_s, mask)
        b = attn(h_t, h_s, mask, projected_keys=attn.project_keys(h_s))
        torch.testing.assert_close(a[1], b[1])
    assert make_module("dot", "global").project_keys(h_s) is None


def test_parameters_follow_the_paper_layout():
    concat = LuongAttention(6, "concat", "local-p", key_dim=4, attn_dim=5)
    shapes = {name: tuple(p.shape) for name, p in concat.named_parameters()}
    assert shapes == {"w_a": (5, 10), "v_a": (5,), "w_p": (6, 6), "v_p": (6,)}
    assert [n for n, _ in LuongAttention(6, "dot", "global").named_parameters()] == []
    general = LuongAttention(6, "general", key_dim=4)
    assert general.w_a.shape == (6, 4) and float(general.w_a.detach().abs().max()) <= 0.1  # U(-0.1, 0.1), section 4.1
    assert LuongAttention(6, "location", max_src_len=9).w_a.shape == (9, 6)


# ---------------------------------------------------------------- masks, windows, Gaussian


@pytest.mark.parametrize("score", LUONG_SCORES)
@pytest.mark.parametrize("mode", LUONG_MODES)
def test_padded_positions_get_exactly_zero(score, mode):
    attn = make_module(score, mode, window=SRC_LEN)
    h_t, h_s, mask = make_inputs(2)
    _, weights, _ = attn(h_t, h_s, mask, t=0)
    assert torch.all(weights[~mask] == 0.0)
    assert torch.all(weights[1, 4:] == 0.0) and torch.all(weights[2, 1:] == 0.0)


@pytest.mark.parametrize("mode", ["local-m", "local-p"])
def test_positions_outside_the_window_get_exactly_zero(mode):
    attn = make_module("general", mode, window=1)
    h_t, h_s, mask = make_inputs(3, lengths=[7, 7, 7])
    _, weights, p_t = attn(h_t, h_s, mask, t=3)
    outside = (torch.arange(SRC_LEN)[None, :] - p_t[:, None]).abs() > 1
    assert outside.sum() >= 3 * (SRC_LEN - 3)
    assert torch.all(weights[outside] == 0.0)
    assert torch.all(weights[~outside] > 0.0)


def test_local_m_p_t_is_t_clamped_to_each_sentence():
    attn = make_module("dot", "local-m", window=0)
    h_t, h_s, mask = make_inputs(4)
    for t, expected in ((0, [0, 0, 0]), (2, [2, 2, 0]), (9, [6, 3, 0])):
        _, weights, p_t = attn(h_t, h_s, mask, t=t)
        assert p_t.tolist() == expected
        torch.testing.assert_close(weights, torch.nn.functional.one_hot(torch.tensor(expected), SRC_LEN).double())


def test_local_p_gaussian_equals_the_formula_and_is_not_renormalised():
    attn = make_module("dot", "local-p", window=4)
    h_t, h_s, mask = make_inputs(5)
    _, weights, p_t = attn(h_t, h_s, mask)
    plain = LuongAttention(HIDDEN, "dot", "local-p", window=4, gaussian=False).double()
    plain.load_state_dict(attn.state_dict())
    _, align, p_plain = plain(h_t, h_s, mask)
    torch.testing.assert_close(p_plain, p_t)
    for b in range(3):
        bump = gaussian_weights(np.arange(SRC_LEN), float(p_t[b].detach()), 4)  # sigma = D / 2 = 2
        np.testing.assert_allclose(weights[b].detach().numpy(), align[b].detach().numpy() * bump, rtol=1e-12)
    torch.testing.assert_close(align.sum(-1), torch.ones(3, dtype=torch.float64))
    assert torch.all(weights.sum(-1) < 1.0)
    lengths = mask.sum(-1).double()
    assert torch.all((p_t > 0) & (p_t < lengths))  # p_t = S * sigmoid(.), S the real length


@pytest.mark.parametrize("score", LUONG_SCORES)
@pytest.mark.parametrize("mode", ["local-m", "local-p"])
def test_whole_sentence_window_without_gaussian_is_global(score, mode):
    glob = make_module(score, "global", seed=7)
    local = LuongAttention(HIDDEN, score, mode, window=SRC_LEN, max_src_len=MAX_LEN, gaussian=False).double()
    local.load_state_dict(glob.state_dict(), strict=False)
    h_t, h_s, mask = make_inputs(6)
    c_g, w_g, _ = glob(h_t, h_s, mask)
    c_l, w_l, _ = local(h_t, h_s, mask, t=3)
    torch.testing.assert_close(w_l, w_g, rtol=1e-12, atol=0)
    torch.testing.assert_close(c_l, c_g, rtol=1e-12, atol=1e-15)


def test_gradients_reach_w_p_and_v_p_through_p_t():
    attn = make_module("general", "local-p", window=2)
    h_t, h_s, mask = make_inputs(7)
    context, _, p_t = attn(h_t, h_s, mask)
    assert p_t.requires_grad
    context.pow(2).sum().backward()
    for p in (attn.w_p, attn.v_p):
        assert p.grad is not None and p.grad.abs().sum() > 0
    assert attn.w_a.grad.abs().sum() > 0


def test_window_cut_passes_no_gradient_without_the_gaussian():
    attn = make_module("general", "local-p", window=2, gaussian=False)
    h_t, h_s, mask = make_inputs(7)
    context, _, _ = attn(h_t, h_s, mask)
    context.pow(2).sum().backward()
    assert attn.v_p.grad is None or torch.all(attn.v_p.grad == 0)


# ---------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"window": -1}, "window D must be >= 0"),
        ({"window": 2.5}, "integer"),
        ({"score": "additive"}, r"score must be one of \('dot', 'general', 'concat', 'location'\), got 'additive'"),
        ({"mode": "local"}, r"mode must be one of \('global', 'local-m', 'local-p'\), got 'local'"),
        ({"score": "location"}, "needs max_src_len"),
        ({"score": "dot", "key_dim": 8}, "hidden_dim=6 vs key_dim=8"),
        ({"mode": "local-p", "window": 0}, "sigma = D / 2"),
        ({"mode": "global", "gaussian": True}, "no Gaussian"),
    ],
)
def test_attention_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LuongAttention(HIDDEN, **kwargs)


def test_attention_rejects_bad_inputs():
    h_t, h_s, mask = make_inputs()
    attn = make_module("general", "local-m")
    with pytest.raises(ValueError, match=r"key_dim=6\), got \(3, 7, 5\)"):
        attn(h_t, h_s[..., :5], mask, t=0)
    with pytest.raises(ValueError, match=r"hidden_dim=6\), got \(3, 4\)"):
        attn(h_t[:, :4], h_s, mask, t=0)
    with pytest.raises(ValueError, match="needs the target step t"):
        attn(h_t, h_s, mask)
    with pytest.raises(ValueError, match=r"src_mask must be \(batch, src_len\) = \(3, 7\)"):
        attn(h_t, h_s, mask[:, :5], t=0)
    with pytest.raises(TypeError, match="boolean"):
        attn(h_t, h_s, mask.long(), t=0)
    loc = LuongAttention(HIDDEN, "location", max_src_len=5).double()
    with pytest.raises(ValueError, match="max_src_len=5 .* src_len=7"):
        loc(h_t, h_s, mask)


# ---------------------------------------------------------------- LuongSeq2Seq


def make_batch(lengths=(5, 3, 1), tgt_len=5, seed=0):
    return padded_batch(lengths, tgt_len, seed, SRC_VOCAB, TGT_VOCAB)


def small_model(seed=0, **kw):
    torch.manual_seed(seed)
    kw = {"emb_dim": 8, "hidden_dim": 10, "window": 1, "max_src_len": 8, **kw}
    return LuongSeq2Seq(SRC_VOCAB, TGT_VOCAB, **kw).eval()


@pytest.mark.parametrize(
    "kw",
    [
        {"score": "general", "mode": "global"},
        {"score": "dot", "mode": "local-m", "input_feeding": False},
        {"score": "concat", "mode": "local-p", "bidirectional": False},
        {"score": "location", "mode": "local-p"},
    ],
)
def test_forward_equals_step_by_step_decoding(kw):
    model = small_model(**kw)
    src, mask, tgt_in = make_batch()
    out = model(src, mask, tgt_in)
    assert isinstance(out, Seq2SeqOutput) and isinstance(out, LuongSeq2SeqOutput)
    assert out.logits.shape == (3, 5, TGT_VOCAB) and out.attention.shape == (3, 5, 5)
    assert (out.positions is None) == (kw["mode"] == "global")
    assert torch.all(out.attention[~mask[:, None, :].expand_as(out.attention)] == 0.0)
    enc = model.encode(src, mask)
    state = model.init_state(enc)
    assert isinstance(state, LuongDecoderState) and state.step == 0
    for t in range(5):
        logits, state, weights = model.decode_step(tgt_in[:, t], state, enc)
        torch.testing.assert_close(logits, out.logits[:, t])
        torch.testing.assert_close(weights, out.attention[:, t])
        assert state.step == t + 1
    if kw["mode"] == "local-m":
        assert out.positions[0].tolist() == [0, 1, 2, 3, 4] and out.positions[2].tolist() == [0] * 5


def test_decoding_protocol_runs_on_luong_seq2seq():
    model = small_model(score="general", mode="local-p")
    src, mask, _ = make_batch()
    tokens, attention = greedy_decode(model, src, mask, max_len=4)
    assert len(tokens) == 3 and all(len(t) <= 4 for t in tokens)
    assert [a.shape[1] for a in attention] == [5, 3, 1]
    beam_tokens, _ = beam_search(model, src, mask, beam_size=1, max_len=4, length_penalty=0.0)
    assert beam_tokens == tokens
    beam_tokens, beam_attention = beam_search(model, src, mask, beam_size=3, max_len=4)
    assert len(beam_tokens) == 3 and beam_attention[1].shape[1] == 3


def test_config_round_trip_and_encoder_width():
    model = small_model(score="concat", mode="local-m", dropout=0.1)
    config = json.loads(json.dumps(model.config))
    clone = LuongSeq2Seq.from_config(config)
    clone.load_state_dict(model.state_dict())
    assert clone.config == model.config
    assert model.encoder.enc_dim == 10 and model.encoder.hidden_dim == 5  # bidirectional: 2 x hidden_dim / 2
    src, mask, tgt_in = make_batch()
    torch.testing.assert_close(clone.eval()(src, mask, tgt_in).logits, model(src, mask, tgt_in).logits)


def test_seq2seq_rejects_bad_arguments_and_inputs():
    with pytest.raises(ValueError, match="must be even, got 9"):
        small_model(hidden_dim=9)
    with pytest.raises(ValueError, match="window D must be >= 0"):
        small_model(window=-2)
    with pytest.raises(ValueError, match="needs max_src_len"):
        small_model(score="location", max_src_len=None)
    model = small_model()
    src, mask, tgt_in = make_batch()
    enc = model.encode(src, mask)
    with pytest.raises(TypeError, match="LuongDecoderState"):
        model.decode_step(tgt_in[:, 0], enc.final, enc)
    with pytest.raises(ValueError, match=r"prev_tokens must be \(batch,\) = \(3,\)"):
        model.decode_step(tgt_in[:2, 0], model.init_state(enc), enc)
    with pytest.raises(ValueError, match="max_src_len=4 .* src_len=5"):
        small_model(score="location", max_src_len=4).encode(src, mask)
