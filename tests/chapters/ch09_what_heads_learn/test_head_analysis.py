"""Chapter 9's head analysis: scores against hand-computed cases, OV circuits, ablations,
the attention-only GPT, the repeat task and the training recipe's bookkeeping."""

import math

import pytest
import torch

from attncourse.chapters.ch09_what_heads_learn.recipe import (
    InductionConfig,
    transition_step,
)
from attncourse.data.induction import repeated_probe, repeated_segments
from attncourse.functional.head_scores import (
    copying_score,
    first_position_attention,
    in_context_learning_score,
    prefix_match_mask,
    prefix_matching_score,
    previous_token_score,
    uniform_first_position,
)
from attncourse.nn.circuits import ablate_heads, head_output_means, ov_circuit
from attncourse.nn.gpt import GPT


def causal_uniform(n):
    return torch.ones(n, n).tril() / torch.arange(1, n + 1)[:, None]


# ------------------------------------------------------------------ scores by hand

def test_prefix_matching_score_by_hand():
    tokens = torch.tensor([3, 5, 3, 5])      # query 2 (token 3) -> key 1; query 3 (token 5) -> key 2
    w = torch.zeros(4, 4)
    w[0, 0] = 1
    w[1, :2] = torch.tensor([0.5, 0.5])
    w[2, :3] = torch.tensor([0.2, 0.7, 0.1])
    w[3, :4] = torch.tensor([0.1, 0.1, 0.4, 0.4])
    assert prefix_match_mask(tokens).nonzero().tolist() == [[2, 1], [3, 2]]
    assert math.isclose(float(prefix_matching_score(w, tokens)), (0.7 + 0.4) / 2, rel_tol=1e-6)


def test_prefix_matching_sums_several_earlier_occurrences_and_batches():
    tokens = torch.tensor([[1, 2, 1, 2, 1], [4, 4, 4, 4, 4]])
    w = causal_uniform(5).expand(2, 3, 5, 5)      # batch 2, 3 heads
    got = prefix_matching_score(w, tokens)
    assert got.shape == (2, 3)
    # row 0: query 2 -> key 1 (1/3); query 3 -> key 2 (1/4); query 4 -> keys 1, 3 (2/5)
    assert torch.allclose(got[0], torch.tensor((1 / 3 + 1 / 4 + 2 / 5) / 3))
    # row 1: query i >= 1 matches keys 1..i: weight i / (i + 1)
    assert torch.allclose(got[1], torch.tensor((1 / 2 + 2 / 3 + 3 / 4 + 4 / 5) / 4))


def test_perfect_induction_pattern_scores_one():
    tokens = repeated_probe(6, 2, 20)
    w = torch.zeros(12, 12)
    w[:6, 0] = 1
    for i in range(6, 12):
        w[i, i - 6 + 1 if i < 11 else 0] = 1     # the last query's match would be key 6
    w[11] = 0
    w[11, 6] = 1
    assert torch.isclose(prefix_matching_score(w, tokens), torch.tensor(1.0))


def test_prefix_matching_errors():
    with pytest.raises(ValueError, match="occurs twice"):
        prefix_matching_score(causal_uniform(3), torch.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="seq_len"):
        prefix_matching_score(causal_uniform(3), torch.tensor([0, 1, 0, 1]))
    with pytest.raises(ValueError, match="seq_len, seq_len"):
        prefix_matching_score(torch.ones(3, 4), torch.tensor([0, 1, 0]))


def test_previous_token_and_first_position_by_hand():
    w = torch.eye(4).roll(-1, dims=1).tril()     # query i -> key i - 1
    w[0, 0] = 1
    assert float(previous_token_score(w)) == 1.0
    assert float(first_position_attention(w)) == pytest.approx(1 / 3)   # only query 1 looks at key 0
    uniform = causal_uniform(4)
    assert float(first_position_attention(uniform)) == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)
    assert uniform_first_position(4) == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3)
    with pytest.raises(ValueError):
        previous_token_score(torch.ones(1, 1))


def test_copying_score_by_hand():
    assert float(copying_score(torch.eye(5))) == pytest.approx(1.0)
    assert float(copying_score(-2 * torch.eye(5))) == pytest.approx(-1.0)
    rotation = torch.tensor([[0.0, -1.0], [1.0, 0.0]])                 # eigenvalues +-i
    assert float(copying_score(rotation)) == pytest.approx(0.0, abs=1e-7)
    assert float(copying_score(torch.diag(torch.tensor([3.0, -1.0])))) == pytest.approx(0.5)
    batch = torch.stack([torch.eye(3), -torch.eye(3)])
    assert copying_score(batch).tolist() == pytest.approx([1.0, -1.0])


