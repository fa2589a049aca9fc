"""Chapter 13's code: the ViT and its parts against independent references, BERT's masking
statistics, the masked LM recipe, fine-tuning, the checks' hints and the explorers."""

import dataclasses

import numpy as np
import pytest
import scipy.stats
import torch
import torch.nn.functional as F
from torch import nn

from attncourse.chapters.ch13_encoders import checks as c
from attncourse.chapters.ch13_encoders.explorer import (
    FillInExplorer,
    ViTAttentionExplorer,
)
from attncourse.chapters.ch13_encoders.recipe import (
    IGNORE,
    MASK_ID,
    PooledClassifier,
    bert_mask,
    classifier_accuracy,
    code_labels,
    evaluation_windows,
    fill_in,
    finetune,
    gap_accuracy,
    labelled_windows,
    load_digits_split,
    mlm_config,
    mlm_loss,
    train_classifier,
    train_mlm,
)
from attncourse.chapters.ch13_encoders.vit import (
    VisionTransformer,
    attention_rollout,
    average_ranks,
    encoder_spec,
    high_norm_share,
    occlusion_importance,
    patchify,
    position_similarity,
    rank_correlation,
)
from attncourse.data.text import char_corpus
from attncourse.data.vocab import Vocabulary
from attncourse.nn.gpt import GPT, DecoderOnlyBlock

# ---------------------------------------------------------------- the encoder block


def test_encoder_block_equals_torch_transformer_encoder_layer():
    torch.manual_seed(0)
    block = DecoderOnlyBlock(encoder_spec(16, 4, 1, 32)).eval()
    ref = nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, activation="relu", batch_first=True,
                                     norm_first=True).eval()
    a = block.attn
    with torch.no_grad():
        ref.self_attn.in_proj_weight.copy_(torch.cat([a.w_q.weight, a.w_k.weight, a.w_v.weight]))
        ref.self_attn.in_proj_bias.zero_()
        ref.self_attn.out_proj.weight.copy_(a.w_o.weight)
        ref.self_attn.out_proj.bias.zero_()
        ref.linear1.load_state_dict(block.ffn.w_1.state_dict())
        ref.linear2.load_state_dict(block.ffn.w_2.state_dict())
        ref.norm1.load_state_dict(block.attn_norm.state_dict())
        ref.norm2.load_state_dict(block.ffn_norm.state_dict())
    x = torch.randn(3, 7, 16)
    torch.testing.assert_close(block(x)[0], ref(x), atol=1e-5, rtol=1e-5)


def test_encoder_attention_is_sdpa_without_a_mask_and_sees_later_positions():
    torch.manual_seed(1)
    block = DecoderOnlyBlock(encoder_spec(16, 2, 1, 32)).eval()
    a, x = block.attn, torch.randn(2, 5, 16)
    heads = [w(x).view(2, 5, 2, 8).transpose(1, 2) for w in (a.w_q, a.w_k, a.w_v)]
    ref = a.w_o(F.scaled_dot_product_attention(*heads).transpose(1, 2).reshape(2, 5, 16))
    out, weights = a(x, need_weights=True)
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)
    assert (weights[..., 0, 1:] > 0).all()            # position 0 reads the later ones


# ---------------------------------------------------------------- patches, the ViT


def test_patchify_equals_unfold_row_major():
    images = torch.randn(3, 2, 8, 6)
    ref = F.unfold(images, kernel_size=2, stride=2).transpose(1, 2)   # (b, L, C p p), L row-major
    torch.testing.assert_close(patchify(images, 2), ref, rtol=0, atol=0)
    flat = torch.arange(16.0).reshape(1, 4, 4)
    assert patchify(flat, 2)[0, 1].tolist() == [2.0, 3.0, 6.0, 7.0]


@pytest.mark.parametrize(("images", "p", "match"), [
    (torch.zeros(2, 8), 2, "images must be"), (torch.zeros(1, 8, 6), 4, "must divide"),
    (torch.zeros(1, 8, 8), 0, "must divide")])
