"""Tests for the Transformer (attncourse.nn.transformer): layers, stacks, decoding, and torch's reference."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
import torch

from attncourse.decode.search import beam_search, greedy_decode
from attncourse.nn.rnn import Seq2SeqOutput, count_parameters
from attncourse.nn.transformer import (
    DecoderLayer,
    EncoderLayer,
    Transformer,
    causal_mask,
)
from tests.seq2seq_helpers import padded_batch

SRC_VOCAB, TGT_VOCAB, D_MODEL, HEADS, D_FF = 30, 20, 16, 2, 32


def tiny(seed=0, dtype=torch.float32, **kw):
    torch.manual_seed(seed)
    args = {"d_model": D_MODEL, "num_heads": HEADS, "num_encoder_layers": 2, "num_decoder_layers": 2,
            "d_ff": D_FF, "dropout": 0.0, "max_len": 32}
    args.update(kw)
    return Transformer(SRC_VOCAB, TGT_VOCAB, **args).to(dtype).eval()


def batch(lengths=(6, 4, 2), tgt_len=5, seed=0):
    return padded_batch(lengths, tgt_len, seed, SRC_VOCAB, TGT_VOCAB, tgt_low=3)


# --- shapes, masks, configuration ----------------------------------------------------------


def test_forward_gives_seq2seq_output_with_cross_attention():
    model = tiny()
    src, src_mask, tgt_in = batch()
    out = model(src, src_mask, tgt_in)
    assert isinstance(out, Seq2SeqOutput)
    assert out.logits.shape == (3, 5, TGT_VOCAB) and out.attention.shape == (3, 5, 6)
    torch.testing.assert_close(out.attention.sum(-1), torch.ones(3, 5))
    padded = ~src_mask[:, None, :].expand_as(out.attention)
    assert torch.all(out.attention[padded] == 0)


def test_attention_maps_cover_every_layer_and_mask_padding():
    model = tiny().train()
    src, src_mask, tgt_in = batch()
    maps = model.attention_maps(src, src_mask, tgt_in)
    assert model.training  # restored
    assert set(maps) == {"encoder_self", "decoder_self", "cross"}
    assert [m.shape for m in maps["encoder_self"]] == [(3, HEADS, 6, 6)] * 2
    assert [m.shape for m in maps["decoder_self"]] == [(3, HEADS, 5, 5)] * 2
    assert [m.shape for m in maps["cross"]] == [(3, HEADS, 5, 6)] * 2
    key_pad = ~src_mask[:, None, None, :]
    for w in maps["encoder_self"] + maps["cross"]:
        assert torch.all(w.masked_select(key_pad.expand_as(w)) == 0)
    future = ~causal_mask(5)
    for w in maps["decoder_self"]:
        assert torch.all(w[..., future] == 0)
    torch.testing.assert_close(maps["cross"][-1].mean(1), model.eval()(src, src_mask, tgt_in).attention)


@pytest.mark.parametrize("norm_first", [False, True])
def test_fast_and_teaching_stacks_agree(norm_first):
    model = tiny(norm_first=norm_first, dtype=torch.float64)
    src, src_mask, tgt_in = batch()
    x, y = model.embed_source(src), model.embed_target(tgt_in)
    mem_fast, _ = model.encode_embedded(x, src_mask)
    mem_slow, _ = model.encode_embedded(x, src_mask, fast=False)
    torch.testing.assert_close(mem_fast, mem_slow, atol=1e-12, rtol=0)
    out_fast, _, _ = model.decode_embedded(y, mem_fast, src_mask)
    out_slow, _, _ = model.decode_embedded(y, mem_fast, src_mask, fast=False)
    torch.testing.assert_close(out_fast, out_slow, atol=1e-12, rtol=0)


def test_padding_never_changes_real_positions():
    model = tiny(dtype=torch.float64)
    src, src_mask, tgt_in = batch(lengths=(4, 4))
    short = model(src, src_mask, tgt_in)
    padded_src = torch.cat([src, torch.zeros(2, 3, dtype=torch.long)], dim=1)
    padded_mask = torch.cat([src_mask, torch.zeros(2, 3, dtype=torch.bool)], dim=1)
    long = model(padded_src, padded_mask, tgt_in)
    torch.testing.assert_close(long.logits, short.logits, atol=1e-12, rtol=0)
    torch.testing.assert_close(long.attention[..., :4], short.attention, atol=1e-12, rtol=0)


def test_norms_and_tied_embeddings():
    post, pre = tiny(), tiny(norm_first=True)
    assert post.encoder_norm is None and post.decoder_norm is None
    assert isinstance(pre.encoder_norm, torch.nn.LayerNorm) and isinstance(pre.decoder_norm, torch.nn.LayerNorm)
    assert post.output_proj.weight is post.tgt_embedding.weight
    untied = tiny(tie_embeddings=False)
    assert untied.output_proj.weight is not untied.tgt_embedding.weight
    assert count_parameters(untied) - count_parameters(post) == TGT_VOCAB * D_MODEL
    assert torch.all(post.src_embedding.weight[0] == 0) and torch.all(post.tgt_embedding.weight[0] == 0)


def test_config_round_trip_and_learned_positions():
    model = tiny(positional="learned", norm_first=True)
    config = json.loads(json.dumps(model.config))
    clone = Transformer.from_config(config)
    clone.load_state_dict(model.state_dict())
    src, src_mask, tgt_in = batch()
    torch.testing.assert_close(clone.eval()(src, src_mask, tgt_in).logits, model(src, src_mask, tgt_in).logits)
    assert count_parameters(model) - count_parameters(tiny(norm_first=True)) == 2 * 32 * D_MODEL


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError, match="positional"):
        Transformer(10, 10, d_model=16, num_heads=2, positional="rotary")
    with pytest.raises(ValueError, match=r"d_model=18.*num_heads=4"):
        Transformer(10, 10, d_model=18, num_heads=4)
    model = tiny()
    src, src_mask, tgt_in = batch()
    with pytest.raises(ValueError, match="tgt_in"):
        model(src, src_mask, tgt_in[:2])
    with pytest.raises(TypeError, match="boolean"):
        model(src, src_mask.long(), tgt_in)
    with pytest.raises(ValueError, match="max_len=32"):
        model(src, src_mask, torch.ones(3, 33, dtype=torch.long))


def test_layers_return_weights_when_asked():
    torch.manual_seed(0)
    enc, dec = EncoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0), DecoderLayer(D_MODEL, HEADS, D_FF, dropout=0.0)
    x, y = torch.randn(2, 4, D_MODEL), torch.randn(2, 3, D_MODEL)
    out, w = enc(x)
    assert out.shape == x.shape and w is None
    _, w = enc(x, need_weights=True)
    assert w.shape == (2, HEADS, 4, 4)
    out, sw, cw = dec(y, x, causal_mask(3), need_weights=True)
    assert out.shape == y.shape and sw.shape == (2, HEADS, 3, 3) and cw.shape == (2, HEADS, 3, 4)


def test_dropout_acts_in_training_only():
    model = tiny(dropout=0.3)
    src, src_mask, tgt_in = batch()
    a, b = model(src, src_mask, tgt_in).logits, model(src, src_mask, tgt_in).logits
    torch.testing.assert_close(a, b)
    model.train()
    assert not torch.allclose(model(src, src_mask, tgt_in).logits, a)


# --- incremental decoding ------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype, atol, kw",
    [(torch.float32, 1e-5, {}), (torch.float64, 1e-10, {}), (torch.float64, 1e-10, {"norm_first": True}),
     (torch.float64, 1e-10, {"positional": "learned"})],
)
def test_decode_step_with_cache_equals_teacher_forcing(dtype, atol, kw):
    model = tiny(dtype=dtype, **kw)
    src, src_mask, tgt_in = batch(tgt_len=6)
    full = model(src, src_mask, tgt_in)
    enc = model.encode(src, src_mask)
    state = model.init_state(enc)
    for t in range(tgt_in.shape[1]):
        previous = state
        logits, state, weights = model.decode_step(tgt_in[:, t], state, enc)
        assert state.step == t + 1 and len(state.self_kv[0]) == t + 1 and len(previous.self_kv[0]) == t
        torch.testing.assert_close(logits, full.logits[:, t], atol=atol, rtol=0)
        torch.testing.assert_close(weights, full.attention[:, t], atol=atol, rtol=0)
        assert torch.all(weights[~src_mask] == 0)


def test_greedy_and_beam_search_run_and_beam_one_is_greedy():
    model = tiny(seed=1)
    src, src_mask, _ = batch(lengths=(5, 3, 4))
    greedy, greedy_att = greedy_decode(model, src, src_mask, max_len=7)
    beam1, beam1_att = beam_search(model, src, src_mask, beam_size=1, max_len=7, length_penalty=0.0)
    assert beam1 == greedy
    for a, b in zip(greedy_att, beam1_att):
        np.testing.assert_allclose(a, b, atol=1e-6)
    beam3, att3 = beam_search(model, src, src_mask, beam_size=3, max_len=7)
    assert len(beam3) == 3
    for tokens, att, n_src in zip(beam3, att3, src_mask.sum(1).tolist()):
        assert att.shape == (len(tokens), n_src)
        np.testing.assert_allclose(att.sum(-1), 1.0, atol=1e-5)


def test_trains_with_the_course_fit_loop():
    from attncourse.data.batching import build_vocabs, make_batches
    from attncourse.data.pairs import PairDataset
    from attncourse.train.fit import FitConfig, fit

    rng = np.random.default_rng(0)
    pairs = []
    for _ in range(64):
        src = tuple(str(c) for c in rng.choice(list("abcdef"), size=int(rng.integers(2, 5))))
        pairs.append((src, src))
    data = PairDataset(tuple(pairs), level="word", name="copy")
    src_vocab, tgt_vocab = build_vocabs(data)
    batches = make_batches(data, src_vocab, tgt_vocab, 16, shuffle=True, seed=0)
    torch.manual_seed(0)
    model = Transformer(len(src_vocab), len(tgt_vocab), d_model=D_MODEL, num_heads=HEADS, num_encoder_layers=1,
                        num_decoder_layers=1, d_ff=D_FF, dropout=0.0, max_len=16, norm_first=True)
    config = FitConfig(epochs=4, lr=1e-2, batch_size=16, seed=0, device="cpu", num_threads=1)
    history = fit(model, batches, batches[:1], config, progress=False).history
    assert history[-1]["train_loss"] < history[0]["train_loss"]


# --- equivalence with torch.nn.Transformer -------------------------------------------------


def copy_attention(ours, theirs) -> None:
    theirs.in_proj_weight.copy_(torch.cat([ours.w_q.weight, ours.w_k.weight, ours.w_v.weight]))
    theirs.in_proj_bias.copy_(torch.cat([ours.w_q.bias, ours.w_k.bias, ours.w_v.bias]))
    theirs.out_proj.weight.copy_(ours.w_o.weight)
    theirs.out_proj.bias.copy_(ours.w_o.bias)


def copy_linear_or_norm(ours, theirs) -> None:
    theirs.weight.copy_(ours.weight)
    theirs.bias.copy_(ours.bias)


def torch_reference(model: Transformer, norm_first: bool) -> torch.nn.Transformer:
    """torch.nn.Transformer with our weights. Its stacks always end in a LayerNorm; ours only
    when pre-norm, so for post-norm the reference's final norms are removed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "enable_nested_tensor is True, but ... norm_first"
        ref = torch.nn.Transformer(
            d_model=D_MODEL, nhead=HEADS, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=D_FF,
            dropout=0.0, activation="relu", batch_first=True, norm_first=norm_first, dtype=torch.float64,
        )
    with torch.no_grad():
        for ours, theirs in zip(model.encoder_layers, ref.encoder.layers):
            copy_attention(ours.self_attn, theirs.self_attn)
            copy_linear_or_norm(ours.ffn.w_1, theirs.linear1)
            copy_linear_or_norm(ours.ffn.w_2, theirs.linear2)
            copy_linear_or_norm(ours.self_attn_norm, theirs.norm1)
            copy_linear_or_norm(ours.ffn_norm, theirs.norm2)
        for ours, theirs in zip(model.decoder_layers, ref.decoder.layers):
            copy_attention(ours.self_attn, theirs.self_attn)
            copy_attention(ours.cross_attn, theirs.multihead_attn)
            copy_linear_or_norm(ours.ffn.w_1, theirs.linear1)
            copy_linear_or_norm(ours.ffn.w_2, theirs.linear2)
            copy_linear_or_norm(ours.self_attn_norm, theirs.norm1)
            copy_linear_or_norm(ours.cross_attn_norm, theirs.norm2)
            copy_linear_or_norm(ours.ffn_norm, theirs.norm3)
        if norm_first:
            copy_linear_or_norm(model.encoder_norm, ref.encoder.norm)
            copy_linear_or_norm(model.decoder_norm, ref.decoder.norm)
        else:
            ref.encoder.norm = None
            ref.decoder.norm = None
    return ref


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("fast", [True, False])
def test_stacks_equal_torch_transformer(norm_first, fast):
    model = tiny(seed=2, dtype=torch.float64, norm_first=norm_first)
    for p in model.parameters():  # random LayerNorm affines and biases, so every copy matters
        if p.dim() == 1:
            torch.nn.init.normal_(p, std=0.5)
    ref = torch_reference(model, norm_first)
    ref.train()  # dropout is 0; training mode keeps torch off its nested-tensor fast path
    src, src_mask, tgt_in = batch(lengths=(6, 3, 5), tgt_len=4, seed=3)
    x, y = model.embed_source(src), model.embed_target(tgt_in)
    memory, _ = model.encode_embedded(x, src_mask, fast=fast)
    ours, _, _ = model.decode_embedded(y, memory, src_mask, fast=fast)
    # torch: key_padding_mask True = ignore, boolean attn_mask True = not allowed; ours are the opposite.
    theirs = ref(x, y, tgt_mask=~causal_mask(4), src_key_padding_mask=~src_mask,
                 memory_key_padding_mask=~src_mask)
    their_memory = ref.encoder(x, src_key_padding_mask=~src_mask)
    torch.testing.assert_close(memory, their_memory, atol=1e-10, rtol=0)
    torch.testing.assert_close(ours, theirs, atol=1e-10, rtol=0)
