"""Tests for the RNN encoder-decoders and Bahdanau attention (module and NumPy step)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attncourse.functional.additive import (
    BAHDANAU_MOVES,
    AdditiveStepTrace,
    additive_attention_step,
)
from attncourse.nn.additive import AdditiveAttention
from attncourse.nn.rnn import (
    Encoder,
    EncoderState,
    Seq2Seq,
    Seq2SeqOutput,
    count_parameters,
    hidden_dim_for_budget,
    reorder_batch,
)
from tests.seq2seq_helpers import padded_batch

SRC_VOCAB, TGT_VOCAB = 40, 60


def make_batch(lengths, tgt_len=6, seed=0):
    return padded_batch(lengths, tgt_len, seed, SRC_VOCAB, TGT_VOCAB)


def small_model(attention="bahdanau", seed=0, **kw):
    torch.manual_seed(seed)
    kw = {"emb_dim": 8, "hidden_dim": 12, **kw}
    return Seq2Seq(SRC_VOCAB, TGT_VOCAB, attention=attention, **kw).eval()


def randomise_v_a(model, seed=1):
    """v_a starts at 0 (uniform attention); give it values so attention is not trivially uniform."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        model.attention.v_a.copy_(torch.randn(model.attention.v_a.shape, generator=g))


def attending_model(attention):
    """:func:`small_model`, its ``v_a`` randomised when it has attention."""
    model = small_model(attention)
    if attention:
        randomise_v_a(model)
    return model


# ---------------------------------------------------------------- AdditiveAttention


def test_additive_attention_shapes_and_uniform_start():
    attn = AdditiveAttention(query_dim=5, key_dim=6, attn_dim=7)
    assert [n for n, _ in attn.named_parameters()] == ["w_a", "u_a", "v_a"]
    assert attn.w_a.shape == (7, 5) and attn.u_a.shape == (7, 6) and attn.v_a.shape == (7,)
    assert torch.all(attn.v_a == 0)
    keys = torch.randn(3, 4, 6)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    context, weights = attn(torch.randn(3, 5), keys, mask)
    assert context.shape == (3, 6) and weights.shape == (3, 4)
    # v_a = 0: every score is 0, so attention is uniform over the real tokens.
    expected = mask.float() / mask.sum(1, keepdim=True)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(context, (expected.unsqueeze(-1) * keys).sum(1))


def test_additive_attention_masking_and_projected_keys():
    torch.manual_seed(0)
    attn = AdditiveAttention(5, 6, 7)
    torch.nn.init.normal_(attn.v_a)
    query, keys = torch.randn(3, 5), torch.randn(3, 4, 6)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool)
    context, weights = attn(query, keys, mask)
    assert torch.all(weights[~mask] == 0.0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3))
    c2, w2 = attn(query, keys, mask, projected_keys=attn.project_keys(keys))
    assert torch.equal(c2, context) and torch.equal(w2, weights)
    # Changing a padded key changes nothing.
    keys2 = keys.clone()
    keys2[1, 3] = 100.0
    c3, w3 = attn(query, keys2, mask)
    torch.testing.assert_close(c3, context)
    torch.testing.assert_close(w3, weights)