def test_patchify_refuses_bad_input(images, p, match):
    with pytest.raises(ValueError, match=match):
        patchify(images, p)


def test_vit_shapes_tokens_and_registers():
    torch.manual_seed(0)
    vit = VisionTransformer(d_model=16, num_heads=2, num_layers=2, d_ff=32, num_registers=3)
    images = torch.rand(5, 8, 8)
    logits, weights, states = vit(images, need_weights=True, return_states=True)
    assert logits.shape == (5, 10) and states.shape == (5, 1 + 3 + 16, 16)
    assert len(weights) == 2 and weights[0].shape == (5, 2, 20, 20)
    torch.testing.assert_close(weights[1].sum(-1), torch.ones(5, 2, 20))
    z = vit.tokens(images)
    torch.testing.assert_close(z[:, 1:4], vit.registers.expand(5, -1, -1))          # no position
    torch.testing.assert_close(z[:, 0], (vit.cls_token + vit.position_embedding[:, 0])[0].expand(5, -1))
    expected = vit.patch_embedding(patchify(images, 2)) + vit.position_embedding[:, 1:]
    torch.testing.assert_close(z[:, 4:], expected)
    # the fast path (SDPA) and the path that returns the weights give the same scores
    torch.testing.assert_close(vit(images), logits, atol=1e-5, rtol=1e-5)


def test_vit_refuses_bad_sizes_and_images():
    with pytest.raises(ValueError, match="patch_size=3 must divide image_size=8"):
        VisionTransformer(patch_size=3)
    with pytest.raises(ValueError, match="num_registers"):
        VisionTransformer(num_registers=-1)
    with pytest.raises(ValueError, match=r"\(batch, \[channels,\] 8, 8\)"):
        VisionTransformer()(torch.zeros(2, 7, 7))


def test_rollout_by_hand_two_layers():
    identity = torch.eye(2)[None, None]
    swap = torch.tensor([[0.0, 1.0], [1.0, 0.0]])[None, None]
    torch.testing.assert_close(attention_rollout([identity, swap]), torch.full((1, 2, 2), 0.5))
    torch.testing.assert_close(attention_rollout([swap, swap], residual=False), torch.eye(2)[None])
    # two layers of two heads: (0.5 mean(W2) + 0.5 I) (0.5 mean(W1) + 0.5 I), written out
    w1, w2 = torch.rand(1, 2, 3, 3).softmax(-1), torch.rand(1, 2, 3, 3).softmax(-1)
    a1, a2 = (0.5 * w.mean(1)[0] + 0.5 * torch.eye(3) for w in (w1, w2))
    rollout = attention_rollout([w1, w2])[0]
    torch.testing.assert_close(rollout, a2 @ a1)
    torch.testing.assert_close(rollout.sum(-1), torch.ones(3))


def test_rollout_renormalises_rows_as_abnar_and_zuidema():
    # one head whose rows do not sum to 1 (a masked or clipped map), two tokens, by hand:
    # 0.5 W + 0.5 I = [[0.75, 0.25], [0.1, 0.5]]; rows / their sums = [[0.75, 0.25], [1/6, 5/6]]
    w = torch.tensor([[0.5, 0.5], [0.2, 0.0]], dtype=torch.float64)[None, None]
    expected = torch.tensor([[0.75, 0.25], [1 / 6, 5 / 6]], dtype=torch.float64)
    torch.testing.assert_close(attention_rollout([w])[0], expected)
    torch.testing.assert_close(attention_rollout([w, w])[0], expected @ expected)
    # without the residual: the raw rows, re-normalised; [[0.5, 0.5], [1, 0]]
    torch.testing.assert_close(attention_rollout([w], residual=False)[0],
                               torch.tensor([[0.5, 0.5], [1.0, 0.0]], dtype=torch.float64))
    # a softmax map is unchanged by the re-normalisation
    soft = torch.rand(2, 3, 4, 4, dtype=torch.float64).softmax(-1)
    unnormalised = 0.5 * soft.mean(1) + 0.5 * torch.eye(4, dtype=torch.float64)
    torch.testing.assert_close(attention_rollout([soft]), unnormalised, rtol=0, atol=1e-15)


