"""benchmarks/ensemble_vmap.py: K seeds trained as one vmapped model equal K separate runs; the ratio is reported."""

from __future__ import annotations

import json

import pytest
import torch

from attncourse.chapters.ch03b_attention_over_images.recipe import (
    CaptionConfig,
    build_captioner,
    load_canvases,
)
from tests.benchmarks.test_scripts import load

TINY = CaptionConfig(n_train=40, n_valid=1, n_test=1, feature_dim=6, hidden_dim=8, emb_dim=4, channels=4)


def _separate_and_ensemble(module, seeds, orders, steps):
    images, labels = load_canvases(TINY).train.tensors()
    models = []
    for seed in seeds:
        torch.manual_seed(seed)
        models.append(build_captioner(TINY))
    ensemble = module.Ensemble(models, module.teacher_forced_loss, lr=TINY.lr)
    optimizers = [torch.optim.Adam(m.parameters(), lr=TINY.lr) for m in models]
    for s in range(steps):
        for model, optimizer, order in zip(models, optimizers, orders):
            loss = module.teacher_forced_loss(model, images[order[s]], labels[order[s]])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        index = torch.stack([order[s] for order in orders])
        ensemble.step(images[index], labels[index])
    return models, ensemble


def _max_diff(models, ensemble):
    return max(float((ensemble.params[name][k] - value).detach().abs().max())
               for k, model in enumerate(models) for name, value in model.named_parameters())


def test_each_member_equals_its_separate_run_with_its_own_seed_and_data_order():
    module = load("ensemble_vmap")
    seeds = [0, 1, 2]
    orders = module.member_orders(seeds, 40, 5, 6)
    assert not torch.equal(orders[0][0], orders[1][0])  # the members see different batches
    models, ensemble = _separate_and_ensemble(module, seeds, orders, 6)
    assert _max_diff(models, ensemble) <= 1e-5
    # the members have moved away from their initial weights, and from each other
    torch.manual_seed(0)
    start = build_captioner(TINY)
    assert not torch.allclose(models[0].output.weight, start.output.weight, atol=1e-3)
    assert not torch.allclose(ensemble.params["output.weight"][0], ensemble.params["output.weight"][1])
    # member() gives back an ordinary module holding member k's weights
    copy = ensemble.member(2, build_captioner(TINY))
    torch.testing.assert_close(copy.output.weight, models[2].output.weight, rtol=0, atol=1e-5)


def test_the_equality_check_sees_a_member_trained_on_another_data_order():
    module = load("ensemble_vmap")
    orders = module.member_orders([0, 1], 40, 5, 6)
    models, ensemble = _separate_and_ensemble(module, [0, 1], orders, 6)
    swapped = [orders[1], orders[0]]  # the ensemble's member 0 reads member 1's batches
    ensemble_swapped = _separate_and_ensemble(module, [0, 1], swapped, 6)[1]
    ensemble.params = ensemble_swapped.params
    assert _max_diff(models, ensemble) > 1e-4


def test_an_ensemble_needs_one_architecture():
    module = load("ensemble_vmap")
    other = CaptionConfig(**{**TINY.__dict__, "hidden_dim": 10})
    with pytest.raises(ValueError, match="differ in names or shapes"):
        module.Ensemble([build_captioner(TINY), build_captioner(other)], module.teacher_forced_loss, lr=1e-3)
    with pytest.raises(ValueError, match="at least one model"):
        module.Ensemble([], module.teacher_forced_loss, lr=1e-3)


def test_ensemble_benchmark_reports_the_ratio_vmapped_over_separate(tmp_path, capsys):
    out = tmp_path / "ensemble.json"
    rows = load("ensemble_vmap").main([
        "--members", "2", "--batch", "4", "--steps", "2", "--repeats", "1", "--check-steps", "3",
        "--n-train", "30", "--width-scale", "0.25", "--json", str(out),
    ])
    assert [(r["members"], r["batch"]) for r in rows] == [(2, 4)]
    row = rows[0]
    assert row["ratio"] == pytest.approx(row["vmapped_ms"] / row["separate_ms"]) and row["ratio"] > 0
    assert row["max_abs_diff"] <= 1e-5
    assert "ratio = vmapped / separate" in capsys.readouterr().out
    assert json.loads(out.read_text())["rows"] == rows
