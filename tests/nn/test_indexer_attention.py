"""attncourse/nn/indexer_attention.py: DeepSeek sparse attention, top-k keys a query."""

import math

import pytest
import torch

from attncourse.data.text import char_corpus
from attncourse.nn.causal_attention import CausalSelfAttention
from attncourse.nn.gpt import GPT
from attncourse.nn.indexer_attention import (
    AddAuxiliaryLoss,
    DSAOptions,
    IndexerAttention,
    index_scores,
    indexer_kl,
    keys_read_fraction,
    select_top_k,
)
from attncourse.nn.spec import AttentionSpec, DecoderSpec, PositionSpec
from attncourse.recipes.lm import LMConfig, train_lm

D, H = 16, 4
INDEXER = ("w_qi.weight", "w_ki.weight", "w_wi.weight")


def layer(top_k, scheme="rope", num_kv_heads=2, seed=0):
    torch.manual_seed(seed)
    options = {
        "num_kv_heads": num_kv_heads,
        "top_k_keys": top_k,
        "index_heads": 2,
        "index_dim": 4,
    }
    return (
        AttentionSpec("dsa", options).build(D, H, True, PositionSpec(scheme)).double()
    )


def gpt(attention, seed=0):
    torch.manual_seed(seed)
    spec = DecoderSpec(
        13, d_model=D, num_heads=H, num_layers=2, max_len=32, attention=attention
    )
    return GPT(spec=spec).double().eval()


def test_index_scores_and_top_k_by_hand():
    # one indexer head of width 1 and weight 1: I_{t,s} = ReLU(q_t k_s)
    q = torch.tensor([1.0, 1.0, 1.0, 2.0]).view(1, 1, 4, 1)
    k = torch.tensor([1.0, 3.0, 2.0, 0.5]).view(1, 4, 1)
    scores = index_scores(q, k, torch.ones(1, 4, 1))
    torch.testing.assert_close(scores[0, 3], torch.tensor([2.0, 6.0, 4.0, 1.0]))
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    # query 0: itself; 1: key 0 (its only earlier one) and itself; 2: of keys 0 (1.0),
    # 1 (3.0) the better, 1; 3: of 0 (2.0), 1 (6.0), 2 (4.0) the best, 1, or the best
    # two, 1 and 2
    expected = {
        1: [[0], [0, 1], [1, 2], [1, 3]],
        2: [[0], [0, 1], [0, 1, 2], [1, 2, 3]],
    }
    for top_k, rows in expected.items():
        chosen = select_top_k(scores, causal, top_k)[0, 0]
        assert [torch.nonzero(row).flatten().tolist() for row in chosen] == rows
    # two heads, weighted: I = 0.5 ReLU(q1 k) - 1 ReLU(q2 k); q2 = -q1 switches
    # the second off
    q2 = torch.stack([q[0, 0], -q[0, 0]])[None]
    torch.testing.assert_close(
        index_scores(q2, k, torch.tensor([0.5, -1.0]).expand(1, 4, 2)), 0.5 * scores
    )
    q2[0, 1] = q[0, 0]  # now I = 0.5 q k - q k = -0.5 q k for k, q > 0
    torch.testing.assert_close(
        index_scores(q2, k, torch.tensor([0.5, -1.0]).expand(1, 4, 2)), -0.5 * scores
    )


def test_ties_go_to_the_earlier_key_and_masked_keys_are_never_read():
    scores = torch.zeros(
        1, 3, 5
    )  # every score ties; the queries are the last 3 of 5 positions
    allowed = torch.ones(1, 1, 3, 5, dtype=torch.bool).tril(2)  # causal
    allowed[..., 0] = False  # a padded key
    chosen = select_top_k(scores, allowed, 2)[0, 0]
    # query 2 has one earlier allowed key, query 3 two, query 4 three: the first two
    assert [torch.nonzero(row).flatten().tolist() for row in chosen] == [
        [1, 2],
        [1, 2, 3],
        [1, 2, 4],
    ]
    with pytest.raises(ValueError, match="top_k"):
        select_top_k(scores, allowed, 0)