def test_rollout_refuses_negative_weights_and_empty_rows():
    with pytest.raises(ValueError, match="non-negative"):
        attention_rollout([torch.tensor([[[[1.5, -0.5], [0.0, 1.0]]]])])
    with pytest.raises(ValueError, match="sums to 0"):
        attention_rollout([torch.tensor([[[[1.0, 0.0], [0.0, 0.0]]]])], residual=False)


def test_average_ranks_share_ties_as_scipy_does():
    x = np.array([[0.0, 0.3, 0.0, 0.0, -1.0], [2.0, 1.0, 2.0, 5.0, 1.0]])
    # by hand: row 0 sorted -1 | 0 0 0 | 0.3 -> ranks 0 | 2 2 2 | 4
    np.testing.assert_array_equal(average_ranks(x), [[2, 4, 2, 2, 0], [2.5, 0.5, 2.5, 4, 0.5]])
    rng = np.random.default_rng(0)
    drawn = rng.integers(0, 4, size=(50, 16)).astype(float)       # many ties
    np.testing.assert_allclose(average_ranks(drawn), scipy.stats.rankdata(drawn, axis=1) - 1)


def test_rank_correlation_is_spearman_with_ties():
    rng = np.random.default_rng(1)
    a = rng.normal(size=(40, 16))
    b = np.where(rng.random((40, 16)) < 0.3, 0.0, a + rng.normal(size=(40, 16)))   # ties at 0
    rhos = [scipy.stats.spearmanr(x, y).statistic for x, y in zip(a, b)]
    assert rank_correlation(a, b) == pytest.approx(np.mean(rhos), abs=1e-12)
    # ties broken by position would make equal drops agree with a positional pattern
    drops = np.array([[0.0, 0.0, 0.0, 0.0, 0.5, 0.2]])
    position = np.arange(6.0)[None]
    by_position = np.argsort(np.argsort(drops, axis=1), axis=1).astype(float)
    assert np.corrcoef(by_position[0], position[0])[0, 1] > rank_correlation(drops, position)
    # a constant row has no rank order: left out
    both = rank_correlation(np.vstack([a[:1], np.zeros((1, 16))]), np.vstack([b[:1], b[1:2]]))
    assert both == pytest.approx(rhos[0], abs=1e-12)
    with pytest.raises(ValueError, match="constant"):
        rank_correlation(np.zeros((2, 3)), np.ones((2, 3)))
    with pytest.raises(ValueError, match="one shape"):
        rank_correlation(np.zeros((2, 3)), np.zeros((3, 2)))


def test_rollout_refuses_empty_or_mismatched_layers():
    with pytest.raises(ValueError, match="at least one layer"):
        attention_rollout([])
    with pytest.raises(ValueError, match="one shape"):
        attention_rollout([torch.rand(1, 2, 3, 3), torch.rand(1, 2, 4, 4)])


def test_position_similarity_is_cosine():
    e = torch.randn(6, 5)
    ref = F.cosine_similarity(e[:, None], e[None], dim=-1)
    torch.testing.assert_close(position_similarity(e), ref, atol=1e-6, rtol=1e-5)
    with pytest.raises(ValueError, match=r"\(N, d_model\)"):
        position_similarity(torch.zeros(1, 2, 3))


def test_high_norm_share_by_hand():
    states = torch.tensor([[1.0, 0.0], [0.0, 1.0], [3.0, 4.0], [0.0, 2.0]])   # norms 1, 1, 5, 2
    assert high_norm_share(states, 2.0) == 0.25          # median 1.5: only the 5 is above 3
    assert high_norm_share(states, 1.2) == 0.5           # 5 and 2 are above 1.8
    assert high_norm_share(states.double()[None], 1.2) == 0.5


