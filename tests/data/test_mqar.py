"""Multi-query associative recall (data/mqar.py): seeded, distinct keys and queries, the token layout."""

from __future__ import annotations

import pytest
import torch

from attncourse.data.mqar import IGNORE, multi_query_recall


def _batch(seed=0, **kwargs):
    sizes = {"batch": 16, "n_pairs": 6, "n_queries": 4, "n_keys": 10, "n_values": 5} | kwargs
    return multi_query_recall(**sizes, generator=torch.Generator().manual_seed(seed))


def test_the_same_seed_gives_the_same_contexts_and_another_seed_others():
    a, b, c = _batch(), _batch(), _batch(seed=1)
    for name in ("keys", "values", "asked"):
        assert torch.equal(getattr(a, name), getattr(b, name))
    assert not torch.equal(a.keys, c.keys)


def test_keys_and_queries_are_distinct_and_the_answers_are_the_stored_values():
    batch = _batch(n_pairs=10, n_queries=10)
    for row in range(16):
        assert len(set(batch.keys[row].tolist())) == 10 and len(set(batch.asked[row].tolist())) == 10
        stored = dict(zip(batch.keys[row].tolist(), batch.values[row].tolist(), strict=True))
        assert [stored[q] for q in batch.queries[row].tolist()] == batch.answers[row].tolist()
    assert batch.keys.max() < 10 and batch.values.max() < 5 and batch.values.min() >= 0


def test_the_tokens_are_the_pairs_then_the_queries_with_targets_at_the_queries_only():
    batch = _batch()
    inputs, targets = batch.tokens()
    row = 3
    keys, values = batch.keys[row].tolist(), batch.values[row].tolist()
    expected = [t for pair in zip(keys, [v + 10 for v in values], strict=True) for t in pair]
    expected += batch.queries[row].tolist()
    assert inputs[row].tolist() == expected
    assert targets[row, :12].tolist() == [IGNORE] * 12
    assert targets[row, 12:].tolist() == [a + 10 for a in batch.answers[row].tolist()]
    assert inputs.shape == targets.shape == (16, 2 * 6 + 4)


@pytest.mark.parametrize(("change", "message"), [
    ({"n_pairs": 11}, "distinct keys cannot be drawn"),
    ({"n_queries": 7}, "cannot be asked of n_pairs=6"),
    ({"n_values": 0}, "n_values must be a positive int"),
    ({"batch": True}, "batch must be a positive int"),
])
def test_bad_sizes_are_refused_by_name(change, message):
    with pytest.raises(ValueError, match=message):
        _batch(**change)