def test_keys_read_fraction_by_hand_and_as_the_layer_reports_it():
    # 64 positions, 16 keys: positions 0..15 read all t + 1 keys (136), the 48 others
    # 17 each (816)
    assert keys_read_fraction(64, 16) == pytest.approx(952 / 2080)
    assert keys_read_fraction(5, 8) == 1.0
    attn = layer(top_k=3)
    attn(torch.randn(2, 10, D, dtype=torch.float64))
    assert attn.last_keys_read == pytest.approx(keys_read_fraction(10, 3))
    _, weights = attn(torch.randn(2, 10, D, dtype=torch.float64), need_weights=True)
    assert (
        (weights[:, 0] > 0).sum(-1) == torch.tensor([min(t, 3) + 1 for t in range(10)])
    ).all()
    with pytest.raises(ValueError, match="top_k_keys"):
        DSAOptions(top_k_keys=0)


@pytest.mark.parametrize("scheme", ["rope", "alibi", "learned"])
def test_with_top_k_over_the_length_it_is_causal_attention(scheme):
    attn = layer(top_k=12, scheme=scheme).train()  # the indexer's loss changes no value
    plain = CausalSelfAttention(
        D, H, 2, None if scheme == "learned" else scheme
    ).double()
    plain.load_state_dict(
        {k: v for k, v in attn.state_dict().items() if k not in INDEXER}
    )
    x = torch.randn(2, 12, D, dtype=torch.float64)
    out, weights = attn(x, need_weights=True)
    expected, expected_weights = plain(x, need_weights=True)
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(weights, expected_weights, rtol=0, atol=1e-12)
    assert attn.last_keys_read == 1.0
    dense = gpt(AttentionSpec("dsa", {"top_k_keys": 9}))
    reference = gpt(AttentionSpec("gqa"))
    reference.load_state_dict(
        {
            k: v
            for k, v in dense.state_dict().items()
            if not any(f".{name}" in k for name in INDEXER)
        }
    )
    tokens = torch.randint(0, 13, (2, 9))
    torch.testing.assert_close(
        dense(tokens)[0], reference(tokens)[0], rtol=0, atol=1e-12
    )


def test_a_small_top_k_changes_the_output_of_late_queries_only():
    attn = layer(top_k=2)
    plain = CausalSelfAttention(D, H, 2, "rope").double()
    plain.load_state_dict(
        {k: v for k, v in attn.state_dict().items() if k not in INDEXER}
    )
    x = torch.randn(1, 8, D, dtype=torch.float64)
    out, expected = attn(x)[0], plain(x)[0]
    torch.testing.assert_close(
        out[:, :3], expected[:, :3], rtol=0, atol=1e-12
    )  # 2 earlier keys: all
    assert (out[:, 3:] - expected[:, 3:]).abs().amax(-1).min() > 1e-6