def test_occlusion_of_an_empty_patch_changes_nothing():
    torch.manual_seed(0)
    vit = VisionTransformer(d_model=16, num_heads=2, num_layers=1, d_ff=16).eval()
    images = torch.zeros(3, 8, 8)
    images[:, :2, :2] = 1.0                              # only patch 0 has ink
    drop = occlusion_importance(vit, images, torch.tensor([0, 1, 2]))
    assert drop.shape == (3, 16)
    assert torch.equal(drop[:, 1:], torch.zeros(3, 15)) and (drop[:, 0] != 0).all()


# ---------------------------------------------------------------- BERT's masking, the MLM recipe


def test_bert_mask_statistics_are_15_80_10_10():
    ids = torch.randint(4, 104, (50, 4000))
    inputs, targets = bert_mask(ids, 104, generator=torch.Generator().manual_seed(0))
    chosen = targets != IGNORE
    n = chosen.sum()
    assert abs(chosen.float().mean() - 0.15) < 0.003          # 200,000 draws: sd 0.0008
    masked = (inputs[chosen] == MASK_ID).sum() / n
    same = (inputs[chosen] == ids[chosen]).sum() / n           # kept, and random draws of the same id
    assert abs(masked - 0.8) < 0.008 and abs(same - (0.1 + 0.1 / 100)) < 0.006
    assert torch.equal(targets[chosen], ids[chosen]) and torch.equal(inputs[~chosen], ids[~chosen])
    randomised = chosen & (inputs != MASK_ID) & (inputs != ids)
    assert inputs[randomised].min() >= 4                       # never a special token


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"ids": torch.zeros(5, dtype=torch.long)}, "batch, seq_len"), ({"rate": 0.0}, "rate"),
    ({"vocab_size": 4}, "first_id")])
def test_bert_mask_refuses_bad_input(kwargs, match):
    args = {"ids": torch.zeros(2, 5, dtype=torch.long), "vocab_size": 10, **kwargs}
    with pytest.raises(ValueError, match=match):
        bert_mask(**args)


def test_mlm_loss_is_cross_entropy_at_chosen_positions_only():
    logits, targets = torch.randn(2, 4, 7), torch.tensor([[1, IGNORE, 2, IGNORE], [IGNORE, 3, IGNORE, IGNORE]])
    keep = targets != IGNORE
    torch.testing.assert_close(mlm_loss(logits, targets), F.cross_entropy(logits[keep], targets[keep]))


def _corpus():
    text = "def f(x):\n    return x\n" * 40 + "The attention weights sum to one. " * 60
    return text, char_corpus(text, valid_fraction=0.2)


def test_train_mlm_trains_loads_and_refuses_a_causal_config():
    text, corpus = _corpus()
    config = mlm_config(corpus="test", d_model=16, num_heads=2, num_layers=1, d_ff=16, context=16,
                        batch_size=4, steps=2, steps_per_epoch=1, warmup=1)
    run = train_mlm(config, corpus, progress=False)
    assert not run.model.spec.causal and run.model.vocab is corpus.vocab
    again = train_mlm(config, corpus, progress=False)                  # loaded from its folder
    assert all(torch.equal(a, b) for a, b in zip(run.model.state_dict().values(),
                                                 again.model.state_dict().values()))
    with pytest.raises(ValueError, match="causal=False"):
        train_mlm(dataclasses.replace(config, causal=True), corpus)


class _Recorder(nn.Module):
    """A stand-in model: logits that put all mass on a fixed id, and the inputs it saw."""

    def __init__(self, vocab_size, answer):
        super().__init__()
        self.p = nn.Parameter(torch.zeros(1))
        self.vocab_size, self.answer, self.seen = vocab_size, answer, []

    def forward(self, tokens):
        self.seen.append(tokens.clone())
        logits = torch.zeros(*tokens.shape, self.vocab_size)
        logits[..., self.answer] = 1.0
        return logits, []