def test_in_context_learning_score():
    losses = torch.tensor([[4.0, 3.0, 1.0], [2.0, 2.0, 0.0]])
    assert float(in_context_learning_score(losses, 0, -1)) == pytest.approx(((1 - 4) + (0 - 2)) / 2)
    with pytest.raises(ValueError, match="late=3"):
        in_context_learning_score(losses, 0, 3)


def test_transition_step():
    assert transition_step([0, 10, 20, 30], [4.0, 3.9, 1.0, 0.5]) == 20    # half-way: 2.25
    assert transition_step([0, 10, 20, 30], [0.1, 0.2, 0.3, 0.9]) == 30    # half-way: 0.5
    with pytest.raises(ValueError):
        transition_step([0], [1.0])


# ------------------------------------------------------------------ model pieces

def tiny_gpt(**kwargs):
    torch.manual_seed(0)
    return GPT(11, d_model=16, num_heads=4, num_layers=2, max_len=16, positional="learned",
               attention_only=True, **kwargs).double().eval()


def test_attention_only_gpt_has_no_ffn_and_equals_attention_sum():
    model = tiny_gpt()
    assert all(b.ffn is None and b.ffn_norm is None for b in model.blocks)
    assert model.output_proj.weight is not model.embedding.weight          # untied
    assert model.spec.norm.kind == "none" and model.spec.ffn.kind == "none" and not model.spec.tie_output
    assert "attention_only" not in GPT(11, d_model=16, num_heads=4).config   # old configs keep their hash
    rebuilt = GPT.from_config(model.config)
    assert rebuilt.blocks[0].ffn is None
    x = torch.randint(0, 11, (2, 7))
    # by hand: embed + positions, then x + attn(x) per block (no LayerNorm), unembed
    h = model.positional_encoding(model.embedding(x) * 4.0, 0)
    for block in model.blocks:
        h = h + block.attn(h)[0]
    expected = h @ model.output_proj.weight.T
    torch.testing.assert_close(model(x)[0], expected)


def test_ov_circuit_by_hand():
    model = tiny_gpt()
    layer, head = 1, 2
    attn, d_k = model.blocks[layer].attn, model.blocks[layer].attn.d_k
    e, u = model.embedding.weight, model.output_proj.weight
    sl = slice(head * d_k, (head + 1) * d_k)
    expected = torch.stack([((e[a] @ attn.w_v.weight[sl].T) @ attn.w_o.weight[:, sl].T) @ u.T
                            for a in range(11)])
    torch.testing.assert_close(ov_circuit(model, layer, head), expected)
    with pytest.raises(ValueError, match="outside"):
        ov_circuit(model, 2, 0)
    # with LayerNorms (the full GPT), their gains are folded in
    torch.manual_seed(1)
    full = GPT(11, d_model=16, num_heads=4, num_layers=1, d_ff=8).double()
    with torch.no_grad():
        full.blocks[0].attn_norm.weight.uniform_(0.5, 2.0)
        full.final_norm.weight.uniform_(0.5, 2.0)
    a, g1, gf = full.blocks[0].attn, full.blocks[0].attn_norm.weight, full.final_norm.weight
    e = full.embedding.weight
    expected = ((e * g1) @ a.w_v.weight[:4].T @ a.w_o.weight[:, :4].T * gf) @ e.T
    torch.testing.assert_close(ov_circuit(full, 0, 0), expected)


def test_zero_ablation_equals_zeroed_value_weights():
    model = tiny_gpt()
    x = torch.randint(0, 11, (2, 9))
    with ablate_heads(model, [(0, 1), (1, 3)]):
        ablated, _ = model(x)
    clean, _ = model(x)
    reference = tiny_gpt()
    d_k = reference.blocks[0].attn.d_k
    with torch.no_grad():
        reference.blocks[0].attn.w_v.weight[1 * d_k:2 * d_k] = 0
        reference.blocks[1].attn.w_v.weight[3 * d_k:4 * d_k] = 0
    torch.testing.assert_close(ablated, reference(x)[0])
    assert not torch.allclose(ablated, clean)
    torch.testing.assert_close(model(x)[0], clean)              # the hooks are gone