def test_cached_decoding_equals_the_full_forward():
    model = gpt(AttentionSpec("dsa", {"top_k_keys": 3, "num_kv_heads": 2}))
    tokens = torch.randint(0, 13, (2, 12))
    full, full_weights = model(tokens, need_weights=True)
    caches = model.init_cache(2)
    steps = [model(tokens[:, :5], caches)[0]] + [
        model(tokens[:, t : t + 1], caches)[0] for t in range(5, 12)
    ]
    torch.testing.assert_close(torch.cat(steps, 1), full, rtol=0, atol=1e-10)
    assert (full_weights[0] > 0).sum(-1).amax() == 4  # 3 keys and itself
    assert model.cache_bytes_per_token() == 2 * (2 * 2 * (D // H) + 16) * 8
    assert (
        sum(t.numel() for t in vars(caches[0]).values())
        == 2 * 12 * model.blocks[0].attn.cache_numbers_per_token()
    )


def test_indexer_kl_by_hand():
    # one query, two keys: the indexer says (1/4, 3/4), the two heads' mean (1/2, 1/2)
    scores = torch.tensor([[[0.0, math.log(3.0)]]], dtype=torch.float64)
    attention = torch.tensor([[0.25, 0.75], [0.75, 0.25]], dtype=torch.float64).view(
        1, 2, 1, 2
    )
    allowed = torch.ones(1, 2, dtype=torch.bool)
    expected = 0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75)
    assert float(indexer_kl(scores, attention, allowed)) == pytest.approx(expected)
    allowed[0, 1] = (
        False  # one key: both distributions are (1), KL 0; a query with no key adds 0
    )
    assert float(indexer_kl(scores, attention, allowed)) == pytest.approx(
        0.0, abs=1e-12
    )
    assert (
        float(indexer_kl(scores, attention, torch.zeros(1, 2, dtype=torch.bool))) == 0.0
    )


def test_the_indexer_learns_from_its_kl_only_and_the_rest_from_the_task():
    attn = layer(top_k=2).train()
    x = torch.randn(2, 8, D, dtype=torch.float64, requires_grad=True)
    target = torch.randn(2, 8, D, dtype=torch.float64)
    (attn(x)[0] * target).sum().backward()
    params = dict(attn.named_parameters())
    # the indexer's gradient is that of its KL, recomputed from the layer's pieces
    xd = x.detach()
    q_i = attn._rope(attn.w_qi(xd).view(2, 8, 2, 4).transpose(1, 2), torch.arange(8))
    k_i = attn._rope(attn.w_ki(xd)[:, None], torch.arange(8))[:, 0]
    scores = index_scores(q_i, k_i, attn.w_wi(xd))
    with torch.no_grad():
        _, dense = CausalSelfAttention.forward(attn, xd, need_weights=True)
    causal = torch.ones(8, 8, dtype=torch.bool).tril()
    kl = indexer_kl(scores, dense, causal)
    assert float(kl.detach()) == pytest.approx(attn.last_index_loss)
    grads = torch.autograd.grad(kl, [params[name] for name in INDEXER])
    for name, grad in zip(INDEXER, grads):
        torch.testing.assert_close(params[name].grad, grad, rtol=1e-10, atol=1e-12)
    # the main weights' gradients are the task's: as in eval mode, where no KL is added
    task = {n: p.grad.clone() for n, p in attn.named_parameters() if n not in INDEXER}
    attn.zero_grad()
    (attn.eval()(x)[0] * target).sum().backward()
    for name, grad in task.items():
        torch.testing.assert_close(params[name].grad, grad, rtol=0, atol=1e-12)
    assert all(
        params[name].grad is None or not params[name].grad.any() for name in INDEXER
    )


def test_add_auxiliary_loss_passes_the_value_and_adds_the_gradient():
    x, w = torch.randn(3, requires_grad=True), torch.tensor(2.0, requires_grad=True)
    out = AddAuxiliaryLoss.apply(x, (w - 1) ** 2)
    assert torch.equal(out, x)
    (3 * out.sum()).backward()
    assert (
        torch.equal(x.grad, torch.full((3,), 3.0)) and float(w.grad) == 2.0
    )  # d(w - 1)^2 / dw, weight 1


def test_bad_indexer_sizes_are_refused():
    with pytest.raises(ValueError, match="index_dim"):
        IndexerAttention(D, H, positional="rope", index_dim=3)
    with pytest.raises(ValueError, match="index_heads"):
        IndexerAttention(D, H, index_heads=0)
    with pytest.raises(ValueError, match="index_heads"):
        DSAOptions(index_heads=0)


def test_train_lm_trains_dsa_and_the_loss_falls(tmp_path):
    text = "the cat sat on the mat. " * 60
    corpus = char_corpus(text)
    config = LMConfig(
        d_model=16,
        num_heads=2,
        num_layers=1,
        d_ff=32,
        context=16,
        batch_size=8,
        steps=40,
        steps_per_epoch=20,
        lr=1e-2,
        warmup=5,
        attention="dsa",
        top_k_keys=4,
        index_heads=2,
        index_dim=8,
    )
    run = train_lm(config, corpus, text, progress=False, out_dir=tmp_path)
    attn = run.model.blocks[0].attn
    assert isinstance(attn, IndexerAttention) and attn.options.top_k_keys == 4
    assert run.history[-1]["valid_loss"] < run.history[0]["valid_loss"]
    assert run.history[-1]["valid_loss"] < math.log(len(corpus.vocab)) - 0.5
    assert attn.last_keys_read == pytest.approx(keys_read_fraction(16, 4))
    assert math.isfinite(attn.last_index_loss)