def test_gap_accuracy_masks_the_gap_and_reads_the_left_for_the_causal_model():
    windows = torch.full((3, 10), 5)
    windows[:, 4] = 7
    mlm, causal = _Recorder(9, 7), _Recorder(9, 5)
    acc = gap_accuracy(mlm, causal, windows, left=4, gaps=(1, 3, None))
    assert acc == {"causal": 0.0, "mlm": {1: 1.0, 3: 1.0, None: 1.0}}
    assert causal.seen[0].shape == (3, 4)
    assert (mlm.seen[1][:, 4:7] == MASK_ID).all() and (mlm.seen[1][:, 7:] == 5).all()
    assert (mlm.seen[2][:, 4:] == MASK_ID).all() and (mlm.seen[2][:, :4] == 5).all()
    with pytest.raises(ValueError, match="runs past"):
        gap_accuracy(mlm, causal, windows, left=4, gaps=(7,))


def test_fill_in_and_evaluation_windows():
    vocab = Vocabulary(list("abc "))
    model = GPT(len(vocab), d_model=8, num_heads=2, num_layers=1, d_ff=8, causal=False)
    guesses = fill_in(model, vocab, "abc cab", 2, 3, top=2)
    assert len(guesses) == 3 and all(len(g) == 2 and g[0][1] >= g[1][1] for g in guesses)
    with pytest.raises(ValueError, match="inside the text"):
        fill_in(model, vocab, "abc", 2, 3)
    w = evaluation_windows(torch.arange(100), 10, 5)
    assert w.shape == (5, 10) and torch.equal(w[:, 1] - w[:, 0], torch.ones(5, dtype=torch.long))


def test_code_labels_and_pure_windows():
    text = "prose\n```{code-cell} ipython3\nx = 1\n```\nmore\n"
    labels = code_labels(text)
    assert "".join(ch for ch, lab in zip(text, labels) if lab) == "x = 1\n"
    ids = torch.arange(400)
    lab = np.zeros(400, dtype=np.int8)
    lab[200:] = 1
    windows, targets = labelled_windows(ids, lab, 10, 5, seed=0)
    assert windows.shape == (10, 10) and targets.sum() == 5
    assert ((windows[:, 0] >= 200) == (targets == 1)).all()
    with pytest.raises(ValueError, match="fewer than"):
        labelled_windows(ids, lab, 10, 50)


def test_pooled_classifier_means_the_final_states_and_finetunes():
    torch.manual_seed(0)
    encoder = GPT(12, d_model=8, num_heads=2, num_layers=1, d_ff=8, causal=False)
    clf = PooledClassifier(encoder, 2)
    tokens = torch.randint(4, 12, (3, 6))
    states = []
    hook = encoder.final_norm.register_forward_hook(lambda _m, _i, out: states.append(out))
    encoder(tokens)
    hook.remove()
    torch.testing.assert_close(clf(tokens), clf.classifier(states[0].mean(1)))
    targets = torch.tensor([0, 1, 0])
    before = F.cross_entropy(clf(tokens), targets)
    tuned = finetune(encoder, tokens, targets, steps=30, batch_size=3, lr=1e-2)
    assert F.cross_entropy(tuned(tokens), targets) < before


def test_digits_split_and_a_classifier_learns():
    train_x, train_y, test_x, test_y = load_digits_split()
    assert train_x.shape == (1300, 8, 8) and test_x.shape == (497, 8, 8)
    assert 0 <= float(train_x.min()) and float(train_x.max()) <= 1 and set(test_y.tolist()) == set(range(10))
    torch.manual_seed(0)
    vit = train_classifier(VisionTransformer(d_model=16, num_heads=2, num_layers=1, d_ff=16),
                           train_x, train_y, steps=200, progress=False)
    assert classifier_accuracy(vit, test_x, test_y) > 0.5                  # chance: 0.1


# ---------------------------------------------------------------- checks


