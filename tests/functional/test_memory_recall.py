"""Closed-form memories (functional/memory_recall.py, nn/recall.py): what each stores, measured.

The claims of chapter 14's recall section, as tests: the delta rule stores up to d_k
orthonormal pairs exactly, and so does linear attention without a feature map, while chapter
8's positive feature map cross-talks even then; where they differ is overwriting a key,
repeated writes of non-orthogonal keys, and the newest pairs against the older ones."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from attncourse.functional.memory_recall import (
    key_codebook,
    memory_reads,
    read_error,
    recall_accuracy,
)
from attncourse.nn.recall import memory_recall, recall_against_pairs

D_K, BATCH, N_VALUES = 16, 128, 64


def _pairs(n, orthogonal, seed=0):
    g = torch.Generator().manual_seed(seed)
    if orthogonal:  # each context its own n of the d_k orthonormal directions
        codebook = key_codebook(D_K, D_K, orthogonal=True, generator=g)
        keys = codebook[torch.rand(BATCH, D_K, generator=g).argsort(1)[:, :n]]
    else:
        keys = F.normalize(torch.randn(BATCH, n, D_K, generator=g, dtype=torch.float64), dim=-1)
    symbols = torch.randint(0, N_VALUES, (BATCH, n), generator=g)
    return keys, F.one_hot(symbols, N_VALUES).double(), symbols


def test_reads_against_sums_written_here():
    keys, values, _ = _pairs(5, orthogonal=False)
    queries = keys[:, [4, 0, 2]]
    crosstalk = torch.einsum("bqd,bjd,bjv->bqv", queries, keys, values)  # sum_j (q . k_j) v_j
    torch.testing.assert_close(memory_reads("linear", keys, values, queries), crosstalk, rtol=0, atol=1e-12)
    sdpa = F.scaled_dot_product_attention(queries, keys, values, scale=3.0)
    torch.testing.assert_close(memory_reads("softmax", keys, values, queries, scale=3.0), sdpa, rtol=0, atol=1e-12)
    phi_q, phi_k = F.elu(queries) + 1, F.elu(keys) + 1
    weights = phi_q @ phi_k.transpose(1, 2)
    torch.testing.assert_close(memory_reads("linear-elu", keys, values, queries),
                               (weights / weights.sum(-1, keepdim=True)) @ values, rtol=0, atol=1e-12)


@pytest.mark.parametrize("n", [4, 8, D_K])
def test_up_to_d_k_orthonormal_pairs_are_stored_exactly_by_the_delta_rule(n):
    keys, values, symbols = _pairs(n, orthogonal=True)
    for rule in ("delta", "linear"):  # without a feature map, linear attention is exact here too
        assert read_error(memory_reads(rule, keys, values, keys), values) < 1e-12
    # chapter 8's phi = elu + 1 makes every key overlap every other: crosstalk
    reads = memory_reads("linear-elu", keys, values, keys)
    assert read_error(reads, values) > 0.5 and recall_accuracy(reads, symbols) < 0.6
    # the gated delta rule with a fixed decay a: pair j of n is read as a^(n - j) v_j, exactly
    faded = memory_reads("gated-delta", keys, values, keys, decay=0.8)
    kept = 0.8 ** torch.arange(n - 1, -1, -1, dtype=torch.float64)
    torch.testing.assert_close(faded, kept[None, :, None] * values, rtol=0, atol=1e-12)


def test_overwriting_a_key_replaces_its_value_in_the_delta_rule_and_adds_to_it_in_linear_attention():
    keys, old, _ = _pairs(8, orthogonal=True)
    _, new, new_symbols = _pairs(8, orthogonal=True, seed=1)
    both_keys, both_values = torch.cat([keys, keys], 1), torch.cat([old, new], 1)
    assert read_error(memory_reads("delta", both_keys, both_values, keys), new) < 1e-12
    linear = memory_reads("linear", both_keys, both_values, keys)
    torch.testing.assert_close(linear, old + new, rtol=0, atol=1e-12)
    assert recall_accuracy(linear, new_symbols) < 0.7  # a tie between old and new, wherever they differ


def test_written_again_and_again_non_orthogonal_pairs_converge_in_the_delta_rule_only():
    keys, values, _ = _pairs(4, orthogonal=False)
    errors = [read_error(memory_reads("delta", keys, values, keys, passes=p), values) for p in (1, 4, 16, 64)]
    assert errors[0] > 0.5 and errors[-1] < 1e-6 and errors == sorted(errors, reverse=True)
    assert read_error(memory_reads("linear", keys, values, keys), values) > 0.5
    with pytest.raises(ValueError, match="passes=4 is for the delta rules"):
        memory_reads("linear", keys, values, keys, passes=4)


def test_past_d_k_pairs_the_delta_rule_keeps_the_newest_and_linear_attention_blurs_them_all():
    keys, values, symbols = _pairs(4 * D_K, orthogonal=False)
    delta, linear = (memory_reads(rule, keys, values, keys) for rule in ("delta", "linear"))
    assert read_error(delta[:, -1:], values[:, -1:]) < 1e-12  # the newest pair, exactly
    assert recall_accuracy(delta[:, -4:], symbols[:, -4:]) > 0.9
    assert recall_accuracy(delta[:, :32], symbols[:, :32]) < 0.2
    assert recall_accuracy(linear[:, :32], symbols[:, :32]) > 0.7  # old pairs blurred, not lost
    assert recall_accuracy(linear[:, -4:], symbols[:, -4:]) < 0.95  # nor the newest exact


def test_recall_against_pairs_on_mqar():
    rules = {"softmax": {"rule": "softmax"}, "linear-elu": {"rule": "linear-elu"}, "delta": {"rule": "delta"}}
    curves = recall_against_pairs(rules, [4, 16, 64], d_k=D_K, batch=16)
    assert curves["softmax"] == [1.0, 1.0, 1.0]  # keeps every pair: no fixed state
    for label in ("linear-elu", "delta"):
        assert curves[label] == sorted(curves[label], reverse=True) and curves[label][-1] < 0.4, curves
    assert recall_against_pairs(rules, [4, 16], d_k=D_K, batch=16) == recall_against_pairs(rules, [4, 16], d_k=D_K,
                                                                                           batch=16)


def test_bad_options_are_refused():
    keys, values, _ = _pairs(4, orthogonal=False)
    with pytest.raises(ValueError, match="rule must be one of"):
        memory_reads("hopfield", keys, values, keys)
    with pytest.raises(ValueError, match="decay is required by rule 'gated-delta'"):
        memory_reads("gated-delta", keys, values, keys)
    with pytest.raises(ValueError, match="decay is refused by rule 'delta'"):
        memory_reads("delta", keys, values, keys, decay=0.5)
    with pytest.raises(ValueError, match=r"values \(128, 3, 64\)"):
        memory_reads("delta", keys, values[:, :3], keys)
    with pytest.raises(ValueError, match="at most d_k=16 orthogonal keys"):
        key_codebook(17, D_K, orthogonal=True)
    from attncourse.data.mqar import multi_query_recall
    with pytest.raises(ValueError, match="codebook must be"):
        memory_recall("delta", multi_query_recall(2, 3, 3, 40, 5), key_codebook(20, D_K))