def test_additive_attention_bad_shapes_raise():
    attn = AdditiveAttention(5, 6, 7)
    keys, mask = torch.randn(2, 4, 6), torch.ones(2, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"query .*\(2, 4\)"):
        attn(torch.randn(2, 4), keys, mask)
    with pytest.raises(ValueError, match=r"key_dim=6"):
        attn(torch.randn(2, 5), torch.randn(2, 4, 3), mask)
    with pytest.raises(ValueError, match=r"\(3, 5\).*\(2, 4, 6\)"):
        attn(torch.randn(3, 5), keys, mask)
    with pytest.raises(ValueError, match=r"\(2, 4\).*\(2, 5\)"):
        attn(torch.randn(2, 5), keys, torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(TypeError):
        attn(torch.randn(2, 5), keys, torch.ones(2, 4))


@settings(max_examples=25, deadline=None)
@given(
    src_len=st.integers(1, 7),
    n_real=st.integers(1, 7),
    dims=st.tuples(st.integers(1, 6), st.integers(1, 6), st.integers(1, 6)),
    bias=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_additive_attention_equals_numpy_step(src_len, n_real, dims, bias, seed):
    n_real = min(n_real, src_len)
    query_dim, key_dim, attn_dim = dims
    torch.manual_seed(seed)
    attn = AdditiveAttention(query_dim, key_dim, attn_dim, bias=bias).double()
    with torch.no_grad():
        for p in attn.parameters():
            p.normal_()
    s_prev = torch.randn(1, query_dim, dtype=torch.float64)
    h = torch.randn(1, src_len, key_dim, dtype=torch.float64)
    mask = (torch.arange(src_len) < n_real)[None, :]
    context, weights = attn(s_prev, h, mask)
    trace = additive_attention_step(
        s_prev[0].numpy(), h[0].numpy(), attn.w_a.detach().numpy(), attn.u_a.detach().numpy(),
        attn.v_a.detach().numpy(), None if attn.b_a is None else attn.b_a.detach().numpy(), mask[0].numpy(),
    )
    np.testing.assert_allclose(trace.weights, weights[0].detach().numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(trace.context, context[0].detach().numpy(), rtol=0, atol=1e-12)
    assert np.all(trace.weights[n_real:] == 0.0)
    assert trace.weights.sum() == pytest.approx(1.0, abs=1e-12)


def test_numpy_step_trace_fields_and_hand_computed_case():
    assert BAHDANAU_MOVES == ("score", "softmax", "context", "output", "repeat")
    fields = list(AdditiveStepTrace.__dataclass_fields__)
    assert fields.index("scores") < fields.index("weights") < fields.index("context")
    # W_a = I, U_a = I, v_a = (1, 0): e_j = tanh(s_1 + h_j1).
    s_prev = np.array([0.5, -1.0])
    h = np.array([[0.0, 1.0], [1.0, 0.0], [-0.5, 2.0]])
    trace = additive_attention_step(s_prev, h, np.eye(2), np.eye(2), np.array([1.0, 0.0]))
    e = np.tanh(0.5 + h[:, 0])
    np.testing.assert_allclose(trace.scores, e)
    alpha = np.exp(e) / np.exp(e).sum()
    np.testing.assert_allclose(trace.weights, alpha)
    np.testing.assert_allclose(trace.context, alpha @ h)
    with pytest.raises(ValueError, match=r"w_a.*\(2, 2\).*\(3, 3\)"):
        additive_attention_step(s_prev, h, np.eye(3), np.eye(2), np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match=r"mask.*\(3,\).*\(2,\)"):
        additive_attention_step(s_prev, h, np.eye(2), np.eye(2), np.array([1.0, 0.0]), mask=[True, False])


# ---------------------------------------------------------------- Encoder


@pytest.mark.parametrize("bidirectional", [True, False])
def test_encoder_padding_is_zero_and_does_not_change_states(bidirectional):
    torch.manual_seed(0)
    enc = Encoder(SRC_VOCAB, 8, 10, bidirectional=bidirectional).eval()
    src, mask, _ = make_batch([5, 2, 3])
    states, final = enc(src, mask)
    assert states.shape == (3, 5, enc.enc_dim) and final.shape == (3, enc.enc_dim)
    assert enc.enc_dim == (20 if bidirectional else 10)
    assert torch.all(states[~mask] == 0.0)
    alone_states, alone_final = enc(src[1:2, :2], mask[1:2, :2])
    torch.testing.assert_close(states[1:2, :2], alone_states, atol=1e-6, rtol=0)
    torch.testing.assert_close(final[1:2], alone_final, atol=1e-6, rtol=0)
    # final = [last forward state; first backward state]
    h = 10
    torch.testing.assert_close(final[:, :h], states[torch.arange(3), mask.sum(1) - 1, :h])
    if bidirectional:
        torch.testing.assert_close(final[:, h:], states[:, 0, h:])


def test_encoder_rejects_bad_masks():
    enc = Encoder(SRC_VOCAB, 8, 10)
    src, mask, _ = make_batch([3, 2])
    with pytest.raises(ValueError, match=r"\(2, 2\).*\(2, 3\)"):
        enc(src, mask[:, :2])
    with pytest.raises(ValueError, match="prefix"):
        enc(src, torch.tensor([[True, False, True], [True, True, False]]))
    with pytest.raises(ValueError, match="at least one"):
        enc(src, torch.tensor([[True, True, True], [False, False, False]]))
    with pytest.raises(TypeError):
        enc(src, mask.long())


# ---------------------------------------------------------------- Seq2Seq


@pytest.mark.parametrize("attention", ["bahdanau", None])
def test_seq2seq_shapes_config_and_errors(attention):
    model = small_model(attention)
    src, mask, tgt_in = make_batch([5, 3], tgt_len=4)
    out = model(src, mask, tgt_in)
    assert isinstance(out, Seq2SeqOutput)
    assert out.logits.shape == (2, 4, TGT_VOCAB)
    if attention is None:
        assert out.attention is None and model.attention is None
    else:
        assert out.attention.shape == (2, 4, 5)
    rebuilt = Seq2Seq.from_config(json.loads(json.dumps(model.config)))
    rebuilt.load_state_dict(model.state_dict())
    assert count_parameters(rebuilt) == count_parameters(model)
    with pytest.raises(ValueError, match="attention"):
        Seq2Seq(SRC_VOCAB, TGT_VOCAB, attention="luong")
    with pytest.raises(ValueError, match=r"\(2, 5\).*\(3, 4\)"):
        model(src, mask, torch.ones(3, 4, dtype=torch.long))


def test_attention_masks_padding_and_rows_sum_to_one():
    model = attending_model("bahdanau")
    src, mask, tgt_in = make_batch([5, 2, 4])
    attn = model(src, mask, tgt_in).attention
    assert torch.all(attn.masked_select(~mask[:, None, :].expand_as(attn)) == 0.0)
    torch.testing.assert_close(attn.sum(-1), torch.ones(3, tgt_in.shape[1]))
    enc = model.encode(src, mask)
    _, _, weights = model.decode_step(torch.full((3,), 1), model.init_state(enc), enc)
    assert torch.all(weights[~mask] == 0.0)


@pytest.mark.parametrize("attention", ["bahdanau", None])
def test_forward_equals_step_by_step_decoding(attention):
    model = attending_model(attention)
    src, mask, tgt_in = make_batch([5, 3, 1])
    out = model(src, mask, tgt_in)
    enc = model.encode(src, mask)
    state = model.init_state(enc)
    for i in range(tgt_in.shape[1]):
        logits, state, weights = model.decode_step(tgt_in[:, i], state, enc)
        torch.testing.assert_close(out.logits[:, i], logits, atol=1e-6, rtol=0)
        if attention:
            torch.testing.assert_close(out.attention[:, i], weights, atol=1e-6, rtol=0)
        else:
            assert weights is None


@pytest.mark.parametrize("attention", ["bahdanau", None])
def test_sentence_alone_equals_sentence_in_padded_batch(attention):
    model = attending_model(attention)
    src, mask, tgt_in = make_batch([6, 2, 4])
    batch_out = model(src, mask, tgt_in)
    alone = model(src[1:2, :2], mask[1:2, :2], tgt_in[1:2])
    torch.testing.assert_close(batch_out.logits[1:2], alone.logits, atol=1e-6, rtol=0)
    if attention:
        torch.testing.assert_close(batch_out.attention[1:2, :, :2], alone.attention, atol=1e-6, rtol=0)


def test_gradients_reach_the_alignment_model():
    model = small_model("bahdanau").train()
    src, mask, tgt_in = make_batch([5, 3, 4])
    targets = torch.roll(tgt_in, -1, dims=1)

    def loss_and_grads():
        model.zero_grad()
        logits = model(src, mask, tgt_in).logits
        torch.nn.functional.cross_entropy(logits.reshape(-1, TGT_VOCAB), targets.reshape(-1)).backward()
        a = model.attention
        return a.w_a.grad, a.u_a.grad, a.v_a.grad

    w_grad, u_grad, v_grad = loss_and_grads()
    # v_a = 0 at the start: W_a and U_a reach the loss only through v_a, so their gradients are exactly 0.
    assert v_grad.abs().sum() > 0
    assert torch.all(w_grad == 0) and torch.all(u_grad == 0)
    torch.optim.SGD(model.parameters(), lr=0.5).step()
    w_grad, u_grad, v_grad = loss_and_grads()
    assert all(g.abs().sum() > 0 for g in (w_grad, u_grad, v_grad))


def test_reorder_batch_follows_indices():
    model = small_model("bahdanau")
    src, mask, _ = make_batch([5, 2, 4])
    enc = model.encode(src, mask)
    index = torch.tensor([2, 2, 0])
    moved = model.reorder(enc, index)
    assert isinstance(moved, EncoderState)
    assert torch.equal(moved.states, enc.states[index]) and torch.equal(moved.mask, enc.mask[index])
    assert torch.equal(moved.projected_keys, enc.projected_keys[index])
    state = model.init_state(enc)
    assert torch.equal(model.reorder(state, index), state[index])
    assert reorder_batch(None, index) is None


def test_hidden_dim_for_budget_matches_parameter_counts():
    reference = Seq2Seq(SRC_VOCAB, TGT_VOCAB, emb_dim=64, hidden_dim=128, attention="bahdanau")
    target = count_parameters(reference)
    hidden = hidden_dim_for_budget(target, SRC_VOCAB, TGT_VOCAB, None, emb_dim=64)
    plain = Seq2Seq(SRC_VOCAB, TGT_VOCAB, emb_dim=64, hidden_dim=hidden, attention=None)
    assert abs(count_parameters(plain) - target) / target < 0.05
    assert hidden > 128  # the plain model needs a wider state to spend the same budget
    back = hidden_dim_for_budget(count_parameters(plain), SRC_VOCAB, TGT_VOCAB, "bahdanau", emb_dim=64)
    assert abs(back - 128) <= 1
    with pytest.raises(ValueError):
        hidden_dim_for_budget(0, SRC_VOCAB, TGT_VOCAB, None)