def padded_attention(x, w_q, w_k, w_v, w_o, h, key_mask, scale=None, axis=-1, on="keys", after=False,
                     nan=False):
    """A NumPy answer (no library attention), and with keyword arguments the typical mistakes."""
    b, n, d = x.shape
    q, k, v = [(x @ w).reshape(b, n, h, d // h).transpose(0, 2, 1, 3) for w in (w_q, w_k, w_v)]
    s = q @ k.transpose(0, 1, 3, 2) * ((d // h) ** -0.5 if scale is None else scale)
    mask = {"keys": key_mask[:, None, None, :], "queries": key_mask[:, None, :, None],
            "none": np.ones((b, 1, 1, n), dtype=bool)}[on]
    if after:
        e = np.exp(s - s.max(-1, keepdims=True))
        p = e / e.sum(-1, keepdims=True) * mask
    else:
        s = np.where(mask, s, -np.inf)
        top = s.max(axis, keepdims=True)
        e = np.exp(s - np.where(np.isfinite(top), top, 0.0))
        total = e.sum(axis, keepdims=True)
        p = e / total if nan else np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    return (p @ v).transpose(0, 2, 1, 3).reshape(b, n, d) @ w_o, p


def test_padded_attention_weights_rows_and_empty_sequences():
    for case in c.padded_attention_cases(seed=7):
        out, weights = case.expected
        real = case.args["key_mask"]
        sums = weights.sum(-1)                                    # (batch, h, n)
        assert np.allclose(sums[real.any(-1)], 1) and np.all(sums[~real.any(-1)] == 0)
        assert np.all(weights[np.broadcast_to(~real[:, None, None, :], weights.shape)] == 0)
        assert np.all(out[~real.any(-1)] == 0)
        mine = padded_attention(*case.args.values())
        assert all(np.allclose(a, b, atol=1e-10) for a, b in zip(mine, case.expected))


def test_reference_answers_pass_every_check():

    def mask(ids, cu, au, rid, mid):
        ch = cu < 0.15
        out = np.where(ch & (au < 0.8), mid, np.where(ch & (au >= 0.8) & (au < 0.9), rid, ids))
        return out, np.where(ch, ids, -100)

    def rollout(w):
        r = np.eye(w.shape[-1])
        for layer in w:
            r = (0.5 * layer.mean(0) + 0.5 * np.eye(w.shape[-1])) @ r
        return r

    assert c.check_padded_attention(padded_attention).passed
    assert c.check_bert_mask(mask).passed
    assert c.check_patchify(lambda im, p: im.reshape(im.shape[0], im.shape[1] // p, p, -1, p)
                            .transpose(0, 1, 3, 2, 4).reshape(im.shape[0], -1, p * p)).passed
    assert c.check_rollout(rollout).passed
    assert c.check_mean_pool(lambda s, m: (s * m[..., None]).sum(1) / m.sum(1, keepdims=True)).passed
    assert c.check_high_norm_share(lambda s, f: float((np.linalg.norm(s, axis=-1) > f * np.median(
        np.linalg.norm(s, axis=-1))).mean())).passed


def _wrong(check, fn, hint):
    result = check(fn)
    assert not result.passed and hint in result.hint, result


def test_typical_wrong_answers_get_their_hint():
    for mistake, hint in (({"scale": 1.0}, c.UNSCALED_HINT), ({"axis": -2}, c.QUERY_AXIS_HINT),
                          ({"on": "queries"}, c.QUERY_MASK_HINT), ({"on": "none"}, c.NO_MASK_HINT),
                          ({"after": True}, c.AFTER_SOFTMAX_HINT), ({"nan": True}, c.EMPTY_HINT)):
        _wrong(c.check_padded_attention, lambda *a, m=mistake: padded_attention(*a, **m), hint)
        assert c.check_padded_attention(lambda *a, m=mistake: padded_attention(*a, **m)).recognised
    _wrong(c.check_padded_attention, lambda *a: (lambda o, w: (o, 0.9 * w))(*padded_attention(*a)),
           c.ROW_SUM_HINT)
    _wrong(c.check_bert_mask, lambda ids, cu, au, rid, mid: (c._corrupt(ids, cu, au, rid, mid)[0], ids),
           c.ALL_TARGETS_HINT)
    _wrong(c.check_bert_mask, lambda *a: c._corrupt(*a, swap=True), c.SWAPPED_HINT)
    _wrong(c.check_bert_mask, lambda *a: c._corrupt(*a, all_mask=True), c.ALL_MASKED_HINT)
    _wrong(c.check_patchify, lambda im, p: im.reshape(im.shape[0], -1, p * p), c.NO_PERMUTE_HINT)
    for k, hint in enumerate((c.NO_IDENTITY_HINT, c.ORDER_HINT, c.UNNORMALISED_HINT)):
        _wrong(c.check_rollout, lambda w, k=k: c._rollout_variants(w)[k][1], hint)
    _wrong(c.check_mean_pool, lambda s, m: s.mean(1), c.PADDING_HINT)
    _wrong(c.check_high_norm_share, lambda s, f: c._share(s, f), c.MEAN_HINT)


def test_checks_refuse_the_package_references():
    assert not c.check_patchify(lambda im, p: patchify(torch.as_tensor(im), p).numpy()).passed
    assert not c.check_rollout(lambda w: attention_rollout([x[None] for x in torch.as_tensor(w)])[0]).passed


# ---------------------------------------------------------------- explorers


def test_fill_in_explorer_states_and_book():
    vocab = Vocabulary(list("abc "))
    model = GPT(len(vocab), d_model=8, num_heads=2, num_layers=1, d_ff=8, causal=False)
    explorer = FillInExplorer(model, vocab, [("abc cab", 1), ("cab abc", 0)], max_span=2, top=3)
    assert explorer.shown["length"] == 1 and explorer.shown["truth"] == "b"
    explorer.span.value = 2
    explorer.sentence.value = 1
    assert explorer.shown["truth"] == "ca" and len(explorer.shown["guesses"]) == 2
    html = explorer.to_html()
    assert "Fill-in explorer" in html and "4 states" in html or html.count("data:image/png") >= 4
    with pytest.raises(ValueError, match="runs past"):
        FillInExplorer(model, vocab, [("ab", 1)], max_span=2)


def test_vit_attention_explorer_states_and_errors():
    torch.manual_seed(0)
    vit = VisionTransformer(d_model=16, num_heads=2, num_layers=2, d_ff=16)
    images, labels = torch.rand(3, 8, 8), torch.tensor([1, 2, 3])
    explorer = ViTAttentionExplorer(vit, images, labels)
    assert explorer.shown["heads"].shape == (2, 4, 4)
    np.testing.assert_allclose(explorer.shown["heads"].sum(axis=(1, 2)) + explorer.shown["cls_self"], 1,
                               rtol=1e-5)
    explorer.layer.value = 2
    np.testing.assert_allclose(explorer.shown["rollout"].sum(), 1 - float(
        attention_rollout([w[:1] for w in explorer.weights])[0, 0, 0]), rtol=1e-5)
    assert explorer.to_html().count("data:image/png") >= 6
    with pytest.raises(ValueError, match="registers"):
        ViTAttentionExplorer(VisionTransformer(num_registers=1), images, labels)


def test_train_classifier_is_cached_and_matches_a_plain_loop():
    train_x, train_y, _, _ = load_digits_split()
    x, y = train_x[:40], train_y[:40]

    def fresh():
        torch.manual_seed(3)
        return VisionTransformer(d_model=8, num_heads=2, num_layers=1, d_ff=8)

    trained = train_classifier(fresh(), x, y, steps=5, seed=1, progress=False, desc="cache test")
    # the same updates written out: AdamW on batches drawn from the seed's generator
    plain = fresh()
    generator = torch.Generator().manual_seed(1)
    optimizer = torch.optim.AdamW(plain.parameters(), lr=3e-3, weight_decay=0.01)
    for _ in range(5):
        batch = torch.randint(0, 40, (32,), generator=generator)
        loss = F.cross_entropy(plain(x[batch]), y[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    for a, b in zip(trained.state_dict().values(), plain.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    again = train_classifier(fresh(), x, y, steps=5, seed=1, progress=False, desc="cache test")
    assert all(torch.equal(a, b) for a, b in zip(trained.state_dict().values(), again.state_dict().values()))
