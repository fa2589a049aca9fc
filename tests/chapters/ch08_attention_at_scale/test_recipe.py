"""Associative recall: the data, the model with softmax or linear attention, a tiny cached run."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attncourse.chapters.ch08_attention_at_scale.recipe import (
    RecallConfig,
    recall_accuracy,
    train_recall,
)
from attncourse.data import associative_recall
from attncourse.functional import batched_linear_attention, linear_attention
from attncourse.nn import RecallModel


def test_recall_batches_hold_distinct_keys_and_the_asked_pair():
    batch = associative_recall(50, 6, 10, 4, torch.Generator().manual_seed(0))
    assert batch.keys.shape == batch.values.shape == (50, 6) and batch.query.shape == (50,)
    for keys, values, query, target in zip(batch.keys, batch.values, batch.query, batch.target):
        assert len(set(keys.tolist())) == 6 and keys.max() < 10 and values.max() < 4
        (where,) = (keys == query).nonzero(as_tuple=True)
        assert values[where].item() == target.item()
    again = associative_recall(50, 6, 10, 4, torch.Generator().manual_seed(0))
    assert torch.equal(again.keys, batch.keys) and torch.equal(again.target, batch.target)


@pytest.mark.parametrize("args, match", [((2, 11, 10, 4), "distinct"), ((0, 1, 1, 1), "at least 1")])
def test_recall_bad_sizes_are_named(args, match):
    with pytest.raises(ValueError, match=match):
        associative_recall(*args)


def test_batched_linear_attention_equals_the_numpy_one():
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(2, 3, 5, 4)), rng.normal(size=(2, 3, 7, 4)), rng.normal(size=(2, 3, 7, 6))
    out = batched_linear_attention(*(torch.from_numpy(a) for a in (q, k, v))).numpy()
    for b in range(2):
        for h in range(3):
            np.testing.assert_allclose(out[b, h], linear_attention(q[b, h], k[b, h], v[b, h]), rtol=1e-12)
    with pytest.raises(ValueError, match="d_k"):
        batched_linear_attention(torch.ones(2, 3), torch.ones(4, 2), torch.ones(4, 2))


@pytest.mark.parametrize("attention", ["softmax", "linear"])
def test_recall_model_scores_every_value_symbol(attention):
    model = RecallModel(10, 7, d_model=8, d_k=4, attention=attention)
    batch = associative_recall(3, 5, 10, 7, torch.Generator().manual_seed(1))
    assert model(batch).shape == (3, 7)
    with pytest.raises(ValueError, match="attention"):
        RecallModel(10, 7, attention="sparse")


def test_a_short_run_learns_and_loads_from_its_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(tmp_path))
    config = RecallConfig(n_keys=8, n_values=8, d_model=16, d_k=8, pair_counts=(2, 4), steps_per_epoch=40,
                          epochs=3, batch_size=64)
    run = train_recall(config, progress=False, device="cpu")
    assert run.out_dir.parent == tmp_path / "recall"
    assert run.history[-1]["train_loss"] < run.history[0]["train_loss"]
    accuracy = recall_accuracy(run.model, config, 2)
    assert accuracy > 1 / 8 + 0.2  # well above guessing
    again = train_recall(config, progress=False, device="cpu")
    assert again.history == run.history and recall_accuracy(again.model, config, 2) == accuracy
    with pytest.raises(ValueError, match="pair_counts"):
        RecallConfig(pair_counts=(200,))