def test_mean_ablation_writes_the_mean_output():
    model = tiny_gpt()
    x = torch.randint(0, 11, (3, 9))
    means = head_output_means(model, x)
    assert [m.shape for m in means] == [(4, 4), (4, 4)]
    # by hand: layer 0's head outputs before W_O, averaged over batch and positions
    h = model.positional_encoding(model.embedding(x) * 4.0, 0)
    attn = model.blocks[0].attn
    captured = {}
    hook = attn.w_o.register_forward_pre_hook(lambda m, a: captured.setdefault("x", a[0]))
    attn(h)
    hook.remove()
    torch.testing.assert_close(means[0], captured["x"].unflatten(-1, (4, 4)).mean((0, 1)))
    # mean-ablating layer 1 head 0 = replacing its output by a constant: bias b = W_O^h mean
    with ablate_heads(model, [(1, 0)], mode="mean", means=means):
        ablated, _ = model(x)
    with ablate_heads(model, [(1, 0)], mode="zero"):
        zeroed, _ = model(x)
    assert not torch.allclose(ablated, zeroed)
    with pytest.raises(ValueError, match="means"), ablate_heads(model, [(1, 0)], mode="mean"):
        pass
    with pytest.raises(ValueError, match="mode"), ablate_heads(model, [(1, 0)], mode="half"):
        pass


# ------------------------------------------------------------------ data and config

def test_repeated_segments():
    batch = repeated_segments(5, 20, 9, 3, 6, torch.Generator().manual_seed(1))
    assert batch.inputs.shape == batch.targets.shape == batch.predictable.shape == (5, 20)
    assert torch.equal(batch.inputs[:, 1:], batch.targets[:, :-1])
    for row in range(5):
        s = int(batch.segment_len[row])
        tokens = torch.cat([batch.inputs[row], batch.targets[row, -1:]])
        assert torch.equal(tokens[s:], tokens[:-s])
        assert batch.predictable[row].tolist() == [t + 1 >= s for t in range(20)]
    with pytest.raises(ValueError):
        repeated_segments(2, 5, 9, 4, 8)


def test_repeated_probe_has_distinct_tokens():
    probe = repeated_probe(8, 3, 10, seed=2)
    assert probe.shape == (24,) and len(set(probe[:8].tolist())) == 8
    assert torch.equal(probe[8:16], probe[:8])
    with pytest.raises(ValueError):
        repeated_probe(11, 2, 10)


def test_induction_config():
    config = InductionConfig()
    assert config.icl_positions == (6, 62)
    assert config.run_name == "induction/repeat-2layer-seed0"
    with pytest.raises(ValueError):
        InductionConfig(task="music")
    with pytest.raises(ValueError):
        InductionConfig(steps=30, steps_per_epoch=25)


def test_train_induction_records_scores_and_snapshots(tmp_path, monkeypatch):
    from attncourse.chapters.ch09_what_heads_learn.recipe import (
        snapshot_model,
        snapshot_steps,
        train_induction,
    )
    from attncourse.data.text import char_corpus

    monkeypatch.setenv("ATTNCOURSE_RUNS", str(tmp_path))
    config = InductionConfig(num_layers=1, d_model=16, num_heads=2, vocab_size=12, context=16, max_segment=6,
                             batch_size=8, steps=4, steps_per_epoch=2, eval_size=8)
    run = train_induction(config, progress=False, device="cpu")
    assert [row["step"] for row in run.history] == [2, 4]
    assert {"loss_repeated", "icl_score", "prefix_L1H2", "copying_L1H1", "previous_L1H1"} <= set(run.history[0])
    assert snapshot_steps(run) == [0, 2, 4]
    final = snapshot_model(run, 4)
    for key, value in run.model.state_dict().items():
        torch.testing.assert_close(final.state_dict()[key], value)
    again = train_induction(config, progress=False, device="cpu")          # loads, no training
    assert again.history == run.history
    with pytest.raises(KeyError, match="no snapshot"):
        snapshot_model(run, 3)
    text = "abcabcab " * 40
    corpus = char_corpus(text, valid_fraction=0.2)
    text_run = train_induction(InductionConfig(**{**config.__dict__, "task": "text"}), corpus, text,
                               progress=False, device="cpu")
    assert "valid_loss" in text_run.history[-1]
    with pytest.raises(ValueError, match="corpus"):
        train_induction(InductionConfig(task="text"), progress=False)


@pytest.mark.parametrize("score", [previous_token_score, first_position_attention])
def test_scores_of_a_single_position_raise_one_line(score):
    with pytest.raises(ValueError, match=f"{score.__name__} needs at least two positions"):
        score(torch.ones(1, 1))
    with pytest.raises(ValueError, match="must be"):
        score(torch.ones(2, 3))
