"""Chapter 14's MQAR model and recipe: shapes, what the queries see, the cached run, errors."""

import dataclasses

import pytest
import torch

from attncourse.chapters.ch14_attention_as_memory.recipe import (
    MQARConfig,
    mqar_accuracy,
    train_mqar,
)
from attncourse.data.mqar import multi_query_recall
from attncourse.nn.recall import MQARModel


@pytest.mark.parametrize("attention", ["gqa", "linear", "deltanet", "gated-deltanet"])
def test_the_model_scores_each_query_and_reads_only_the_past(attention):
    torch.manual_seed(0)
    model = MQARModel(attention, n_keys=16, n_values=8, d_model=8, num_heads=2).eval()
    batch = multi_query_recall(3, 5, 4, 16, 8, torch.Generator().manual_seed(0))
    scores = model(batch)
    assert scores.shape == (3, 4, 8)
    # a causal layer: changing the last query changes no earlier query's scores
    changed = dataclasses.replace(batch, asked=torch.cat([batch.asked[:, :3], (batch.asked[:, 3:] + 1) % 5], 1))
    again = model(changed)
    torch.testing.assert_close(again[:, :3], scores[:, :3], rtol=0, atol=1e-6)


def test_the_model_refuses_an_unknown_attention():
    with pytest.raises(ValueError, match="nope"):
        MQARModel("nope", 4, 4)


def test_the_config_refuses_bad_options():
    with pytest.raises(ValueError, match="attention"):
        MQARConfig("mla")
    with pytest.raises(ValueError, match="pair_counts"):
        MQARConfig(pair_counts=(4, 200))


def test_a_short_run_learns_and_loads_from_its_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNCOURSE_RUNS", str(tmp_path))
    torch.set_num_threads(1)
    config = MQARConfig("gqa", n_keys=16, n_values=8, d_model=16, pair_counts=(2, 4),
                        batch_size=32, steps_per_epoch=40, epochs=2)
    run = train_mqar(config, progress=False, device="cpu")
    assert run.out_dir.parent == tmp_path / "mqar" and run.out_dir.name.startswith("gqa-seed0")
    assert len(run.history) == 2 and run.history[-1]["train_loss"] < run.history[0]["train_loss"]
    assert mqar_accuracy(run.model, config, 2) > 1 / 8 + 0.2     # better than chance
    loaded = train_mqar(config, progress=False, device="cpu")
    assert loaded.history == run.history
    for a, b in zip(loaded.model.parameters(), run.model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
